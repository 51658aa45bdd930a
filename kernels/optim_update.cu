// Muon elementwise kernels (see optim_update.cuh): grid-stride loops over chunks moved in
// 16-byte words (momentum: 4 f32; apply: 8 elements, two f32 words of p, one bf16 word of x and
// of the copy), the grid one wave of 256-thread blocks (kernels/vec_access.cuh; a scalar path for
// unaligned operands and the tail); fp32 math with the coefficients the CPU forms
// (float(momentum), float(1 - momentum), float(1 - lr*wd), float(lr*scale)), by value or read
// from device memory (kernels/step_values.cuh).
#include "kernels/optim_update.cuh"

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/step_values.cuh"
#include "kernels/vec_access.cuh"

namespace vt::cuda {
namespace {

using detail::aligned16;
using detail::for_each_chunk;
using detail::load_chunk;
using detail::store_chunk;

constexpr int kThreads = detail::kElementwiseThreads;
constexpr int kBlocksPerSm = detail::kElementwiseBlocksPerSm;
constexpr int kMomentumChunk = 4;  // one f32 word
constexpr int kApplyChunk = 8;     // one bf16 word (x, copy), two f32 words (p)

// g and u are not __restrict__: u may alias g (each element is read before it is written, by
// the same thread). S: where the step's values come from (kernels/step_values.cuh); a step whose
// guard says "skip" writes nothing.
template <class S>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    muon_momentum_kernel(const float* g, float* buf, float* u, int64_t n, S s, bool vec) {
  if (!s.apply()) return;
  const MuonMomentumCoefs c = s.coefs();
  const float gs = s.grad_scale(), mo = c.mo, om = c.om;
  constexpr int W = kMomentumChunk;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float gi[W], bi[W];
    load_chunk<W>(g + i, wide, count, gi);
    load_chunk<W>(buf + i, wide, count, bi);
#pragma unroll
    for (int e = 0; e < W; ++e) gi[e] = gs * gi[e];  // x * 1 is x: an unscaled step's bits
#pragma unroll
    for (int e = 0; e < W; ++e) bi[e] = mo * bi[e] + om * gi[e];
    store_chunk<W>(buf + i, wide, count, bi);
#pragma unroll
    for (int e = 0; e < W; ++e) gi[e] = om * gi[e] + mo * bi[e];
    store_chunk<W>(u + i, wide, count, gi);
  });
}

// copy (may be null): the bf16 compute copy of p, written with the new p rounded to nearest
// even (the cast refresh_compute_copy would make, without reading p again).
template <class X, class S>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    muon_apply_kernel(float* p, const X* x, int64_t n, S s, bool cautious, __nv_bfloat16* copy,
                      bool vec) {
  if (!s.apply()) return;
  const MuonApplyCoefs c = s.coefs();
  const float decay = c.decay, step = c.step;
  constexpr int W = kApplyChunk;
  for_each_chunk<W>(n, vec, [&](int64_t i, bool wide, int count) {
    float pi[W], xi[W];
    load_chunk<W>(p + i, wide, count, pi);
    load_chunk<W>(x + i, wide, count, xi);
#pragma unroll
    for (int e = 0; e < W; ++e)
      pi[e] = (!cautious || xi[e] * pi[e] >= 0.0f ? pi[e] * decay : pi[e]) - step * xi[e];
    store_chunk<W>(p + i, wide, count, pi);
    if (copy != nullptr) store_chunk<W>(copy + i, wide, count, pi);
  });
}

template <class S>
void launch_muon_momentum(const float* g, float* buf, float* u, int64_t n, S s,
                          cudaStream_t stream) {
  if (n == 0) return;
  const bool vec = aligned16(g) && aligned16(buf) && aligned16(u);
  VT_LAUNCH(muon_momentum_kernel<S>, detail::elementwise_grid(n, kMomentumChunk), kThreads, 0,
            stream, g, buf, u, n, s, vec);
  VT_CUDA_CHECK_LAUNCH();
}

template <class X, class S>
void launch_muon_apply(float* p, const X* x, int64_t n, S s, bool cautious, cudaStream_t stream,
                       __nv_bfloat16* copy) {
  if (n == 0) return;
  const bool vec = aligned16(p) && aligned16(x) && (copy == nullptr || aligned16(copy));
  const auto muon_apply_kernel_xs = muon_apply_kernel<X, S>;  // one macro argument
  VT_LAUNCH(muon_apply_kernel_xs, detail::elementwise_grid(n, kApplyChunk), kThreads, 0, stream, p,
            x, n, s, cautious, copy, vec);
  VT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void muon_momentum(const float* g, float* buf, float* u, int64_t n, double momentum,
                   cudaStream_t stream) {
  launch_muon_momentum(g, buf, u, n, detail::FixedStep<MuonMomentumCoefs>{muon_momentum_coefs(momentum)},
                       stream);
}

void muon_momentum(const float* g, float* buf, float* u, int64_t n, const float* guard,
                   const float* coefs, cudaStream_t stream) {
  launch_muon_momentum(g, buf, u, n, detail::StepInMemory<MuonMomentumCoefs>{guard, coefs},
                       stream);
}

void muon_apply(float* p, const float* x, int64_t n, double lr, double weight_decay, double scale,
                bool cautious, cudaStream_t stream, __nv_bfloat16* copy) {
  launch_muon_apply(p, x, n,
                    detail::FixedStep<MuonApplyCoefs>{muon_apply_coefs(lr, weight_decay, scale)},
                    cautious, stream, copy);
}

void muon_apply(float* p, const __nv_bfloat16* x, int64_t n, double lr, double weight_decay,
                double scale, bool cautious, cudaStream_t stream, __nv_bfloat16* copy) {
  launch_muon_apply(p, x, n,
                    detail::FixedStep<MuonApplyCoefs>{muon_apply_coefs(lr, weight_decay, scale)},
                    cautious, stream, copy);
}

void muon_apply(float* p, const float* x, int64_t n, const float* guard, const float* coefs,
                bool cautious, cudaStream_t stream, __nv_bfloat16* copy) {
  launch_muon_apply(p, x, n, detail::StepInMemory<MuonApplyCoefs>{guard, coefs}, cautious, stream,
                    copy);
}

void muon_apply(float* p, const __nv_bfloat16* x, int64_t n, const float* guard,
                const float* coefs, bool cautious, cudaStream_t stream, __nv_bfloat16* copy) {
  launch_muon_apply(p, x, n, detail::StepInMemory<MuonApplyCoefs>{guard, coefs}, cautious, stream,
                    copy);
}

}  // namespace vt::cuda
