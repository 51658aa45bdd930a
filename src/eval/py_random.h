// PyRandom: the parts of CPython's `random.Random` that nanochat's CORE evaluation draws from, bit
// for bit, so that vtrain shuffles each task and picks few-shot examples exactly as it does:
// seeding from an int (init_by_array over the seed's 32-bit words), the Mersenne Twister,
// getrandbits(k <= 32), _randbelow, shuffle (Fisher-Yates from the end) and sample (the pool or
// the set algorithm, chosen by the same size rule).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

namespace vt::eval {

class PyRandom {
 public:
  explicit PyRandom(uint64_t seed);  // random.Random(seed) for seed >= 0
  uint32_t getrandbits(int k);       // 1 <= k <= 32
  int64_t randbelow(int64_t n);      // uniform in [0, n), n >= 1 (n < 2^32)
  template <typename T>
  void shuffle(std::vector<T>& x) {
    for (int64_t i = static_cast<int64_t>(x.size()) - 1; i > 0; --i) {
      const int64_t j = randbelow(i + 1);
      std::swap(x[i], x[j]);
    }
  }
  // random.sample(population, k): k distinct elements, in selection order.
  std::vector<int64_t> sample(const std::vector<int64_t>& population, int64_t k);

 private:
  uint32_t next32();
  uint32_t mt_[624];
  int index_ = 624;
};

}  // namespace vt::eval
