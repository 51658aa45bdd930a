// Muon: Newton-Schulz orthogonalization (OpenBLAS sgemm on the host, ops::gemm on a device),
// momentum and the update of every block matrix. Formulas are documented in muon.h.
#include "optim/muon.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/check.h"
#include "core/op_profile.h"
#include "core/ops.h"
#include "core/optim_math.h"
#include "optim/clip.h"

namespace vt::optim {

const char* ns_kind_name(NsKind k) {
  switch (k) {
    case NsKind::kStandard: return "standard";
    case NsKind::kPolarExpress: return "polar_express";
  }
  return "?";
}

const std::array<double, 3>& NsCoefficients::at(int k) const {
  VT_CHECK_MSG(!abc.empty(), "NsCoefficients without any (a, b, c)");
  return abc[std::min<size_t>(static_cast<size_t>(std::max(k, 0)), abc.size() - 1)];
}

NsCoefficients NsCoefficients::standard() {
  NsCoefficients c;
  c.abc = {{3.4445, -4.7750, 2.0315}};
  c.norm_scale = 1.0;
  c.norm_eps = 1e-7;
  return c;
}

// Polar Express (Amsel, Persson, Musco, Gower, "The Polar Express: Optimal Matrix Sign Methods
// and Their Application to the Muon Algorithm", arXiv:2505.16932). The five (a, b, c) rows are
// the ones published in KellerJordan/modded-nanogpt train_gpt.py (`polar_express_coeffs`,
// "computed for num_iters=5, safety_factor=2e-2, cushion=2") and karpathy/nanochat
// nanochat/optim.py. modded-nanogpt pairs them with X / (||X||_F * (1 + 2e-2) + 1e-6), which is
// the normalization used here (nanochat later switched to a 1.01 factor).
NsCoefficients NsCoefficients::polar_express() {
  NsCoefficients c;
  c.abc = {
      {8.156554524902461, -22.48329292557795, 15.878769915207462},
      {4.042929935166739, -2.808917465908714, 0.5000178451051316},
      {3.8916678022926607, -2.772484153217685, 0.5060648178503393},
      {3.285753657755655, -2.3681294933425376, 0.46449024233003106},
      {2.3465413258596377, -1.7097828382687081, 0.42323551169305323},
  };
  c.norm_scale = 1.02;
  c.norm_eps = 1e-6;
  return c;
}

NsCoefficients NsCoefficients::of(NsKind kind) {
  return kind == NsKind::kPolarExpress ? polar_express() : standard();
}

void newton_schulz(const float* G, int rows, int cols, float* out, int steps,
                   const NsCoefficients& coeffs) {
  VT_CHECK_MSG(rows > 0 && cols > 0, "newton_schulz on an empty matrix " << rows << "x" << cols);
  VT_CHECK(G != out);
  const bool transposed = rows > cols;
  const int m = transposed ? cols : rows;  // small side: X is m x n, A and B are m x m
  const int n = transposed ? rows : cols;
  const int64_t mn = static_cast<int64_t>(m) * n;
  // In --profile as one op (its sgemms are not ops::gemm): per iteration X X^T, A A, B X.
  const double md = m, nd = n;
  op_profile::Scope profile("newton_schulz", steps * (4.0 * md * md * nd + 2.0 * md * md * md));
  std::vector<float> X(mn), Y(mn), A(static_cast<int64_t>(m) * m), B(A.size());

  // X = G or G^T, laid out m x n, so that the rest is identical for G and G^T.
  if (transposed) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) X[static_cast<int64_t>(c) * n + r] = G[static_cast<int64_t>(r) * cols + c];
  } else {
    std::copy(G, G + mn, X.begin());
  }
  const double denom = std::sqrt(sum_squares(X.data(), mn)) * coeffs.norm_scale + coeffs.norm_eps;
  // Divide in double, round once (ops::normalize_frobenius does the same on the CPU kernels'
  // backends, so Muon is bitwise equal there).
  for (int64_t i = 0; i < mn; ++i) X[i] = static_cast<float>(static_cast<double>(X[i]) / denom);

  for (int k = 0; k < steps; ++k) {
    const auto& abc = coeffs.at(k);
    const float a = static_cast<float>(abc[0]);
    const float b = static_cast<float>(abc[1]);
    const float c = static_cast<float>(abc[2]);
    // A = X X^T  (m x m)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, n, 1.0f, X.data(), n, X.data(), n,
                0.0f, A.data(), m);
    // B = b A + c A A
    std::copy(A.begin(), A.end(), B.begin());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, c, A.data(), m, A.data(), m,
                b, B.data(), m);
    // Y = a X + B X
    std::copy(X.begin(), X.end(), Y.begin());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, m, 1.0f, B.data(), m, X.data(), n,
                a, Y.data(), n);
    std::swap(X, Y);
  }

  if (transposed) {
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) out[static_cast<int64_t>(r) * cols + c] = X[static_cast<int64_t>(c) * n + r];
  } else {
    std::copy(X.begin(), X.end(), out);
  }
}

namespace {
void check_ns_tensors(const Tensor& G, int rows, int cols, const Tensor& out) {
  VT_CHECK_MSG(rows > 0 && cols > 0, "newton_schulz on an empty matrix " << rows << "x" << cols);
  const int64_t mn = static_cast<int64_t>(rows) * cols;
  VT_CHECK_MSG(G.defined() && out.defined() && G.numel() == mn && out.numel() == mn,
               "newton_schulz: " << rows << "x" << cols << " needs tensors of " << mn
                                 << " elements, got " << G.numel() << " and " << out.numel());
  VT_CHECK_MSG(G.dtype() == DType::kF32 && out.dtype() == DType::kF32,
               "newton_schulz: tensors must be f32");
  VT_CHECK_MSG(G.device() == out.device(), "newton_schulz: G and out on different devices");
  VT_CHECK_MSG(G.raw() != out.raw(), "newton_schulz: out may not alias G");
}

// C (M x N, ldc) = alpha * op(A) * op(B) + beta * addend (C itself when addend is undefined).
void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const Tensor& A,
              int64_t lda, const Tensor& B, int64_t ldb, float beta, const Tensor& C,
              int64_t ldc, const Tensor& addend = Tensor());
}  // namespace

void newton_schulz(const Tensor& G, int rows, int cols, const Tensor& out, int steps,
                   const NsCoefficients& coeffs, DType compute) {
  check_ns_tensors(G, rows, cols, out);
  if (compute == DType::kBF16) {
    newton_schulz_ops(G, rows, cols, out, steps, coeffs, DType::kBF16);
  } else if (G.on_host()) {
    newton_schulz(G.f32(), rows, cols, out.f32(), steps, coeffs);
  } else {
    newton_schulz_ops(G, rows, cols, out, steps, coeffs);
  }
}

void newton_schulz_ops(const Tensor& G, int rows, int cols, const Tensor& out, int steps,
                       const NsCoefficients& coeffs, DType compute) {
  check_ns_tensors(G, rows, cols, out);
  VT_CHECK_MSG(compute == DType::kF32 || compute == DType::kBF16,
               "newton_schulz: compute dtype must be f32 or bf16");
  const Device dev = G.device();
  const bool transposed = rows > cols;
  const int64_t m = transposed ? cols : rows;  // small side: X is m x n, A and B are m x m
  const int64_t n = transposed ? rows : cols;
  const int64_t mn = m * n;
  // The iteration runs in `compute` (bf16: bf16 storage, fp32 accumulation in the GEMMs); the
  // normalization always in fp32. Every buffer is written whole before it is read (no zero
  // fill), and the GEMMs read their beta terms from where they are (the addend) instead of
  // copies: on a GPU a wide matrix costs its GEMMs, the sum of squares, one pass that normalizes
  // it into bf16 and the cast of the result (bench/step_model.py).
  const Tensor g = G.flat(0, mn), o = out.flat(0, mn);
  // X32: the f32 X^T of a tall matrix, or (f32 iterations) the normalized copy of G. A wide matrix
  // iterated in bf16 needs none: G is normalized straight into X (the same bits as through a copy).
  Tensor X32;
  if (transposed) {
    X32 = Tensor::empty({mn}, DType::kF32, dev);
    ops::transpose(X32, g, rows, cols);  // X (cols x rows) = G^T
  }
  const Tensor src = transposed ? X32 : g;
  // On the device, no host round trip; bitwise the host's division on CPU-kernel backends.
  Tensor X;
  if (compute == DType::kBF16) {
    X = Tensor::empty({mn}, DType::kBF16, dev);
    ops::normalize_frobenius(src, coeffs.norm_scale, coeffs.norm_eps, X);
  } else {
    if (!transposed) {
      X32 = Tensor::empty({mn}, DType::kF32, dev);
      X32.copy_from(g);
    }
    ops::normalize_frobenius(X32, coeffs.norm_scale, coeffs.norm_eps);
    X = X32;
  }
  Tensor Y = Tensor::empty({mn}, compute, dev);
  Tensor A = Tensor::empty({m * m}, compute, dev), B = Tensor::empty({m * m}, compute, dev);

  for (int k = 0; k < steps; ++k) {
    const auto& abc = coeffs.at(k);
    const float a = static_cast<float>(abc[0]);
    const float b = static_cast<float>(abc[1]);
    const float c = static_cast<float>(abc[2]);
    gemm_f32(false, true, m, m, n, 1.0f, X, n, X, n, 0.0f, A, m);     // A = X X^T
    gemm_f32(false, false, m, m, m, c, A, m, A, m, b, B, m, A);        // B = b A + c A A
    gemm_f32(false, false, m, n, m, 1.0f, B, m, X, n, a, Y, n, X);     // Y = a X + B X
    std::swap(X, Y);
  }

  if (transposed) {
    if (compute == DType::kBF16) {
      ops::copy(X32, X);  // back to fp32
      X = X32;
    }
    ops::transpose(o, X, m, n);  // out (rows x cols) = X^T
  } else if (compute == DType::kBF16) {
    ops::copy(o, X);  // back to fp32, into out (the cast's bits, as through X32)
  } else {
    o.copy_from(X);
  }
}

namespace {

// C_i = alpha op(A_i) op(B_i) + beta addend_i for i < batch, every operand's problems `stride_*`
// elements apart (one strided batched GEMM).
void gemm_f32_batched(int64_t batch, int64_t stride_a, int64_t stride_b, int64_t stride_c,
                      bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                      const Tensor& A, int64_t lda, const Tensor& B, int64_t ldb, float beta,
                      const Tensor& C, int64_t ldc, const Tensor& addend = Tensor()) {
  GemmArgs g;
  g.trans_a = ta;
  g.trans_b = tb;
  g.M = M, g.N = N, g.K = K;
  g.alpha = alpha, g.beta = beta;
  g.A = A, g.B = B, g.C = C;
  g.lda = lda, g.ldb = ldb, g.ldc = ldc;
  g.addend = addend;
  g.batch = batch;
  g.stride_a = stride_a, g.stride_b = stride_b, g.stride_c = stride_c;
  ops::gemm(g);
}

void gemm_f32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const Tensor& A,
              int64_t lda, const Tensor& B, int64_t ldb, float beta, const Tensor& C,
              int64_t ldc, const Tensor& addend) {
  gemm_f32_batched(1, 0, 0, 0, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, addend);
}

// The f32 tensors t(0..count) as one tensor of count * mn elements when each follows the last in
// memory (a batch the caller laid out contiguously), else undefined.
template <class Get>
Tensor contiguous(int64_t count, int64_t mn, Get t) {
  const char* base = static_cast<const char*>(t(0).raw());
  for (int64_t i = 1; i < count; ++i)
    if (static_cast<const char*>(t(i).raw()) != base + i * mn * static_cast<int64_t>(sizeof(float)))
      return Tensor();
  return Tensor::view(const_cast<char*>(base), {count * mn}, DType::kF32, t(0).device());
}

// One batch: matrices ms[idx[0..]], all rows x cols. newton_schulz_ops's steps, each on the whole
// batch where it was on one matrix; the inputs (outputs) are read (written) in one op where they
// lie one after another in memory, else one op a matrix.
void newton_schulz_batch(const std::vector<NsMatrix>& ms, const std::vector<size_t>& idx,
                         int64_t rows, int64_t cols, int steps, const NsCoefficients& coeffs,
                         DType compute) {
  const int64_t count = static_cast<int64_t>(idx.size());
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;  // X is m x n
  const int64_t mn = m * n, mm = m * m;
  const Device dev = ms[idx[0]].in.device();
  auto in = [&](int64_t i) { return ms[idx[static_cast<size_t>(i)]].in.flat(0, mn); };
  auto out = [&](int64_t i) { return ms[idx[static_cast<size_t>(i)]].out.flat(0, mn); };
  const Tensor in_all = contiguous(count, mn, in), out_all = contiguous(count, mn, out);
  // X32: the f32 batch, each matrix as newton_schulz_ops's X32 (G^T of a tall one, a copy of G
  // for f32 iterations); a wide batch iterated in bf16 is normalized straight from G where G is
  // one tensor (the same bits as through the copy).
  Tensor X32, src;
  if (tall || compute == DType::kF32 || !in_all.defined()) {
    X32 = Tensor::empty({count * mn}, DType::kF32, dev);
    if (tall && in_all.defined()) {
      ops::transpose(X32, in_all, rows, cols, count);
    } else if (in_all.defined()) {
      X32.copy_from(in_all);
    } else {
      for (int64_t i = 0; i < count; ++i) {
        if (tall)
          ops::transpose(X32.flat(i * mn, mn), in(i), rows, cols);
        else
          X32.flat(i * mn, mn).copy_from(in(i));
      }
    }
    src = X32;
  } else {
    src = in_all;
  }
  Tensor X;
  if (compute == DType::kBF16) {
    X = Tensor::empty({count * mn}, DType::kBF16, dev);
    ops::normalize_frobenius_segments(src, count, coeffs.norm_scale, coeffs.norm_eps, X);
  } else {
    ops::normalize_frobenius_segments(X32, count, coeffs.norm_scale, coeffs.norm_eps);
    X = X32;
  }
  Tensor Y = Tensor::empty({count * mn}, compute, dev);
  Tensor A = Tensor::empty({count * mm}, compute, dev), B = Tensor::empty({count * mm}, compute, dev);
  for (int k = 0; k < steps; ++k) {
    const auto& abc = coeffs.at(k);
    const float a = static_cast<float>(abc[0]);
    const float b = static_cast<float>(abc[1]);
    const float c = static_cast<float>(abc[2]);
    gemm_f32_batched(count, mn, mn, mm, false, true, m, m, n, 1.0f, X, n, X, n, 0.0f, A, m);
    gemm_f32_batched(count, mm, mm, mm, false, false, m, m, m, c, A, m, A, m, b, B, m, A);
    gemm_f32_batched(count, mm, mn, mn, false, false, m, n, m, 1.0f, B, m, X, n, a, Y, n, X);
    std::swap(X, Y);
  }
  // Out of the batch: a wide matrix's result is its slot of X (cast to f32 where bf16); a tall
  // one's the transpose of its f32 slot (bf16 iterates cast back first, as newton_schulz_ops).
  if (tall && compute == DType::kBF16) {
    ops::copy(X32, X);
    X = X32;
  }
  if (out_all.defined()) {
    if (tall)
      ops::transpose(out_all, X, m, n, count);
    else if (compute == DType::kBF16)
      ops::copy(out_all, X);
    else
      out_all.copy_from(X);
    return;
  }
  for (int64_t i = 0; i < count; ++i) {
    const Tensor x = X.flat(i * mn, mn);
    if (tall)
      ops::transpose(out(i), x, m, n);
    else if (compute == DType::kBF16)
      ops::copy(out(i), x);
    else
      out(i).copy_from(x);
  }
}

}  // namespace

void newton_schulz_batched(const std::vector<NsMatrix>& ms, int steps,
                           const NsCoefficients& coeffs, DType compute,
                           int64_t max_batch_elements) {
  VT_CHECK_MSG(compute == DType::kF32 || compute == DType::kBF16,
               "newton_schulz: compute dtype must be f32 or bf16");
  VT_CHECK_MSG(max_batch_elements >= 1, "newton_schulz_batched: a batch cap of "
                                            << max_batch_elements << " elements");
  for (const NsMatrix& x : ms) {
    check_ns_tensors(x.in, x.rows, x.cols, x.out);
    VT_CHECK_MSG(x.in.device() == ms[0].in.device(),
                 "newton_schulz_batched: matrices on different devices");
  }
  // Groups by shape, in the order of their first matrix; each cut into batches.
  std::vector<std::pair<std::pair<int, int>, std::vector<size_t>>> groups;
  for (size_t i = 0; i < ms.size(); ++i) {
    const std::pair<int, int> shape{ms[i].rows, ms[i].cols};
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == shape; });
    if (it == groups.end()) {
      groups.push_back({shape, {}});
      it = groups.end() - 1;
    }
    it->second.push_back(i);
  }
  for (const auto& [shape, members] : groups) {
    const auto [rows, cols] = shape;
    const size_t per_batch = static_cast<size_t>(
        std::max<int64_t>(1, max_batch_elements / (static_cast<int64_t>(rows) * cols)));
    for (size_t lo = 0; lo < members.size(); lo += per_batch) {
      const std::vector<size_t> idx(
          members.begin() + static_cast<std::ptrdiff_t>(lo),
          members.begin() + static_cast<std::ptrdiff_t>(std::min(members.size(), lo + per_batch)));
      newton_schulz_batch(ms, idx, rows, cols, steps, coeffs, compute);
    }
  }
}

double muon_scale(int64_t rows, int64_t cols, MuonAspect aspect) {
  VT_CHECK(rows > 0 && cols > 0);
  const double ratio = aspect == MuonAspect::kFanOutOverFanIn
                           ? static_cast<double>(cols) / static_cast<double>(rows)
                           : static_cast<double>(rows) / static_cast<double>(cols);
  return std::sqrt(std::max(1.0, ratio));
}

void muon_momentum(const float* g, float* buf, float* u, int64_t n, double momentum) {
  cpu::muon_momentum(g, buf, u, n, momentum);
}

void muon_apply(float* p, const float* x, int64_t n, double lr, double weight_decay, double scale,
                bool cautious) {
  cpu::muon_apply(p, x, n, lr, weight_decay, scale, cautious);
}

const std::vector<std::string>& muon_state_kinds() {
  static const std::vector<std::string> kinds = {"momentum_buffer"};
  return kinds;
}

}  // namespace vt::optim
