// The GEMM op family: C(M,N) = alpha * op(A) * op(B) + beta * C, row-major with leading
// dimensions (the semantics of vt::cpu::gemm), or + beta * addend with C written only (cuBLASLt's
// D = alpha op(A) op(B) + beta C with C != D), and the matmuls the model calls. Host: OpenBLAS
// (cpu::gemm); CUDA: cuBLASLt (core/cuda_gemm.h, its handle owned by the CUDA runtime), with
// kernels/elementwise.cu's scale_matrix for K = 0.
#pragma once
#include <cstdint>

#include "core/fp8.h"
#include "core/tensor.h"

namespace vt {

// What one FP8 GEMM saw (GemmArgs::fp8_stats): per operand, the amax, the power-of-two scale
// (codes = x * scale), how many elements saturated (|x * scale| > the format's max) and how many
// nonzero elements became zero. Filling it synchronizes a GPU stream: for tests and metrics.
struct Fp8GemmStats {
  float amax_a = 0, amax_b = 0, scale_a = 0, scale_b = 0;
  int64_t saturated_a = 0, saturated_b = 0, underflow_a = 0, underflow_b = 0;
};

// A, B, C are base tensors (their data pointers plus *_offset elements); dtypes: all f32, or A
// and B bf16 with C bf16 or f32 (fp32 accumulation).
struct GemmArgs {
  bool trans_a = false, trans_b = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  Tensor A, B, C;
  int64_t lda = 0, ldb = 0, ldc = 0;
  // When defined: the beta term reads this matrix (C's dtype, device, number of elements and
  // layout, ldc) instead of C, which is then only written: C = alpha op(A) op(B) + beta addend. The same bits as copying
  // addend into C first; on a GPU it saves that copy's pass. It may not overlap C.
  Tensor addend;
  // Strided batch: `batch` independent GEMMs of these dimensions, problem i reading A at
  // i * stride_a elements, B at i * stride_b and writing C (and reading the addend) at
  // i * stride_c (cuBLASLt's BATCH_COUNT / STRIDED_BATCH_OFFSET). Each problem is computed
  // exactly as the unbatched call on its matrices (the host loops over them; cuBLASLt's batched
  // kernel, like the emulation, computes each problem alone). Batches of C may not overlap.
  int64_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  // FP8 (core/ops/gemm_fp8.cc), set both or neither: op(A) and op(B) are quantized per tensor to
  // these formats with the power-of-two scale of their current amax (core/fp8.h), multiplied on
  // the FP8 tensor cores (cuBLASLt, the "TN" layout: op(A) and op(B)^T are written K-contiguous)
  // with fp32 accumulation and the dequantization folded into alpha; C stays bf16 or f32. The
  // host computes the same values: the operands rounded to the FP8 grid (fake quantization),
  // an fp32 GEMM in the same layout. Needs K a multiple of 16 (cuBLASLt's FP8 rule, kept on the
  // host too so both refuse alike); not both E5M2.
  Fp8Format fp8_a = Fp8Format::kNone, fp8_b = Fp8Format::kNone;
  Fp8GemmStats* fp8_stats = nullptr;  // filled when set
  int fp8_tally_kind = -1;  // 0..2: counted in ops::fp8_tally_take() under that Fp8GemmKind
  // B is a weight that does not change while an ops::Fp8WeightCacheScope is alive: its codes
  // (both layouts) are quantized once and reused (the same values: a cache, not a new recipe).
  bool fp8_b_weight = false;
};

// The linear layers' FP8 GEMM kinds, as counted by fp8_tally_take().
enum class Fp8GemmKind : int { kForward = 0, kDataGrad = 1, kWeightGrad = 2 };
inline constexpr int kFp8GemmKinds = 3;
inline const char* fp8_gemm_kind_name(int k) {
  return k == 0 ? "forward" : (k == 1 ? "data_grad" : "weight_grad");
}

// What the counted FP8 GEMMs (GemmArgs::fp8_tally_kind) saw since the last take, per kind and
// operand (0: A, 1: B): elements that saturated, nonzero elements that became zero. A scale
// that saturates is visible in the metrics, never silent.
struct Fp8Tally {
  int64_t gemms[kFp8GemmKinds] = {};
  int64_t saturated[kFp8GemmKinds][2] = {};
  int64_t underflow[kFp8GemmKinds][2] = {};
};

namespace ops {

// y (M,N) = x (M,K) @ w (K,N), or += when accumulate.
void matmul(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate = false);
// dx (M,K) = dy (M,N) @ w^T, or += when accumulate.
void matmul_dx(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate);
// dw (K,N) += x^T (K,M) @ dy (M,N), or = when !accumulate (dw's old values, NaN included, are
// then never read: a gradient's first write of a step, ParamStore::take_first_write).
void matmul_dw(const Tensor& x, const Tensor& dy, const Tensor& dw, bool accumulate = true);
// The general GEMM (row-major, leading dimensions; see GemmArgs).
void gemm(const GemmArgs& g);

// The linear layers' three GEMMs in FP8 (--fp8 e4m3; core/ops/gemm_fp8.cc), the shapes and
// semantics of matmul, matmul_dx and matmul_dw: forward x (E4M3) @ w (E4M3); data gradient
// dy (E5M2) @ w^T (E4M3); weight gradient x^T (E4M3) @ dy (E5M2) into the f32 dw. E4M3 for
// activations and weights, E5M2 for gradients: the FP8 formats paper's recommendation
// (Micikevicius et al. 2022), Transformer Engine's HYBRID format and torchao's Float8Linear
// default. Each GEMM's inner dimension must be a multiple of 16 (VT_CHECK-fails naming it).
// When `stats` is given it receives that GEMM's Fp8GemmStats (a GPU stream synchronizes).
// w_is_weight: w is a model weight (ParamStore::holds_weights), cached under a scope (below).
void matmul_fp8(const Tensor& x, const Tensor& w, const Tensor& y, bool accumulate = false,
                Fp8GemmStats* stats = nullptr, bool w_is_weight = false);
void matmul_dx_fp8(const Tensor& dy, const Tensor& w, const Tensor& dx, bool accumulate,
                   Fp8GemmStats* stats = nullptr, bool w_is_weight = false);
void matmul_dw_fp8(const Tensor& x, const Tensor& dy, const Tensor& dw,
                   Fp8GemmStats* stats = nullptr);

// The weights' FP8 cache. While a scope is alive (the trainer holds one over each step's forward
// and backward passes, where the weights do not change), an FP8 GEMM whose B is a weight
// (GemmArgs::fp8_b_weight) quantizes it once, both layouts from one read (the forward GEMM reads
// W^T, the data gradient W; one scale, W's amax), and every later GEMM of the step reuses the
// codes: once per optimizer step instead of twice per micro-batch. The outermost scope's end
// frees them (the optimizer changes the weights next), so nothing stale outlives a step. Not
// used while the stream captures a CUDA graph (a replay would reuse codes no replay refills).
// The values are those of quantizing again, counts included (the tally adds a reused weight's
// counts per GEMM).
class Fp8WeightCacheScope {
 public:
  Fp8WeightCacheScope();
  ~Fp8WeightCacheScope();
  Fp8WeightCacheScope(const Fp8WeightCacheScope&) = delete;
  Fp8WeightCacheScope& operator=(const Fp8WeightCacheScope&) = delete;
};
// Weights quantized since the process began (cache misses; tests count them) and the bytes the
// live cache holds (FP8 codes of both layouts: 2 bytes a weight element on a GPU).
struct Fp8WeightCacheStats {
  int64_t fills = 0, hits = 0, bytes = 0;
};
Fp8WeightCacheStats fp8_weight_cache_stats();

// The counts since the last call, host and device GEMMs together, and zeroes them (synchronizes
// the device's stream when device GEMMs were counted). This process's GEMMs only.
Fp8Tally fp8_tally_take();

namespace detail {
// The FP8 GEMM (gemm() with fp8_a / fp8_b set; core/ops/gemm_fp8.cc).
void gemm_fp8(const GemmArgs& g);
}  // namespace detail

}  // namespace ops
}  // namespace vt
