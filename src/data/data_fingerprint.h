// The identity of a data directory's training data, as a checkpoint records it: a resumed run
// must continue on the data it was trained on, not on another corpus that happens to have the
// same shard and token counts (the same files prepared with another --shuffle-seed, another
// tokenizer of the same size, another directory).
//
// data_fingerprint = "v1:" + 16 hex digits of a 64-bit FNV-1a hash over the tokenizer file's
// bytes and, for each training shard in order, its file name, its size and 16 blocks of 4 KiB
// at evenly spaced offsets (head and tail included). It depends on the content, not on where the
// directory lies (a copied or moved directory keeps it), and reads at most 64 KiB per shard, so
// it costs little at any corpus size. What it cannot see: a change confined to bytes between
// the sampled blocks of a shard (the shards vtrain prepare writes change everywhere when their
// documents or tokenizer change).
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt::data {

absl::StatusOr<std::string> data_fingerprint(const std::string& tokenizer_path,
                                             const std::vector<std::string>& train_shards);

}  // namespace vt::data
