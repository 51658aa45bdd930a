// The 16-byte access paths of the memory-bound kernels (kernels/vec_access.cuh,
// kernels/row_team.cuh) against the CPU and against their own scalar fallback. Every kernel runs
// twice on the same values: on 16-byte aligned operands (the vector path: uint4 words of 8 bf16
// or 4 f32) and at an odd element offset (the fallback: the same chunks, one element at a time).
// The row kernels and reductions keep each chunk with its thread on both paths, so their sums
// add the same values in the same order: the same bits; so do data movement and formulas without
// a product feeding a sum; other formulas agree to an FMA's difference (see Outputs). The
// aligned run is also checked against the CPU (or a
// host loop) at lengths that are and are not multiples of the chunk, rows of d24 / d32 widths,
// odd widths, rows wider than a 1024-thread team holds in registers, and many short rows per
// block; and the bytes around each output must stay untouched (no vector store past the end).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"
#include "kernels/activation.cuh"
#include "kernels/adamw.cuh"
#include "kernels/cast.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/embedding.cuh"
#include "kernels/optim_update.cuh"
#include "kernels/reduce.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#include "kernels/value_mix.cuh"
#include "kernels/xent.cuh"

namespace vt::gputest {
namespace {

using bf = __nv_bfloat16;

// n elements of T at element `offset` of a device allocation with 16 spare elements; every byte
// outside the n elements holds 0xff, which the checks below expect to find there afterwards.
template <class T>
class Placed {
 public:
  Placed(size_t n, int offset) : n_(n), off_(offset) {
    VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&base_), sizeof(T) * (n + 16)));
    VT_CUDA_CHECK(cudaMemset(base_, 0xff, sizeof(T) * (n + 16)));
  }
  Placed(const std::vector<T>& h, int offset) : Placed(h.size(), offset) {
    VT_CUDA_CHECK(cudaMemcpy(p(), h.data(), sizeof(T) * n_, cudaMemcpyHostToDevice));
  }
  ~Placed() { cudaFree(base_); }
  Placed(const Placed&) = delete;
  Placed& operator=(const Placed&) = delete;
  T* p() const { return base_ + off_; }
  std::vector<T> get() const {
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    std::vector<T> h(n_);
    VT_CUDA_CHECK(cudaMemcpy(h.data(), p(), sizeof(T) * n_, cudaMemcpyDeviceToHost));
    return h;
  }
  // The bytes before and after the n elements are still 0xff.
  bool guards_intact() const {
    std::vector<unsigned char> all(sizeof(T) * (n_ + 16));
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    VT_CUDA_CHECK(cudaMemcpy(all.data(), base_, all.size(), cudaMemcpyDeviceToHost));
    const size_t lo = sizeof(T) * off_, hi = sizeof(T) * (off_ + n_);
    for (size_t i = 0; i < all.size(); ++i)
      if ((i < lo || i >= hi) && all[i] != 0xff) return false;
    return true;
  }

 private:
  T* base_ = nullptr;
  size_t n_;
  int off_;
};

// Host values as the device type: f32 as is, bf16 rounded to nearest even.
template <class T>
std::vector<T> as(const std::vector<float>& v);
template <>
std::vector<float> as<float>(const std::vector<float>& v) {
  return v;
}
template <>
std::vector<bf> as<bf>(const std::vector<float>& v) {
  return to_nv_bf16(v);
}
inline std::vector<float> f32(const std::vector<float>& v) { return v; }
inline std::vector<float> f32(const std::vector<bf>& v) { return nv_bf16_to_f32(v); }

// The same bits (bf16 widens to f32 exactly, so equal floats' bits are equal bf16 bits).
::testing::AssertionResult same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure()
             << "element " << i << ": " << a[i] << " (aligned) vs " << b[i] << " (offset)";
  return ::testing::AssertionSuccess();
}

// Each output of one kernel run (as fp32), whether the two runs must agree bit for bit, and
// whether the guards held. Sums (the row kernels' and reductions' fp32/fp64 sums use explicit
// fmaf), data movement and formulas without a product feeding a sum: the same bits. A formula
// with one (a c - b s, 2 r dy + dx, y + a x) is the same expression on both paths, but the
// compiler decides per instance whether to fuse it into an FMA (the emulation's g++ vectorizes
// the 16-byte path and contracts it differently from the scalar one): there the runs must agree
// to an FMA's difference, one rounding of the product, 1e-6 of the largest output (plus a bf16
// rounding apart for bf16 outputs; a wrong element is far outside).
struct Outputs {
  struct Out {
    std::vector<float> v;
    bool exact, bf16;
  };
  std::vector<Out> out;
  bool guards = true;
  template <class T>
  void add(const Placed<T>& d, bool contracted = false) {
    out.push_back({f32(d.get()), !contracted, sizeof(T) == 2});
    guards = guards && d.guards_intact();
  }
  void add_exact(std::vector<float> v) { out.push_back({std::move(v), true, false}); }
};

// Runs `run(offset)` aligned (0) and misaligned (1): the same results (see Outputs), untouched
// guards; returns the aligned outputs for the caller's check against the CPU.
template <class Run>
std::vector<std::vector<float>> both_paths(Run run) {
  const Outputs a = run(0), b = run(1);
  EXPECT_TRUE(a.guards) << "aligned run wrote outside its outputs";
  EXPECT_TRUE(b.guards) << "offset run wrote outside its outputs";
  EXPECT_EQ(a.out.size(), b.out.size());
  std::vector<std::vector<float>> r;
  for (size_t k = 0; k < a.out.size() && k < b.out.size(); ++k) {
    const auto& x = a.out[k];
    if (x.exact)
      EXPECT_TRUE(same_bits(x.v, b.out[k].v)) << "output " << k;
    else
      EXPECT_TRUE(all_close(b.out[k].v, x.v, x.bf16 ? kBf16Rtol : 0.0, 1e-6 * max_abs(x.v)))
          << "output " << k << " (offset against aligned)";
    r.push_back(x.v);
  }
  return r;
}

// Lengths around the chunk (8 bf16, 4 f32) and a few thousand (several blocks, a tail).
const int64_t kLengths[] = {1, 3, 4, 7, 8, 9, 17, 4096, 4099, 10007};

// Elementwise kernels, rtol for outputs computed in fp32 from the same inputs: the host loop
// below may contract a * b + c differently (1 ulp); bf16 outputs add one rounding apart.
template <class T>
double rtol_of() {
  return sizeof(T) == 2 ? 2e-6 + kBf16Rtol : 2e-6;
}

template <class T>
void check_activations() {
  for (int64_t n : kLengths) {
    SCOPED_TRACE(testing::Message() << "n " << n << (sizeof(T) == 2 ? " bf16" : " f32"));
    const auto xv = f32(as<T>(randn(size_t(n), 1 + uint64_t(n)))),
               gv = f32(as<T>(randn(size_t(n), 2 + uint64_t(n)))),
               dv = f32(as<T>(randn(size_t(n), 3 + uint64_t(n))));
    const auto out = both_paths([&](int off) {
      Placed<T> x(as<T>(xv), off), g(as<T>(gv), off), y2(size_t(n), off), y1(size_t(n), off);
      Placed<T> d2(size_t(n), off), d2a(as<T>(dv), off), d1(size_t(n), off), d1a(as<T>(dv), off);
      cuda::relu2_forward(x.p(), y2.p(), n, nullptr);
      cuda::relu_forward(x.p(), y1.p(), n, nullptr);
      cuda::relu2_backward(x.p(), g.p(), d2.p(), n, false, nullptr);
      cuda::relu2_backward(x.p(), g.p(), d2a.p(), n, true, nullptr);
      cuda::relu_backward(x.p(), g.p(), d1.p(), n, false, nullptr);
      cuda::relu_backward(x.p(), g.p(), d1a.p(), n, true, nullptr);
      Outputs o;
      o.add(y2), o.add(y1), o.add(d2, true), o.add(d2a, true), o.add(d1), o.add(d1a, true);
      return o;
    });
    std::vector<float> y2(n), y1(n), d2(n), d2a = dv, d1(n), d1a = dv;
    cpu::relu2_forward<float>(xv.data(), y2.data(), n);
    cpu::relu_forward<float>(xv.data(), y1.data(), n);
    cpu::relu2_backward<float>(xv.data(), gv.data(), d2.data(), n, false);
    cpu::relu2_backward<float>(xv.data(), gv.data(), d2a.data(), n, true);
    cpu::relu_backward<float>(xv.data(), gv.data(), d1.data(), n, false);
    cpu::relu_backward<float>(xv.data(), gv.data(), d1a.data(), n, true);
    const double r = rtol_of<T>();
    EXPECT_TRUE(all_close(out[0], y2, r, 0.0));
    EXPECT_TRUE(all_close(out[1], y1, r, 0.0));
    EXPECT_TRUE(all_close(out[2], d2, r, 0.0));
    EXPECT_TRUE(all_close(out[3], d2a, r, 1e-6 * max_abs(d2a)));
    EXPECT_TRUE(all_close(out[4], d1, r, 0.0));
    EXPECT_TRUE(all_close(out[5], d1a, r, 1e-6 * max_abs(d1a)));
  }
}

TEST(GpuVectorAccess, ActivationsF32) {
  VT_SKIP_WITHOUT_CUDA();
  check_activations<float>();
}
TEST(GpuVectorAccess, ActivationsBf16) {
  VT_SKIP_WITHOUT_CUDA();
  check_activations<bf>();
}

// Casts move bits: exact against the host's round to nearest even.
TEST(GpuVectorAccess, Casts) {
  VT_SKIP_WITHOUT_CUDA();
  for (int64_t n : kLengths) {
    SCOPED_TRACE(testing::Message() << "n " << n);
    const auto xv = randn(size_t(n), 10 + uint64_t(n), 3.0f);
    const auto out = both_paths([&](int off) {
      Placed<float> x(xv, off), back(size_t(n), off);
      Placed<bf> y(size_t(n), off);
      cuda::cast_f32_to_bf16(x.p(), y.p(), n, nullptr);
      cuda::cast_bf16_to_f32(y.p(), back.p(), n, nullptr);
      Outputs o;
      o.add(y), o.add(back);
      return o;
    });
    const auto want = rounded_bf16(xv);
    EXPECT_TRUE(same_bits(out[0], want));
    EXPECT_TRUE(same_bits(out[1], want));
  }
}

// value_mix2 (with and without y), value_axpy, scale_copy_coef, axpy_coef, div_by_norm.
template <class T>
void check_linear() {
  for (int64_t n : kLengths) {
    SCOPED_TRACE(testing::Message() << "n " << n << (sizeof(T) == 2 ? " bf16" : " f32"));
    const auto xv = f32(as<T>(randn(size_t(n), 20 + uint64_t(n)))),
               yv = f32(as<T>(randn(size_t(n), 21 + uint64_t(n))));
    const float a = 0.75f, b = -1.25f, coef = 1.5f;
    const double sumsq = 9.0, scale = 2.0, eps = 1e-7;
    const auto out = both_paths([&](int off) {
      Placed<T> x(as<T>(xv), off), y(as<T>(yv), off), m2(size_t(n), off), m1(size_t(n), off);
      Placed<T> ax(as<T>(yv), off), sc(size_t(n), off), axc(as<T>(yv), off), dn(as<T>(xv), off);
      DeviceBuffer<float> c(std::vector<float>{coef});
      DeviceBuffer<double> ss(std::vector<double>{sumsq});
      cuda::value_mix2(a, x.p(), b, y.p(), m2.p(), n, nullptr);
      cuda::value_mix2(a, x.p(), 0.0f, static_cast<const T*>(nullptr), m1.p(), n, nullptr);
      cuda::value_axpy(a, x.p(), ax.p(), n, nullptr);
      cuda::scale_copy_coef(x.p(), sc.p(), n, c.get(), nullptr);
      cuda::axpy_coef(x.p(), axc.p(), n, c.get(), nullptr);
      cuda::div_by_norm(dn.p(), n, ss.get(), scale, eps, nullptr);
      Outputs o;
      o.add(m2, true), o.add(m1), o.add(ax, true), o.add(sc), o.add(axc, true), o.add(dn);
      return o;
    });
    std::vector<float> m2(n), m1(n), ax(n), sc(n), axc(n), dn(n);
    const double d = std::sqrt(sumsq) * scale + eps;
    for (int64_t i = 0; i < n; ++i) {
      m2[i] = a * xv[i] + b * yv[i];
      m1[i] = a * xv[i];
      ax[i] = yv[i] + a * xv[i];
      sc[i] = coef * xv[i];
      axc[i] = yv[i] + coef * xv[i];
      dn[i] = static_cast<float>(static_cast<double>(xv[i]) / d);
    }
    const double r = rtol_of<T>(), at = 1e-6 * (max_abs(xv) + max_abs(yv));
    EXPECT_TRUE(all_close(out[0], m2, r, at));
    EXPECT_TRUE(all_close(out[1], m1, r, 0.0));
    EXPECT_TRUE(all_close(out[2], ax, r, at));
    EXPECT_TRUE(all_close(out[3], sc, r, 0.0));
    EXPECT_TRUE(all_close(out[4], axc, r, at));
    EXPECT_TRUE(all_close(out[5], dn, r, 0.0));
  }
}

TEST(GpuVectorAccess, LinearF32) {
  VT_SKIP_WITHOUT_CUDA();
  check_linear<float>();
}
TEST(GpuVectorAccess, LinearBf16) {
  VT_SKIP_WITHOUT_CUDA();
  check_linear<bf>();
}

// value_gated_mix: a chunk takes one gate on the vector path (hd a multiple of the chunk); hd 12
// is not one (every element finds its own gate, on both runs).
TEST(GpuVectorAccess, GatedMix) {
  VT_SKIP_WITHOUT_CUDA();
  for (int64_t hd : {8, 12, 64}) {
    const int64_t N = 7, heads = 3, n = N * heads * hd;
    SCOPED_TRACE(testing::Message() << "hd " << hd);
    const auto cv = f32(as<bf>(randn(size_t(n), 30))), ev = f32(as<bf>(randn(size_t(n), 31)));
    const auto gv = uniform(size_t(N * heads), 32, 0.0f, 2.0f);
    const auto out = both_paths([&](int off) {
      Placed<bf> c(as<bf>(cv), off), e(as<bf>(ev), off), v(size_t(n), off);
      DeviceBuffer<float> g(gv);
      cuda::value_gated_mix(c.p(), e.p(), g.get(), v.p(), N, heads, hd, nullptr);
      Outputs o;
      o.add(v, true);
      return o;
    });
    std::vector<float> want(n);
    for (int64_t i = 0; i < n; ++i) want[i] = cv[i] + gv[i / hd] * ev[i];
    EXPECT_TRUE(all_close(out[0], want, rtol_of<bf>(), 1e-6 * max_abs(want)));
  }
}

// Muon's momentum and apply (bf16 and f32 update, cautious, with the bf16 compute copy) and
// AdamW: the CPU's float operations in a host loop (1 ulp for contraction).
TEST(GpuVectorAccess, OptimizerUpdates) {
  VT_SKIP_WITHOUT_CUDA();
  for (int64_t n : kLengths) {
    SCOPED_TRACE(testing::Message() << "n " << n);
    const auto gv = randn(size_t(n), 40), bv = randn(size_t(n), 41), pv = randn(size_t(n), 42);
    const auto xv = f32(as<bf>(randn(size_t(n), 43)));
    const auto mv = randn(size_t(n), 44, 0.1f);
    auto vv = uniform(size_t(n), 45, 0.0f, 0.01f);
    const double mom = 0.95, lr = 0.02, wd = 5.0, scale = 1.7;
    const auto out = both_paths([&](int off) {
      Placed<float> g(gv, off), buf(bv, off), u(size_t(n), off), p(pv, off), p2(pv, off);
      Placed<float> xf(xv, off), pa(pv, off), m(mv, off), v(vv, off);
      Placed<bf> x(as<bf>(xv), off), copy(size_t(n), off);
      cuda::muon_momentum(g.p(), buf.p(), u.p(), n, mom, nullptr);
      cuda::muon_apply(p.p(), x.p(), n, lr, wd, scale, true, nullptr, copy.p());
      cuda::muon_apply(p2.p(), xf.p(), n, lr, wd, scale, false, nullptr);
      cuda::adamw_update(pa.p(), g.p(), m.p(), v.p(), n, 1e-3, 0.9, 0.95, 0.1, 1e-8, 3, nullptr);
      Outputs o;
      for (const Placed<float>* t : {&buf, &u, &p}) o.add(*t, true);
      o.add(copy, true);
      for (const Placed<float>* t : {&p2, &pa, &m, &v}) o.add(*t, true);
      return o;
    });
    const float mo = float(mom), om = float(1.0 - mom);
    const float decay = float(1.0 - lr * wd), step = float(lr * scale);
    std::vector<float> buf(n), u(n), p(n), copy(n), p2(n), pa(n), m(n), v(n);
    const double bc1 = 1.0 - std::pow(0.9, 3.0), bc2 = 1.0 - std::pow(0.95, 3.0);
    for (int64_t i = 0; i < n; ++i) {
      buf[i] = mo * bv[i] + om * gv[i];
      u[i] = om * gv[i] + mo * buf[i];
      p[i] = (xv[i] * pv[i] >= 0.0f ? pv[i] * decay : pv[i]) - step * xv[i];
      copy[i] = bf16_round(p[i]);
      p2[i] = pv[i] * decay - step * xv[i];
      m[i] = 0.9f * mv[i] + float(1.0 - 0.9) * gv[i];
      v[i] = 0.95f * vv[i] + float(1.0 - 0.95) * (gv[i] * gv[i]);
      pa[i] = pv[i] * float(1.0 - 1e-3 * 0.1) -
              float(1e-3 / bc1) * m[i] / (std::sqrt(v[i] * float(1.0 / bc2)) + 1e-8f);
    }
    EXPECT_TRUE(all_close(out[0], buf, 2e-6, 1e-7));
    EXPECT_TRUE(all_close(out[1], u, 2e-6, 1e-7));
    EXPECT_TRUE(all_close(out[2], p, 2e-6, 1e-7));
    EXPECT_TRUE(all_close(out[3], copy, kBf16Rtol, 1e-7));
    EXPECT_TRUE(all_close(out[4], p2, 2e-6, 1e-7));
    EXPECT_TRUE(all_close(out[5], pa, 2e-6, 1e-7));
    EXPECT_TRUE(all_close(out[6], m, 2e-6, 1e-6 * max_abs(m)));
    EXPECT_TRUE(all_close(out[7], v, 2e-6, 1e-6 * max_abs(v)));
  }
}

// The gather moves values (f32 -> bf16 rounds once): exact against the host.
TEST(GpuVectorAccess, EmbeddingGather) {
  VT_SKIP_WITHOUT_CUDA();
  for (int64_t C : {8, 13, 64, 1536}) {
    const int64_t rows = 20, row_begin = 5, N = 9;
    SCOPED_TRACE(testing::Message() << "C " << C);
    const auto tv = randn(size_t(rows * C), 50);
    const std::vector<int32_t> ids = {5, 24, 4, 25, 10, 10, 0, 17, 6};  // 4, 25, 0: not local
    const auto out = both_paths([&](int off) {
      Placed<float> t(tv, off), of(size_t(N * C), off);
      Placed<bf> ob(size_t(N * C), off);
      DeviceBuffer<int32_t> d(ids);
      cuda::embedding_forward(t.p(), row_begin, rows, C, d.get(), N, of.p(), nullptr);
      cuda::embedding_forward(t.p(), row_begin, rows, C, d.get(), N, ob.p(), nullptr);
      Outputs o;
      o.add(of), o.add(ob);
      return o;
    });
    std::vector<float> want(size_t(N * C), 0.0f);
    cpu::embedding_forward<float>(tv.data(), row_begin, rows, C, ids.data(), N, want.data());
    EXPECT_TRUE(same_bits(out[0], want));
    EXPECT_TRUE(same_bits(out[1], rounded_bf16(want)));
  }
}

// fp64 sums of squares and dot products: the same bits at any alignment (each thread sums the
// same chunks in the same order), within 1e-12 of the host's fp64 sum.
TEST(GpuVectorAccess, Reductions) {
  VT_SKIP_WITHOUT_CUDA();
  for (int64_t n : {int64_t(1), int64_t(7), int64_t(4099), int64_t(100003)}) {
    SCOPED_TRACE(testing::Message() << "n " << n);
    const auto xv = f32(as<bf>(randn(size_t(n), 60))), yv = f32(as<bf>(randn(size_t(n), 61)));
    const auto out = both_paths([&](int off) {
      Placed<float> xf(xv, off), yf(yv, off);
      Placed<bf> xb(as<bf>(xv), off), yb(as<bf>(yv), off);
      DeviceBuffer<double> partials(std::vector<double>(cuda::kReduceScratch, 0.0)), r(4);
      cuda::sum_squares(xf.p(), n, partials.get(), r.get() + 0, false, nullptr);
      cuda::sum_squares(xb.p(), n, partials.get(), r.get() + 1, false, nullptr);
      cuda::dot(xf.p(), yf.p(), n, partials.get(), r.get() + 2, false, nullptr);
      cuda::dot(xb.p(), yb.p(), n, partials.get(), r.get() + 3, false, nullptr);
      Outputs o;
      for (double v : r.download()) {  // the doubles' bits as two floats each
        float w[2];
        std::memcpy(w, &v, sizeof v);
        o.add_exact({w[0], w[1]});
      }
      return o;
    });
    double ss = 0, dt = 0, abs_dt = 0;
    for (int64_t i = 0; i < n; ++i) {
      ss += double(xv[i]) * xv[i];
      dt += double(xv[i]) * yv[i];
      abs_dt += std::fabs(double(xv[i]) * yv[i]);
    }
    const auto value = [&](int k) {
      double v;
      std::memcpy(&v, out[size_t(k)].data(), sizeof v);
      return v;
    };
    EXPECT_NEAR(value(0), ss, 1e-12 * ss);
    EXPECT_NEAR(value(1), ss, 1e-12 * ss);
    EXPECT_NEAR(value(2), dt, 1e-12 * abs_dt);
    EXPECT_NEAR(value(3), dt, 1e-12 * abs_dt);
  }
}

// ------------------------------------------------------------------------------------------------
// Row kernels: widths of a few elements (a team of 1-4 threads, 64-256 rows a block), QK-norm's
// head rows (64, 128), d24 and d32 (1536, 2048: one 16-byte word per thread), odd widths (the
// fallback on both runs), and rows wider than 1024 chunks (two slots, the second read again).
struct RowCase {
  int64_t rows, C;
};
template <class T>
std::vector<RowCase> row_cases() {
  const int64_t wide = sizeof(T) == 2 ? 8200 : 4100;  // 1025 chunks
  return {{37, 1}, {37, 7}, {300, 8}, {37, 64}, {41, 128}, {19, 200}, {19, 300},
          {5, 1536}, {5, 1543}, {4, 2048}, {3, wide}};
}

// RmsNorm forward and backward (dy2, accumulate) against the CPU with tests/gpu/rmsnorm_test.cc's
// tolerances (the fp32 sum of squares: each thread adds at most 2 x 8 squares, the team a tree
// of at most 10 levels, ~30 ulp, well inside 2e-5), and bit for bit against the unfused pairs:
// add_rmsnorm = value_axpy + copy + rmsnorm_forward, and backward with dy2 = value_axpy into dy +
// backward.
template <class T>
void check_rmsnorm() {
  const bool bf16 = sizeof(T) == 2;
  const float scale = 1.2f, eps = 1e-6f;
  uint64_t seed = 70;
  for (const RowCase rc : row_cases<T>()) {
    const int64_t rows = rc.rows, C = rc.C, n = rows * C;
    SCOPED_TRACE(testing::Message() << rows << " x " << C << (bf16 ? " bf16" : " f32"));
    const auto xv = f32(as<T>(randn(size_t(n), seed++, 2.0f)));
    const auto dv = f32(as<T>(randn(size_t(n), seed++)));
    const auto gv = f32(as<T>(randn(size_t(n), seed++)));
    const auto g2v = f32(as<T>(randn(size_t(n), seed++)));
    const auto out = both_paths([&](int off) {
      Placed<T> x(as<T>(xv), off), y(size_t(n), off), dx(size_t(n), off), dxa(as<T>(dv), off);
      Placed<T> g(as<T>(gv), off), g2(as<T>(g2v), off), dxs(size_t(n), off);
      Placed<T> xa(as<T>(xv), off), keep(size_t(n), off), ya(size_t(n), off);
      Placed<float> r(size_t(rows), off), ra(size_t(rows), off);
      cuda::rmsnorm_forward(x.p(), y.p(), r.p(), rows, C, scale, eps, nullptr);
      cuda::rmsnorm_backward(x.p(), r.p(), g.p(), dx.p(), rows, C, scale, false, nullptr);
      cuda::rmsnorm_backward(x.p(), r.p(), g.p(), dxa.p(), rows, C, scale, true, nullptr);
      cuda::rmsnorm_backward(x.p(), r.p(), g.p(), dxs.p(), rows, C, scale, false, nullptr,
                             g2.p());
      cuda::add_rmsnorm_forward(xa.p(), g.p(), keep.p(), ya.p(), ra.p(), rows, C, scale, eps,
                                nullptr);
      Outputs o;
      o.add(y), o.add(r), o.add(dx), o.add(dxa), o.add(dxs), o.add(xa), o.add(keep), o.add(ya),
          o.add(ra);
      // The unfused pairs on the same alignment: axpy then norm / backward.
      Placed<T> xu(as<T>(xv), off), yu(size_t(n), off), gu(as<T>(gv), off), dxu(size_t(n), off);
      Placed<float> ru(size_t(rows), off);
      cuda::value_axpy(1.0f, g.p(), xu.p(), n, nullptr);
      cuda::rmsnorm_forward(xu.p(), yu.p(), ru.p(), rows, C, scale, eps, nullptr);
      cuda::value_axpy(1.0f, g2.p(), gu.p(), n, nullptr);
      cuda::rmsnorm_backward(x.p(), r.p(), gu.p(), dxu.p(), rows, C, scale, false, nullptr);
      o.add(xu), o.add(yu), o.add(ru), o.add(dxu);
      return o;
    });
    const auto& [y, r, dx, dxa, dxs, xa, keep, ya, ra, xu, yu, ru, dxu] =
        std::tie(out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7], out[8], out[9],
                 out[10], out[11], out[12]);
    EXPECT_TRUE(same_bits(xa, xu)) << "add_rmsnorm's x";
    EXPECT_TRUE(same_bits(keep, xu)) << "add_rmsnorm's keep";
    EXPECT_TRUE(same_bits(ya, yu)) << "add_rmsnorm's y";
    EXPECT_TRUE(same_bits(ra, ru)) << "add_rmsnorm's rstd";
    EXPECT_TRUE(same_bits(dxs, dxu)) << "backward with dy2";

    std::vector<float> cy(n), cr(rows), cdx(n), cdxa = dv;
    cpu::rmsnorm_forward<float>(xv.data(), cy.data(), cr.data(), rows, C, scale, eps);
    cpu::rmsnorm_backward<float>(xv.data(), r.data(), gv.data(), cdx.data(), rows, C, scale,
                                 false);
    cpu::rmsnorm_backward<float>(xv.data(), r.data(), gv.data(), cdxa.data(), rows, C, scale,
                                 true);
    const double rt = bf16 ? kBf16Rtol : 2e-5;
    EXPECT_TRUE(all_close(r, cr, 2e-5, 0.0)) << "rstd";
    EXPECT_TRUE(all_close(y, cy, rt, 1e-6)) << "y";
    const double terms = scale * max_abs(r) * max_abs(gv);
    EXPECT_TRUE(all_close(dx, cdx, rt, 2e-5 * terms)) << "dx";
    EXPECT_TRUE(all_close(dxa, cdxa, rt, 2e-5 * (terms + max_abs(dv)))) << "dx+=";
  }
}

TEST(GpuVectorAccess, RmsNormF32) {
  VT_SKIP_WITHOUT_CUDA();
  check_rmsnorm<float>();
}
TEST(GpuVectorAccess, RmsNormBf16) {
  VT_SKIP_WITHOUT_CUDA();
  check_rmsnorm<bf>();
}

// RoPE and RoPE + QK-norm forward over head dims from 2 to 512 (teams of 1 to 64 threads; hd
// 6 and 200 bf16 / 6 f32 have half-rows that are not whole chunks: the fallback on both runs),
// 5 positions from offset 3, 3 heads (15 vectors: a partial block). Against the CPU with
// tests/gpu/op_parity_test.cc's tolerances (rotation 1e-6; rstd 2e-5; y 2e-5 + two bf16
// roundings for bf16), in place equal to out of place.
template <class T>
void check_rope() {
  const bool bf16 = sizeof(T) == 2;
  const int64_t B = 1, Tn = 5, H = 3, pos0 = 3;
  const double base = 10000.0;
  const float scale = 1.2f, eps = 1e-6f;
  uint64_t seed = 90;
  for (int64_t hd : {2, 6, 16, 32, 64, 128, 200, 256, 512}) {
    const int64_t n = B * Tn * H * hd, items = B * Tn * H;
    SCOPED_TRACE(testing::Message() << "hd " << hd << (bf16 ? " bf16" : " f32"));
    const auto xv = f32(as<T>(randn(size_t(n), seed++, 2.0f)));
    DeviceBuffer<float2> table(size_t((Tn + pos0) * hd / 2));
    cuda::rope_table(table.get(), Tn + pos0, hd, base, nullptr);
    const auto out = both_paths([&](int off) {
      Placed<T> x(as<T>(xv), off), y(size_t(n), off), z(size_t(n), off), back(size_t(n), off);
      Placed<T> xi(as<T>(xv), off);
      Placed<float> r(size_t(items), off), ri(size_t(items), off);
      cuda::rope_forward(x.p(), y.p(), B, Tn, H, hd, table.get(), pos0, nullptr);
      cuda::rope_backward(y.p(), back.p(), B, Tn, H, hd, table.get(), pos0, nullptr);
      cuda::rope_rmsnorm_forward(x.p(), z.p(), r.p(), B, Tn, H, hd, table.get(), pos0, scale, eps,
                                 nullptr);
      cuda::rope_rmsnorm_forward(xi.p(), xi.p(), ri.p(), B, Tn, H, hd, table.get(), pos0, scale,
                                 eps, nullptr);
      Outputs o;
      o.add(y, true), o.add(back, true), o.add(z, true), o.add(r), o.add(xi, true), o.add(ri);
      return o;
    });
    EXPECT_TRUE(same_bits(out[4], out[2])) << "in place y";
    EXPECT_TRUE(same_bits(out[5], out[3])) << "in place rstd";
    std::vector<float> cy(n), cz(n), cr(items);
    cpu::rope_forward<float>(xv.data(), cy.data(), B, Tn, H, hd, base, pos0);
    cpu::rope_rmsnorm_forward<float>(xv.data(), cz.data(), cr.data(), B, Tn, H, hd, base, scale,
                                     eps, pos0);
    const double rot = bf16 ? 1e-6 + kBf16Rtol : 1e-6;
    EXPECT_TRUE(all_close(out[0], cy, rot, 1e-6 * max_abs(cy))) << "rope";
    // rope_backward(rope_forward(x)) = x up to the roundings of y: each of y_j, y_{j+hd/2} is
    // within u = 2^-9 (bf16) of itself, |y_j| <= |(x_j, x_{j+hd/2})| <= sqrt(2) max|x|, and the
    // inverse rotation adds the pair's two errors: 2 sqrt(2) u max|x| < 1.5 kBf16Rtol max|x|,
    // plus one rounding of the result (u |x_j|). fp32: a few ulp of max|x|.
    EXPECT_TRUE(all_close(out[1], xv, bf16 ? kBf16Rtol : 0.0,
                          (bf16 ? 1.5 * kBf16Rtol : 4e-7) * max_abs(xv)))
        << "rope back";
    EXPECT_TRUE(all_close(out[3], cr, 2e-5, 0.0)) << "rope_rmsnorm rstd";
    EXPECT_TRUE(all_close(out[2], cz, bf16 ? 2e-5 + 2 * kBf16Rtol : 2e-5, 1e-6 * max_abs(cz)))
        << "rope_rmsnorm y";
  }
}

TEST(GpuVectorAccess, RopeF32) {
  VT_SKIP_WITHOUT_CUDA();
  check_rope<float>();
}
TEST(GpuVectorAccess, RopeBf16) {
  VT_SKIP_WITHOUT_CUDA();
  check_rope<bf>();
}

// RoPE alone on head vectors wider than a 1024-thread team holds in one chunk each (hd 16400
// bf16, 8200 f32: 1025 chunks of pairs, the second read in a loop): against the CPU as above.
template <class T>
void check_rope_wide() {
  const bool bf16 = sizeof(T) == 2;
  const int64_t B = 1, Tn = 2, H = 2, hd = bf16 ? 16400 : 8200, pos0 = 5, n = B * Tn * H * hd;
  const auto xv = f32(as<T>(randn(size_t(n), 95, 2.0f)));
  DeviceBuffer<float2> table(size_t((Tn + pos0) * hd / 2));
  cuda::rope_table(table.get(), Tn + pos0, hd, 10000.0, nullptr);
  const auto out = both_paths([&](int off) {
    Placed<T> x(as<T>(xv), off), y(size_t(n), off);
    cuda::rope_forward(x.p(), y.p(), B, Tn, H, hd, table.get(), pos0, nullptr);
    cuda::rope_forward(x.p(), x.p(), B, Tn, H, hd, table.get(), pos0, nullptr);  // in place
    Outputs o;
    o.add(y, true), o.add(x, true);
    return o;
  });
  std::vector<float> cy(n);
  cpu::rope_forward<float>(xv.data(), cy.data(), B, Tn, H, hd, 10000.0, pos0);
  EXPECT_TRUE(all_close(out[0], cy, bf16 ? 1e-6 + kBf16Rtol : 1e-6, 1e-6 * max_abs(cy)));
  EXPECT_TRUE(same_bits(out[1], out[0])) << "in place";
}

TEST(GpuVectorAccess, RopeWideVectorsF32) {
  VT_SKIP_WITHOUT_CUDA();
  check_rope_wide<float>();
}
TEST(GpuVectorAccess, RopeWideVectorsBf16) {
  VT_SKIP_WITHOUT_CUDA();
  check_rope_wide<bf>();
}

// The fused cross-entropy loss end (and the sliced forward and backward), bf16 logits: ld 520
// (rows of whole chunks: 16-byte words when aligned) and 523 (the fallback on both runs), 13
// padding columns, targets inside, at the last valid column and in the padding. Against the CPU
// with tests/gpu/xent_test.cc's tolerances (2e-5 on sums, 1e-5 absolute on z; dlogits 2e-5 and
// 1e-6, plus one bf16 rounding).
TEST(GpuVectorAccess, CrossEntropy) {
  VT_SKIP_WITHOUT_CUDA();
  const int64_t N = 6;
  const float cap = 15.0f, gs = 0.25f;
  for (int64_t ld : {int64_t(520), int64_t(523)}) {
    const int64_t n_valid = ld - 13;
    SCOPED_TRACE(testing::Message() << "ld " << ld);
    const auto lv = f32(as<bf>(randn(size_t(N * ld), 80, 8.0f)));
    const std::vector<int32_t> targets = {0, int32_t(n_valid - 1), int32_t(n_valid), 7, 100, 3};
    const auto out = both_paths([&](int off) {
      Placed<bf> l(as<bf>(lv), off), d(size_t(N * ld), off), inplace(as<bf>(lv), off);
      Placed<float> df(size_t(N * ld), off), db(size_t(N * ld), off);
      DeviceBuffer<float> lse(N), loss(N), lse2(N), loss2(N), mx(N), se(N), tz(N);
      DeviceBuffer<int32_t> t(targets);
      cuda::xent_loss_grad(l.p(), N, ld, n_valid, 0, t.get(), cap, gs, lse.get(), loss.get(),
                           d.p(), nullptr);
      cuda::xent_loss_grad(l.p(), N, ld, n_valid, 0, t.get(), cap, gs, lse.get(), loss.get(),
                           df.p(), nullptr);
      cuda::xent_loss_grad(inplace.p(), N, ld, n_valid, 0, t.get(), cap, gs, lse2.get(),
                           loss2.get(), inplace.p(), nullptr);
      cuda::xent_partial_forward(l.p(), N, ld, n_valid, 0, t.get(), cap, mx.get(), se.get(),
                                 tz.get(), nullptr);
      cuda::xent_backward(l.p(), N, ld, n_valid, 0, t.get(), cap, lse.get(), gs, db.p(), nullptr);
      Outputs o;
      o.add(d), o.add(df), o.add(inplace), o.add(db);
      for (DeviceBuffer<float>* b : {&lse, &loss, &lse2, &loss2, &mx, &se, &tz})
        o.add_exact(b->download());
      return o;
    });
    EXPECT_TRUE(same_bits(out[2], out[0])) << "in place";
    EXPECT_TRUE(same_bits(out[6], out[4])) << "in place lse";
    std::vector<float> lse(N), loss(N), dl(size_t(N * ld)), mx(N), se(N), tz(N);
    cpu::xent_loss_grad<float>(lv.data(), N, ld, n_valid, 0, targets.data(), cap, gs, lse.data(),
                               loss.data(), dl.data());
    cpu::xent_partial_forward<float>(lv.data(), N, ld, n_valid, 0, targets.data(), cap, mx.data(),
                                     se.data(), tz.data());
    EXPECT_TRUE(all_close(out[1], dl, 2e-5, 1e-6)) << "dlogits f32";
    EXPECT_TRUE(all_close(out[0], dl, 2e-5 + kBf16Rtol, 1e-6)) << "dlogits bf16";
    EXPECT_TRUE(all_close(out[3], dl, 2e-5, 1e-6)) << "sliced backward";
    EXPECT_TRUE(all_close(out[4], lse, 2e-5, 0.0)) << "lse";
    EXPECT_TRUE(all_close(out[5], loss, 2e-5, 1e-5)) << "loss";
    EXPECT_TRUE(all_close(out[8], mx, 0.0, 1e-5)) << "row max";
    EXPECT_TRUE(all_close(out[9], se, 2e-5, 0.0)) << "row sumexp";
    EXPECT_TRUE(all_close(out[10], tz, 0.0, 1e-5)) << "target z";
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = n_valid; c < ld; ++c) ASSERT_EQ(out[1][size_t(r * ld + c)], 0.0f);
  }
}

}  // namespace
}  // namespace vt::gputest
