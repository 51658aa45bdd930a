// Helpers shared by the CPU kernel tests: seeded random vectors, float/double casts,
// normwise closeness checks and central finite-difference gradient checks.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace vt::test {

using Vec = std::vector<double>;

inline Vec randn(size_t n, uint64_t seed, double stddev = 1.0) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<double> dist(0.0, stddev);
  Vec v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

inline Vec randu(size_t n, uint64_t seed, double lo, double hi) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  Vec v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

template <class To, class From>
std::vector<To> cast(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

inline double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

inline double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Normwise-relative comparison: |got_i - ref_i| <= rtol * (|ref_i| + max_j |ref_j|).
// Non-finite values always fail.
inline void expect_close(const Vec& got, const Vec& ref, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const double scale = std::max(max_abs(ref), 1e-300);
  size_t bad = 0;
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(got[i] - ref[i]);
    const double tol = rtol * (std::abs(ref[i]) + scale);
    if (!(err <= tol)) ++bad;
    if (!(err <= worst)) {
      worst = err;
      worst_i = i;
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << got.size() << " elements off; worst at "
                     << worst_i << ": got " << got[worst_i] << " want " << ref[worst_i]
                     << " (|err| " << worst << ", scale " << scale << ")";
}

template <class T>
void expect_close(const std::vector<T>& got, const Vec& ref, double rtol, const std::string& what) {
  expect_close(cast<double>(got), ref, rtol, what);
}

// Indices to probe: all of them when n <= max_count, else a seeded random subset.
inline std::vector<size_t> probe_indices(size_t n, size_t max_count, uint64_t seed) {
  std::vector<size_t> idx(n);
  std::iota(idx.begin(), idx.end(), size_t(0));
  if (n <= max_count) return idx;
  std::mt19937_64 gen(seed);
  std::shuffle(idx.begin(), idx.end(), gen);
  idx.resize(max_count);
  std::sort(idx.begin(), idx.end());
  return idx;
}

// Central finite differences of objective() with respect to x[i] for the probed i, compared
// normwise with the analytic gradient: |fd - an| <= tol * (|an| + max|grad|).
inline void check_fd(Vec& x, const std::function<double()>& objective, const Vec& grad,
                     const std::string& what, size_t max_probes = 400, double h = 1e-5,
                     double tol = 1e-6) {
  ASSERT_EQ(x.size(), grad.size()) << what;
  const double scale = std::max(max_abs(grad), 1e-6);
  size_t bad = 0;
  std::string first;
  for (size_t i : probe_indices(x.size(), max_probes, 1234 + x.size())) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = objective();
    x[i] = x0 - h;
    const double fm = objective();
    x[i] = x0;
    const double fd = (fp - fm) / (2 * h);
    const double err = std::abs(fd - grad[i]);
    if (!(err <= tol * (std::abs(grad[i]) + scale))) {
      if (bad++ == 0) {
        std::ostringstream os;
        os.precision(12);
        os << "index " << i << ": fd " << fd << " analytic " << grad[i];
        first = os.str();
      }
    }
  }
  EXPECT_EQ(bad, 0u) << what << ": finite differences disagree, first at " << first
                     << " (grad scale " << scale << ")";
}

}  // namespace vt::test
