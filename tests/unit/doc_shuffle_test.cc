// DocPermutation (src/data/doc_shuffle.h): a bijection of [0, n) for every n, seeded, and the
// identity for seed 0.
#include "data/doc_shuffle.h"

#include <gtest/gtest.h>

#include <vector>

namespace vt::data {

TEST(DocPermutation, IsABijectionForManySizes) {
  for (int64_t n : {0, 1, 2, 3, 4, 5, 15, 16, 17, 100, 255, 256, 257, 1000, 4097}) {
    for (uint64_t seed : {1ull, 7ull, 0x123456789ull}) {
      DocPermutation p(n, seed);
      std::vector<int> seen(n, 0);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t j = p.at(i);
        ASSERT_GE(j, 0);
        ASSERT_LT(j, n);
        ++seen[j];
      }
      for (int64_t j = 0; j < n; ++j) ASSERT_EQ(seen[j], 1) << "n=" << n << " seed=" << seed;
    }
  }
}

TEST(DocPermutation, SeedZeroIsTheIdentityAndSeedsDiffer) {
  DocPermutation id(1000, 0), a(1000, 3), b(1000, 4);
  int fixed_a = 0, same_ab = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(id.at(i), i);
    fixed_a += a.at(i) == i;
    same_ab += a.at(i) == b.at(i);
  }
  EXPECT_LT(fixed_a, 20);  // about 1 expected
  EXPECT_LT(same_ab, 20);
}

}  // namespace vt::data
