// Muon for every block matrix (ParamGroup::kMatrix, docs/model.md "Optimizer groups"), fp32
// throughout: its formulas, and the Newton-Schulz orthogonalization as a standalone function on a
// whole matrix, and batched over same-shape matrices (the optimizer, distributed_optimizer.h,
// gathers whole matrices and runs newton_schulz_batched, which gives each exactly newton_schulz's
// result, so every layout gives the same result).
//
// One step for a matrix P (rows x cols as stored) with gradient G, momentum m (scheduled),
// lr = peak matrix lr * lr_multiplier; this is the lerp form of modded-nanogpt / nanochat
// (buf.lerp_(g, 1 - m); u = g.lerp_(buf, m)):
//   buf = m * buf + (1 - m) * G                       momentum buffer (state "momentum_buffer")
//   U   = (1 - m) * G + m * buf                       Nesterov
//   X   = newton_schulz(U)                            ~ the polar factor of U (below)
//   P   = P * (1 - lr * wd) - lr * scale * X          decoupled decay on the old P
// MuonWdStyle::kNanochat is nanochat's cautious decay (nanochat/optim.py, muon_step_fused): the
// decay multiplies lr * scale (nanochat's lr carries the aspect scale), follows a cosine to 0
// over the run (schedule.h muon_weight_decay), and applies only where the update and the old
// weight agree in sign:
//   P   = (X * P >= 0 ? P * (1 - lr * scale * wd_s) : P) - lr * scale * X
// with scale = max(1, fan_out / fan_in)^0.5. vtrain stores weights (in, out) (y = x W), so by
// default fan_out / fan_in = cols / rows; this is the max(1, rows/cols)^0.5 of Keller Jordan's
// Muon and nanochat written for their (out, in) storage (e.g. W_fc d x 4d gets 2, W_proj 4d x d
// gets 1). MuonAspect::kRowsOverCols applies max(1, rows/cols)^0.5 to the stored shape instead.
//
// newton_schulz(G), G rows x cols:
//   if rows > cols work on X = G^T (so X X^T is min x min), else X = G
//   X = X / (||X||_F * norm_scale + norm_eps)         ||.||_F accumulated in double
//   for k in 0..steps-1: (a, b, c) = coefficients at k
//     A = X X^T;  B = b A + c A A;  X = a X + B X
//   transpose back if transposed.
// Standard coefficients (a, b, c) = (3.4445, -4.7750, 2.0315) every iteration, norm_scale 1,
// norm_eps 1e-7. Polar Express uses per-iteration coefficients (see muon.cc for their source),
// with the normalization that goes with them, norm_scale 1.02 and norm_eps 1e-6; iterations
// beyond the table reuse its last row.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/tensor.h"

namespace vt::optim {

enum class NsKind { kStandard, kPolarExpress };
const char* ns_kind_name(NsKind k);

struct NsCoefficients {
  std::vector<std::array<double, 3>> abc;  // (a, b, c) per iteration
  double norm_scale = 1.0;
  double norm_eps = 1e-7;
  // Coefficients of iteration k (the last row for k past the end of the table).
  const std::array<double, 3>& at(int k) const;

  static NsCoefficients standard();
  static NsCoefficients polar_express();
  static NsCoefficients of(NsKind kind);
};

// Orthogonalizes G (rows x cols, row-major) into out (rows x cols). out may not alias G.
// Deterministic; newton_schulz(G^T) is bitwise the transpose of newton_schulz(G) for rows != cols.
void newton_schulz(const float* G, int rows, int cols, float* out, int steps,
                   const NsCoefficients& coeffs);

// The same on f32 tensors of rows * cols elements (any shape) on one device; out may not alias
// G. Host tensors run the host function above (bitwise the same results). Device tensors run
// newton_schulz_ops: the same algorithm with device ops and no host access to the matrix.
// compute == kBF16 runs the iteration in bf16 (bf16 X, A, B; GEMMs accumulate in fp32) as
// nanochat does on GPUs: ~2^-8 relative per stored value, a few percent on the update.
void newton_schulz(const Tensor& G, int rows, int cols, const Tensor& out, int steps,
                   const NsCoefficients& coeffs, DType compute = DType::kF32);

// The op-level Newton-Schulz on tensors of any device (CPU tensors included, for tests):
//   X = G (copy) or ops::transpose(G) when rows > cols;
//   s = ops::sum_squares(X) (double, the chunked sum of the host version);
//   X = X / (sqrt(s) * norm_scale + norm_eps)      (ops::normalize_frobenius, on the device)
//   per iteration, with ops::gemm (f32, the host version's three sgemm calls and beta terms):
//     A = X X^T;  B = A; B = c A A + b B;  Y = X; Y = B X + a Y;  X = Y
//   out = X or its transpose.
// On the backends built on the CPU kernels (the CPU backend and the device emulator) every step
// is the host function's (normalize_frobenius divides in double and rounds once, like the host), so
// newton_schulz_ops is bitwise the host result there; the CUDA backend differs in summation
// order and multiplies by the fp32 reciprocal.
void newton_schulz_ops(const Tensor& G, int rows, int cols, const Tensor& out, int steps,
                       const NsCoefficients& coeffs, DType compute = DType::kF32);

// Batched Newton-Schulz (the distributed optimizer's owners run it on their matrices): each
// matrix's newton_schulz_ops, with the matrices of one shape stacked in a batch and iterated
// together: one strided batched GEMM (GemmArgs::batch) per GEMM of the iteration, one segmented
// normalization (ops::normalize_frobenius_segments: each matrix by its own norm) and, for tall
// matrices, one batched transpose in and one out, where the unbatched path makes those calls
// per matrix. Inputs (outputs) that lie one after another in memory, in list order, are read
// (written) by one op for the batch; otherwise one copy or transpose a matrix gathers (scatters)
// them. Every step computes each matrix exactly as newton_schulz_ops does (the batched GEMM is
// the unbatched one per problem, the segmented normalization bit for bit the per-matrix one),
// so the results are bitwise newton_schulz_ops's on the CPU backend, the device emulator and the
// CUDA emulation, and newton_schulz's where that equals newton_schulz_ops (CPU tensors, the
// device emulator). On a real GPU cuBLASLt's heuristic sees the batch count and may pick another
// kernel (another fp32 summation order) for a batch than for one matrix: there a result equals
// the one-matrix path to the GEMMs' round-off (the op-parity `gemm` bound per GEMM, 1e-6
// sqrt(K) of the output's magnitude, carried through five iterations whose bf16 roundings may
// flip by one ulp), as the CUDA path already differs from the host's. Groups run in the order of
// their first matrix; a batch holds at most max(1, max_batch_elements / (rows * cols)) matrices:
// bounded memory, an f32 batch buffer of up to max_batch_elements floats, X and Y of that many
// in the iteration dtype, A and B of min(rows, cols) / max(rows, cols) of it.
struct NsMatrix {
  Tensor in;  // f32, rows * cols elements (any shape), row-major rows x cols
  int rows = 0, cols = 0;
  Tensor out;  // f32, rows * cols elements, not aliasing in; the same device as every in
};
// 64 Mi floats: 256 MiB per f32 buffer (d24's 1536 x 1536 matrices: 28 a batch; its 1536 x 6144
// and 6144 x 1536: 7).
inline constexpr int64_t kNsBatchElements = int64_t{64} << 20;
void newton_schulz_batched(const std::vector<NsMatrix>& ms, int steps,
                           const NsCoefficients& coeffs, DType compute = DType::kF32,
                           int64_t max_batch_elements = kNsBatchElements);

enum class MuonAspect {
  kFanOutOverFanIn,  // scale = max(1, cols/rows)^0.5 for (in, out) storage (default)
  kRowsOverCols,     // scale = max(1, rows/cols)^0.5 on the stored shape
};

// How Muon's weight decay is applied (see the top of this file).
enum class MuonWdStyle { kDecoupled, kNanochat };

struct MuonConfig {
  double lr = 0.02;            // peak matrix lr (docs/model.md "Optimizer groups")
  double weight_decay = 0.0;
  MuonWdStyle wd_style = MuonWdStyle::kDecoupled;
  int ns_steps = 5;
  NsKind ns = NsKind::kStandard;
  MuonAspect aspect = MuonAspect::kFanOutOverFanIn;
  DType ns_dtype = DType::kF32;  // Newton-Schulz iteration dtype (bf16 on GPUs, see newton_schulz)
};

// The update scale for a matrix of the given (global, stored) shape.
double muon_scale(int64_t rows, int64_t cols, MuonAspect aspect);

// The two elementwise steps; their loops are core's (core/optim_math.h, which the CPU backend
// runs too).
// buf = m*buf + (1-m)*g; u = (1-m)*g + m*buf (new buf). u may alias g.
void muon_momentum(const float* g, float* buf, float* u, int64_t n, double momentum);
// p = p*(1 - lr*wd) - lr*scale*x; cautious: the decay only where x*p >= 0.
void muon_apply(float* p, const float* x, int64_t n, double lr, double weight_decay, double scale,
                bool cautious = false);

// Muon's parameters: the block matrices (ParamGroup::kMatrix).
inline bool muon_handles(ParamGroup g) { return g == ParamGroup::kMatrix; }
// Names of its per-parameter states, as checkpoints store them: {"momentum_buffer"}.
const std::vector<std::string>& muon_state_kinds();

}  // namespace vt::optim
