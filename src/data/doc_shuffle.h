// DocPermutation: the document-level shuffle of `vtrain prepare --shuffle-seed S`, a bijection of
// [0, n) computed per index (a 4-round Feistel network on the smallest even power of two >= n,
// with cycle walking back into [0, n)), so no table of n entries is ever held. Output document i
// is source document at(i). A seed of 0 is the identity (no shuffle).
#pragma once
#include <cstdint>

namespace vt::data {

class DocPermutation {
 public:
  DocPermutation(int64_t n, uint64_t seed);
  int64_t at(int64_t i) const;
  int64_t size() const { return n_; }

 private:
  uint64_t round(int r, uint64_t x) const;
  int64_t n_;
  uint64_t seed_;
  int half_bits_ = 1;
  uint64_t half_mask_ = 1;
};

}  // namespace vt::data
