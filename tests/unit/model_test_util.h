// Shared by the model tests: the small config they all use (several layers, GQA, a window
// shorter than the sequence, a vocabulary that is not a multiple of 64).
#pragma once
#include <gtest/gtest.h>

#include "model/config.h"

namespace vt::testing {

inline ModelConfig tiny_config(ValueMode mode, int seq_len = 32) {
  ModelConfig c;
  c.n_layer = 6;
  c.n_embd = 64;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.head_dim = 16;
  c.vocab_size = 251;
  c.seq_len = seq_len;
  c.short_window = 8;
  c.value_mode = mode;
  EXPECT_TRUE(c.finalize().ok());
  return c;
}

}  // namespace vt::testing
