// DocPermutation (see doc_shuffle.h).
#include "data/doc_shuffle.h"

#include "core/check.h"

namespace vt::data {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

DocPermutation::DocPermutation(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  VT_CHECK(n >= 0);
  while ((int64_t{1} << (2 * half_bits_)) < n) ++half_bits_;
  half_mask_ = (uint64_t{1} << half_bits_) - 1;
}

uint64_t DocPermutation::round(int r, uint64_t x) const {
  return splitmix64(splitmix64(seed_ * 4 + static_cast<uint64_t>(r)) ^ x) & half_mask_;
}

int64_t DocPermutation::at(int64_t i) const {
  VT_CHECK(i >= 0 && i < n_);
  if (seed_ == 0) return i;
  uint64_t x = static_cast<uint64_t>(i);
  do {  // cycle walking: a bijection of [0, 4^h) restricted to [0, n) stays a bijection
    uint64_t left = x >> half_bits_, right = x & half_mask_;
    for (int r = 0; r < 4; ++r) {
      const uint64_t next = left ^ round(r, right);
      left = right;
      right = next;
    }
    x = (left << half_bits_) | right;
  } while (x >= static_cast<uint64_t>(n_));
  return static_cast<int64_t>(x);
}

}  // namespace vt::data
