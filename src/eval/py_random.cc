// PyRandom (see py_random.h): MT19937 with CPython's init_by_array seeding (_randommodule.c,
// after the reference code of Matsumoto and Nishimura), written out here.
#include "eval/py_random.h"

#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "core/check.h"

namespace vt::eval {

PyRandom::PyRandom(uint64_t seed) {
  // CPython: key = the absolute value's 32-bit words, least significant first ([0] for 0).
  std::vector<uint32_t> key;
  for (uint64_t s = seed; s > 0; s >>= 32) key.push_back(static_cast<uint32_t>(s));
  if (key.empty()) key.push_back(0);
  // init_genrand(19650218) then init_by_array(key), as in the reference MT19937 code.
  constexpr int N = 624;
  uint32_t mt[N];
  mt[0] = 19650218u;
  for (int i = 1; i < N; ++i) mt[i] = 1812433253u * (mt[i - 1] ^ (mt[i - 1] >> 30)) + static_cast<uint32_t>(i);
  int i = 1;
  size_t j = 0;
  const int klen = static_cast<int>(key.size());
  for (int k = N > klen ? N : klen; k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1664525u)) + key[j] + static_cast<uint32_t>(j);
    ++i;
    ++j;
    if (i >= N) {
      mt[0] = mt[N - 1];
      i = 1;
    }
    if (j >= key.size()) j = 0;
  }
  for (int k = N - 1; k > 0; --k) {
    mt[i] = (mt[i] ^ ((mt[i - 1] ^ (mt[i - 1] >> 30)) * 1566083941u)) - static_cast<uint32_t>(i);
    ++i;
    if (i >= N) {
      mt[0] = mt[N - 1];
      i = 1;
    }
  }
  mt[0] = 0x80000000u;
  std::copy(mt, mt + N, mt_);
  index_ = N;
}

uint32_t PyRandom::next32() {
  constexpr int N = 624, M = 397;
  constexpr uint32_t kUpper = 0x80000000u, kLower = 0x7fffffffu, kMatrix = 0x9908b0dfu;
  if (index_ >= N) {
    for (int k = 0; k < N; ++k) {
      const uint32_t y = (mt_[k] & kUpper) | (mt_[(k + 1) % N] & kLower);
      mt_[k] = mt_[(k + M) % N] ^ (y >> 1) ^ ((y & 1u) ? kMatrix : 0u);
    }
    index_ = 0;
  }
  uint32_t y = mt_[index_++];
  y ^= y >> 11;
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= y >> 18;
  return y;
}

uint32_t PyRandom::getrandbits(int k) {
  VT_CHECK(k >= 1 && k <= 32);
  return next32() >> (32 - k);
}

int64_t PyRandom::randbelow(int64_t n) {
  VT_CHECK(n >= 1 && n < (int64_t{1} << 32));
  int k = 0;
  while ((int64_t{1} << k) <= n) ++k;  // n.bit_length()
  int64_t r = getrandbits(k);
  while (r >= n) r = getrandbits(k);
  return r;
}

std::vector<int64_t> PyRandom::sample(const std::vector<int64_t>& population, int64_t k) {
  const int64_t n = static_cast<int64_t>(population.size());
  VT_CHECK(k >= 0 && k <= n);
  std::vector<int64_t> result(k);
  int64_t setsize = 21;
  if (k > 5) setsize += static_cast<int64_t>(std::pow(4.0, std::ceil(std::log(k * 3.0) / std::log(4.0))));
  if (n <= setsize) {
    std::vector<int64_t> pool = population;
    for (int64_t i = 0; i < k; ++i) {
      const int64_t j = randbelow(n - i);
      result[i] = pool[j];
      pool[j] = pool[n - i - 1];
    }
  } else {
    std::unordered_set<int64_t> selected;
    for (int64_t i = 0; i < k; ++i) {
      int64_t j = randbelow(n);
      while (selected.count(j)) j = randbelow(n);
      selected.insert(j);
      result[i] = population[j];
    }
  }
  return result;
}

}  // namespace vt::eval
