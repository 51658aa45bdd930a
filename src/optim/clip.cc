// Gradient norms (deterministic chunked double sums) and global-norm clipping, on the store's
// device through ops (the CPU backend's sum_squares is the chunked sum below).
#include "optim/clip.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/ops.h"

namespace vt::optim {

namespace {
constexpr int64_t kChunk = int64_t{1} << 15;
}  // namespace

double sum_squares(const float* x, int64_t n) {
  if (n <= 0) return 0.0;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  if (chunks == 1) {
    double s = 0.0;
    for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return s;
  }
  std::vector<double> partial(chunks, 0.0);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t lo = c * kChunk;
    const int64_t hi = std::min(n, lo + kChunk);
    double s = 0.0;
    for (int64_t i = lo; i < hi; ++i) s += static_cast<double>(x[i]) * x[i];
    partial[c] = s;
  }
  double s = 0.0;
  for (double p : partial) s += p;
  return s;
}

double grad_sum_squares(const ParamStore& store) {
  VT_CHECK(store.finalized());
  std::vector<Tensor> grads;
  for (int i = 0; i < store.size(); ++i) grads.push_back(store.grad(i));
  return ops::sum_squares_list(grads);  // one device synchronization for the whole store
}

double grad_norm(const ParamStore& store) { return std::sqrt(grad_sum_squares(store)); }

double clip_scale(double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm)) return 1.0;
  return max_norm / (norm + 1e-6);
}

void scale_grads(ParamStore& store, double scale) {
  if (scale == 1.0) return;
  const float s = static_cast<float>(scale);
  for (int i = 0; i < store.size(); ++i) {
    const Tensor g = store.grad(i);
    ops::scale_copy(g, g, s);  // x[i] = s * x[i], in place
  }
}

double clip_grad_norm(ParamStore& store, double max_norm, double* applied_scale) {
  const double norm = grad_norm(store);
  const double scale = clip_scale(norm, max_norm);
  scale_grads(store, scale);
  if (applied_scale) *applied_scale = scale;
  return norm;
}

}  // namespace vt::optim
