// Deterministic random numbers for init and sampling: a splitmix64/xoshiro256** generator with
// our own normal/uniform transforms, so streams are identical across compilers and layouts.
// Each parameter draws from its own stream keyed by (seed, name), so initialization does not
// depend on the order of registration or on which ranks own which slices.
#pragma once
#include <cstdint>
#include <string>

namespace vt {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next_u64();
  double uniform();                     // [0, 1)
  double uniform(double lo, double hi); // [lo, hi)
  double normal(double mean = 0.0, double stddev = 1.0);
  // Stream for a named parameter: independent of every other name.
  static Rng for_name(uint64_t seed, const std::string& name);
  // Opaque state for checkpoints.
  void get_state(uint64_t out[4]) const;
  void set_state(const uint64_t in[4]);

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

uint64_t fnv1a64(const std::string& s);

}  // namespace vt
