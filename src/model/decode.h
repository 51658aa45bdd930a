// Incremental decoding with a KV cache that follows the value mode and the block shape, as the
// papers intend: every layer caches its keys; a layer caches its values only when they cannot
// be rebuilt from what is already kept. `bov` target layers keep no V (values are looked up from
// the table by the cached token ids), `svformer` and `v1` target layers keep no V (they read
// layer 0's). A layer's additions to softmax attention (shaped attention's gains and centring
// term, NeuTRENO's) are training's (layer_attention.h), applied by the same mix kernel to the
// cached window. The block shapes' own forward runs token by token through DecodeKit, so a shape
// is written once for training and decoding. Single sequence, single process (tp = 1, one
// pipeline stage), parameters on the CPU.
#pragma once
#include <cstdint>
#include <vector>

#include "model/gpt.h"

namespace vt {

class Decoder {
 public:
  // `max_len` tokens at most (prompt + generated); at most the model's seq_len.
  Decoder(const GPT& model, int max_len);

  // Feeds the token at the next position; returns soft-capped logits over the real vocabulary.
  std::vector<float> step(int32_t token);
  int position() const { return pos_; }
  int max_len() const { return max_len_; }

  // Does layer i store values in the cache?
  bool caches_values(int layer) const;
  // Bytes the cache holds per token (fp32 keys/values, int32 ids when kept).
  int64_t kv_bytes_per_token() const;
  // What a standard cache (K and V in every layer) would hold per token.
  int64_t baseline_kv_bytes_per_token() const;

 private:
  friend class DecodeKit;
  // Layer i's value row at cached position s (from the cache, or rebuilt by the value mode).
  void value_row(int layer, int s, float* out) const;

  const GPT& model_;
  const ModelConfig& cfg_;
  int max_len_;
  int pos_ = 0;
  int64_t K_;  // kv_heads * hd
  bool keeps_ids_ = false;
  std::vector<std::vector<float>> keys_, values_;
  std::vector<int32_t> ids_;
  std::vector<double> value_coef_;              // the value mode's per-pass coefficients
  std::vector<Tensor> ctx_values_;              // this token's kept context values (V1, ...)
  Tensor x0_;                                   // this token's normalized embedding
  std::vector<float> prev_emb_;                 // the previous token's (smear gate), pre-smear
  std::vector<Tensor> bias_;                     // per layer: the --attn-bias bias (T, T)
  std::vector<Tensor> rowscale_;                 // per layer: its rowscale (T,) (--spa-rescale on)
  int64_t bias_T_ = 0;
  int32_t token_ = 0;
};

}  // namespace vt
