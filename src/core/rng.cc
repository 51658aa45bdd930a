// xoshiro256** with splitmix64 seeding and Box-Muller normals.
#include "core/rng.h"

#include <cmath>

namespace vt {

static uint64_t splitmix64(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

void Rng::reseed(uint64_t seed) {
  uint64_t x = seed;
  for (auto& s : s_) s = splitmix64(x);
  has_spare_ = false;
}

uint64_t Rng::next_u64() {
  uint64_t result = rotl(s_[1] * 5, 7) * 9;
  uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

double Rng::uniform(double lo, double hi) { return lo + (hi - lo) * uniform(); }

double Rng::normal(double mean, double stddev) {
  if (has_spare_) {
    has_spare_ = false;
    return mean + stddev * spare_;
  }
  double u1 = uniform();
  double u2 = uniform();
  if (u1 < 1e-300) u1 = 1e-300;
  double r = std::sqrt(-2.0 * std::log(u1));
  double th = 2.0 * M_PI * u2;
  spare_ = r * std::sin(th);
  has_spare_ = true;
  return mean + stddev * r * std::cos(th);
}

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ULL;
  }
  return h;
}

Rng Rng::for_name(uint64_t seed, const std::string& name) {
  uint64_t x = seed ^ 0x5bd1e995ULL;
  uint64_t a = splitmix64(x);
  return Rng(a ^ fnv1a64(name));
}

void Rng::get_state(uint64_t out[4]) const {
  for (int i = 0; i < 4; ++i) out[i] = s_[i];
}

void Rng::set_state(const uint64_t in[4]) {
  for (int i = 0; i < 4; ++i) s_[i] = in[i];
  has_spare_ = false;
}

}  // namespace vt
