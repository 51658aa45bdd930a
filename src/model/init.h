// Parameter initialization (docs/model.md, "Initialization"): every parameter is registered with
// an InitRule, and its global tensor is generated whole from its own random stream keyed by
// (seed, name); each rank then keeps its slice. So every layout starts from the same numbers,
// and a rule may reproduce the draw of another parameter (the aligned BoV tables reuse the W_V
// that x0v would draw) by asking for that name's stream.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/arena.h"

namespace vt {

struct InitRule {
  enum class Kind { kZeros, kConstant, kUniform, kNormal, kCustom };
  Kind kind = Kind::kZeros;
  double a = 0.0, b = 0.0;  // constant: a; uniform: [a, b); normal: std a
  // kCustom: the whole global tensor from the run seed.
  std::function<std::vector<float>(uint64_t seed)> custom;

  static InitRule zeros() { return {}; }
  static InitRule constant(double v) { return {Kind::kConstant, v, 0.0, {}}; }
  static InitRule uniform(double lo, double hi) { return {Kind::kUniform, lo, hi, {}}; }
  static InitRule normal(double stddev) { return {Kind::kNormal, stddev, 0.0, {}}; }
  static InitRule make(std::function<std::vector<float>(uint64_t seed)> f) {
    return {Kind::kCustom, 0.0, 0.0, std::move(f)};
  }
};

// The global tensor (row-major, n elements) of parameter `name` under `rule`.
std::vector<float> generate_init(const InitRule& rule, const std::string& name, int64_t n,
                                 uint64_t seed);

// n draws of U(lo, hi) / N(0, std) from the stream of `name`.
std::vector<float> uniform_init(uint64_t seed, const std::string& name, int64_t n, double lo,
                                double hi);
std::vector<float> normal_init(uint64_t seed, const std::string& name, int64_t n, double stddev);
// A (semi-)orthogonal rows x cols matrix (row-major) from the N(0, 1) stream of `name`: the
// draws, read as rows x cols, orthonormalized by Gram-Schmidt (applied twice) in double along
// the shorter side: orthonormal rows when rows <= cols (square included), else orthonormal
// columns. Unit singular values, as torch.nn.init.orthogonal_ with gain 1.
std::vector<float> orthogonal_init(uint64_t seed, const std::string& name, int64_t rows,
                                   int64_t cols);

// Copies this rank's slice (info.split) of `global` into `local`.
void copy_local_slice(const std::vector<float>& global, const ParamInfo& info, float* local);

}  // namespace vt
