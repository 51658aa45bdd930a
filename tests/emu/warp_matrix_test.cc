// The emulation's tensor-core instructions (kernels/mma.cuh on vt_emu/warp_matrix.h) against the
// PTX ISA, independently of the emulation's own code: the fragment layouts are written out again
// here from the ISA's formulas ("Matrix Fragments for mma.m16n8k16 with floating point type",
// "ldmatrix"), known matrices are distributed over the lanes by them, and the results gathered
// back by them must be the plain matrix product (exact: small integers) or the stored matrices.
// Also: ldmatrix + mma on row-major tiles with the address patterns kernels/attention_tc.cu uses,
// fp32 accumulation, cp.async completing only at its wait (zero fill, groups), and misuse (fewer
// than 32 lanes, lanes at different instructions, misaligned rows) failing the launch.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/launch.cuh"
#include "kernels/mma.cuh"

namespace {

using vt::cuda::tc::FragA;
using vt::cuda::tc::FragB;
using vt::cuda::tc::FragC;

template <class T>
struct Buf {
  T* p = nullptr;
  size_t n;
  explicit Buf(size_t count) : n(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), sizeof(T) * n), cudaSuccess);
  }
  explicit Buf(const std::vector<T>& h) : Buf(h.size()) {
    EXPECT_EQ(cudaMemcpy(p, h.data(), sizeof(T) * n, cudaMemcpyHostToDevice), cudaSuccess);
  }
  ~Buf() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, sizeof(T) * n, cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

// bf16 bits of a float that bf16 represents exactly (the tests only use such values).
uint16_t bf16_exact(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  EXPECT_EQ(u & 0xffffu, 0u) << f << " is not exact in bf16";
  return uint16_t(u >> 16);
}
float bf16_value(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// The PTX ISA's positions, written out from the ISA text (g = groupID, c = threadID_in_group).
struct Pos {
  int row, col;
};
Pos a_pos(int lane, int i) {  // A, .bf16, element a_i
  const int g = lane >> 2, c = lane % 4;
  const int row = (i < 2 || (4 <= i && i < 6)) ? g : g + 8;
  const int col = i < 4 ? c * 2 + (i & 1) : c * 2 + (i & 1) + 8;
  return {row, col};
}
Pos b_pos(int lane, int i) {  // B, .bf16, element b_i
  const int g = lane >> 2, c = lane % 4;
  return {i < 2 ? c * 2 + (i & 1) : c * 2 + (i & 1) + 8, g};
}
Pos c_pos(int lane, int i) {  // C/D, .f32, element c_i
  const int g = lane >> 2, c = lane % 4;
  return {i < 2 ? g : g + 8, c * 2 + (i & 1)};
}

// --- kernels ----------------------------------------------------------------------------------
// Each lane loads its fragment registers (a: 4, b: 2 words, c: 4 floats), d = a b + c.
__global__ void mma_kernel(const uint32_t* a, const uint32_t* b, const float* c, float* d) {
  const int l = threadIdx.x;
  FragA fa;
  FragB fb;
  FragC fc;
  for (int i = 0; i < 4; ++i) fa.r[i] = a[l * 4 + i];
  for (int i = 0; i < 2; ++i) fb.r[i] = b[l * 2 + i];
  for (int i = 0; i < 4; ++i) fc.x[i] = c[l * 4 + i];
  vt::cuda::tc::mma_bf16(fc, fa, fb);
  for (int i = 0; i < 4; ++i) d[l * 4 + i] = fc.x[i];
}

// Shared memory holds `rows` rows of `ld` bf16 (a copy of src); lane l gives the address
// smem + offs[l] (elements) and receives `num` registers (.trans when trans).
__global__ void ldmatrix_kernel(const uint16_t* src, int n, const int* offs, int num, int trans,
                                uint32_t* out) {
  __shared__ __align__(16) uint16_t smem[1024];
  for (int i = threadIdx.x; i < n; i += blockDim.x) smem[i] = src[i];
  __syncthreads();
  const int l = threadIdx.x;
  const void* row = smem + offs[l];
  uint32_t r[4] = {0, 0, 0, 0};
  if (num == 4) {
    uint32_t x[4];
    trans ? vt::cuda::tc::ldsm_x4_trans(x, row) : vt::cuda::tc::ldsm_x4(x, row);
    for (int i = 0; i < 4; ++i) r[i] = x[i];
  } else if (num == 2) {
    uint32_t x[2];
    trans ? vt::cuda::tc::ldsm_x2_trans(x, row) : vt::cuda::tc::ldsm_x2(x, row);
    r[0] = x[0];
    r[1] = x[1];
  } else {
    trans ? vt::cuda::tc::ldsm_x1_trans(r[0], row) : vt::cuda::tc::ldsm_x1(r[0], row);
  }
  for (int i = 0; i < 4; ++i) out[l * 4 + i] = r[i];
}

// D (16x16 fp32, row-major) = A (16x16, row-major) * Bt^T where Bt (16 n x 16 k) is stored
// row-major ([n][k], as K rows are) when bkn == 0, or B (16 k x 16 n) row-major ([k][n], as V
// rows are) when bkn == 1: the address patterns of kernels/attention_tc.cu.
__global__ void tile_product_kernel(const uint16_t* a, const uint16_t* b, int bkn, float* d) {
  __shared__ __align__(16) uint16_t As[16 * 24];  // row stride 24 elements (48 bytes)
  __shared__ __align__(16) uint16_t Bs[16 * 24];
  for (int i = threadIdx.x; i < 256; i += 32) {
    As[(i / 16) * 24 + i % 16] = a[i];
    Bs[(i / 16) * 24 + i % 16] = b[i];
  }
  __syncthreads();
  const int l = threadIdx.x;
  FragA fa;
  vt::cuda::tc::ldsm_x4(fa.r, As + (l % 16) * 24 + (l / 16) * 8);
  uint32_t x[4];
  if (bkn == 0) {  // [n][k]: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, k 0-7), (n 8-15, k 8-15)
    vt::cuda::tc::ldsm_x4(x, Bs + ((l % 8) + (l / 16) * 8) * 24 + ((l / 8) % 2) * 8);
  } else {  // [k][n] with .trans: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15)
    vt::cuda::tc::ldsm_x4_trans(x, Bs + ((l % 8) + ((l / 8) % 2) * 8) * 24 + (l / 16) * 8);
  }
  for (int nt = 0; nt < 2; ++nt) {
    FragB fb;
    fb.r[0] = x[2 * nt];
    fb.r[1] = x[2 * nt + 1];
    FragC acc = {{0.0f, 0.0f, 0.0f, 0.0f}};
    vt::cuda::tc::mma_bf16(acc, fa, fb);
    const int g = l >> 2, c = l % 4;
    d[g * 16 + nt * 8 + 2 * c] = acc.x[0];
    d[g * 16 + nt * 8 + 2 * c + 1] = acc.x[1];
    d[(g + 8) * 16 + nt * 8 + 2 * c] = acc.x[2];
    d[(g + 8) * 16 + nt * 8 + 2 * c + 1] = acc.x[3];
  }
}

// Lanes below `lanes` take part (the others return first).
__global__ void partial_warp_mma_kernel(float* d, int lanes) {
  if (int(threadIdx.x) >= lanes) return;
  FragA fa = {{0, 0, 0, 0}};
  FragB fb = {{0, 0}};
  FragC fc = {{0, 0, 0, 0}};
  vt::cuda::tc::mma_bf16(fc, fa, fb);
  d[threadIdx.x] = fc.x[0];
}

// Lane 0 issues an ldmatrix while the others issue an mma.
__global__ void divergent_mma_kernel(float* d) {
  __shared__ __align__(16) uint16_t smem[64];
  smem[threadIdx.x] = 0;
  __syncthreads();
  FragA fa = {{0, 0, 0, 0}};
  FragB fb = {{0, 0}};
  FragC fc = {{0, 0, 0, 0}};
  if (threadIdx.x == 0) {
    vt::cuda::tc::ldsm_x1(fa.r[0], smem);
  } else {
    vt::cuda::tc::mma_bf16(fc, fa, fb);
  }
  d[threadIdx.x] = fc.x[0];
}

// Half the warp multiplies at one line, the other half at another: two instructions.
__global__ void two_site_mma_kernel(float* d) {
  FragA fa = {{0, 0, 0, 0}};
  FragB fb = {{0, 0}};
  FragC fc = {{0, 0, 0, 0}};
  if (threadIdx.x < 16) {
    vt::cuda::tc::mma_bf16(fc, fa, fb);
  } else {
    vt::cuda::tc::mma_bf16(fc, fa, fb);
  }
  d[threadIdx.x] = fc.x[0];
}

__global__ void misaligned_ldmatrix_kernel(uint32_t* out) {
  __shared__ __align__(16) uint16_t smem[256];
  smem[threadIdx.x] = 1;
  __syncthreads();
  uint32_t r = 0;
  vt::cuda::tc::ldsm_x1(r, smem + 8 * (threadIdx.x % 8) + 1);  // 2 bytes off
  out[threadIdx.x] = r;
}

// out[0..3] = smem after issue (before any wait), out[4..7] after wait_group<1> (the first
// group only), out[8..11] after wait_group<0>. Copies of 16 bytes (4 floats): group 1 = src[0..3]
// to s[0..3] and a zero fill of s[4..7]; group 2 = src[4..7] to s[8..11].
__global__ void cp_async_kernel(const float* src, float* out) {
  __shared__ __align__(16) float s[12];
  if (threadIdx.x == 0) {
    for (int i = 0; i < 12; ++i) s[i] = -1.0f;
    vt::cuda::tc::cp_async16(s, src, true);
    vt::cuda::tc::cp_async16(s + 4, src, false);
    vt::cuda::tc::cp_async_commit();
    vt::cuda::tc::cp_async16(s + 8, src + 4, true);
    vt::cuda::tc::cp_async_commit();
    out[0] = s[0], out[1] = s[4], out[2] = s[8], out[3] = s[11];
    vt::cuda::tc::cp_async_wait<1>();
    out[4] = s[0], out[5] = s[4], out[6] = s[8], out[7] = s[3];
    vt::cuda::tc::cp_async_wait<0>();
    out[8] = s[0], out[9] = s[4], out[10] = s[8], out[11] = s[11];
  }
}

// Expects the next synchronization to fail with `text` in the message, then resets the device.
void expect_launch_failure(const std::string& text) {
  const cudaError_t got = cudaDeviceSynchronize();
  EXPECT_EQ(got, cudaErrorLaunchFailure) << cudaGetErrorName(got);
  EXPECT_NE(std::string(cudaGetErrorString(got)).find(text), std::string::npos)
      << cudaGetErrorString(got);
  EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
}

// --- tests ------------------------------------------------------------------------------------
TEST(EmuWarpMatrix, MmaFragmentsFollowThePtxLayouts) {
  std::mt19937 rng(3);
  std::uniform_int_distribution<int> small(-8, 8);
  float A[16][16], B[16][8], C[16][8];
  for (auto& r : A)
    for (auto& x : r) x = float(small(rng));
  for (auto& r : B)
    for (auto& x : r) x = float(small(rng));
  for (auto& r : C)
    for (auto& x : r) x = float(small(rng) * 16);
  std::vector<uint32_t> a(32 * 4, 0), b(32 * 2, 0);
  std::vector<float> c(32 * 4);
  for (int l = 0; l < 32; ++l) {
    for (int i = 0; i < 8; ++i) {
      const Pos p = a_pos(l, i);
      a[size_t(l * 4 + i / 2)] |= uint32_t(bf16_exact(A[p.row][p.col])) << (16 * (i & 1));
    }
    for (int i = 0; i < 4; ++i) {
      const Pos p = b_pos(l, i);
      b[size_t(l * 2 + i / 2)] |= uint32_t(bf16_exact(B[p.row][p.col])) << (16 * (i & 1));
    }
    for (int i = 0; i < 4; ++i) c[size_t(l * 4 + i)] = C[c_pos(l, i).row][c_pos(l, i).col];
  }
  Buf<uint32_t> da(a), db(b);
  Buf<float> dc(c), dd(32 * 4);
  VT_LAUNCH(mma_kernel, 1, 32, 0, nullptr, da.p, db.p, dc.p, dd.p);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const auto d = dd.get();
  // Every element of D appears exactly once over the lanes and equals the exact product.
  int seen[16][8] = {};
  for (int l = 0; l < 32; ++l)
    for (int i = 0; i < 4; ++i) {
      const Pos p = c_pos(l, i);
      ++seen[p.row][p.col];
      double want = C[p.row][p.col];
      for (int k = 0; k < 16; ++k) want += double(A[p.row][k]) * B[k][p.col];
      EXPECT_EQ(double(d[size_t(l * 4 + i)]), want) << "lane " << l << " d" << i;
    }
  for (auto& r : seen)
    for (int s : r) EXPECT_EQ(s, 1);
}

TEST(EmuWarpMatrix, MmaAccumulatesInFp32) {
  // Every a and b is 1 + 2^-7 (exact in bf16): each product 1 + 2^-6 + 2^-14 and every partial sum
  // of up to 16 of them needs 15 significant bits: exact in fp32, not in bf16 (8) or fp16 (11).
  // With c = 2^20 the sum rounds in fp32 (ulp 2^-3): at most half an ulp per addition.
  const float x = 1.0f + 1.0f / 128.0f;
  std::vector<uint32_t> a(32 * 4), b(32 * 2);
  const uint32_t two = uint32_t(bf16_exact(x)) * 0x10001u;
  for (auto& r : a) r = two;
  for (auto& r : b) r = two;
  std::vector<float> c(32 * 4, 0.0f);
  c[0] = 1048576.0f;  // lane 0, c0: row 0, col 0
  Buf<uint32_t> da(a), db(b);
  Buf<float> dc(c), dd(32 * 4);
  VT_LAUNCH(mma_kernel, 1, 32, 0, nullptr, da.p, db.p, dc.p, dd.p);
  const auto d = dd.get();
  const double sum16 = 16.0 + 0.25 + 1.0 / 1024.0;
  EXPECT_EQ(double(d[1]), sum16);  // lane 0, d1: row 0, col 1, c = 0
  EXPECT_NEAR(double(d[0]), 1048576.0 + sum16, 16 * 0.0625);
}

// Four 8x8 matrices at rows of 24 elements (48-byte stride: not contiguous), matrix i at row 8i.
TEST(EmuWarpMatrix, LdmatrixFollowsThePtxLayout) {
  const int ld = 24;
  std::vector<uint16_t> smem(size_t(32 * ld));
  auto value = [](int mat, int r, int c) { return float(mat * 64 + r * 8 + c); };
  for (int m = 0; m < 4; ++m)
    for (int r = 0; r < 8; ++r)
      for (int c = 0; c < 8; ++c) smem[size_t((8 * m + r) * ld + c)] = bf16_exact(value(m, r, c));
  Buf<uint16_t> src(smem);
  for (int num : {1, 2, 4})
    for (int trans : {0, 1}) {
      SCOPED_TRACE(testing::Message() << "x" << num << (trans ? ".trans" : ""));
      std::vector<int> offs(32);
      // Lanes 8i..8i+7 address matrix i's rows; lanes past 8 * num point at odd, misaligned
      // places, which ldmatrix must ignore.
      for (int l = 0; l < 32; ++l) offs[size_t(l)] = l < 8 * num ? l * ld : 3;
      Buf<int> doffs(offs);
      Buf<uint32_t> out(32 * 4);
      VT_LAUNCH(ldmatrix_kernel, 1, 32, 0, nullptr, src.p, int(smem.size()), doffs.p, num, trans,
                out.p);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      const auto o = out.get();
      for (int l = 0; l < 32; ++l)
        for (int i = 0; i < num; ++i) {
          const int g = l >> 2, c = l % 4;  // row g, cols 2c, 2c+1 (of the transpose with .trans)
          const float lo = trans ? value(i, 2 * c, g) : value(i, g, 2 * c);
          const float hi = trans ? value(i, 2 * c + 1, g) : value(i, g, 2 * c + 1);
          const uint32_t reg = o[size_t(l * 4 + i)];
          EXPECT_EQ(bf16_value(uint16_t(reg & 0xffff)), lo) << "lane " << l << " reg " << i;
          EXPECT_EQ(bf16_value(uint16_t(reg >> 16)), hi) << "lane " << l << " reg " << i;
        }
    }
}

TEST(EmuWarpMatrix, LdmatrixAndMmaComputeTileProducts) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> small(-6, 6);
  std::vector<float> A(256), Bt(256);  // A [m][k], Bt [n][k] (so B[k][n] = Bt[n][k])
  for (auto& x : A) x = float(small(rng));
  for (auto& x : Bt) x = float(small(rng));
  std::vector<uint16_t> a(256), bnk(256), bkn(256);
  for (int i = 0; i < 256; ++i) a[size_t(i)] = bf16_exact(A[size_t(i)]);
  for (int n = 0; n < 16; ++n)
    for (int k = 0; k < 16; ++k) {
      bnk[size_t(n * 16 + k)] = bf16_exact(Bt[size_t(n * 16 + k)]);
      bkn[size_t(k * 16 + n)] = bf16_exact(Bt[size_t(n * 16 + k)]);
    }
  Buf<uint16_t> da(a), d_nk(bnk), d_kn(bkn);
  for (int layout : {0, 1}) {
    SCOPED_TRACE(layout == 0 ? "B from [n][k]" : "B from [k][n] with .trans");
    Buf<float> dd(256);
    VT_LAUNCH(tile_product_kernel, 1, 32, 0, nullptr, da.p, layout == 0 ? d_nk.p : d_kn.p, layout,
              dd.p);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const auto d = dd.get();
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 16; ++n) {
        double want = 0;
        for (int k = 0; k < 16; ++k) want += double(A[size_t(m * 16 + k)]) * Bt[size_t(n * 16 + k)];
        EXPECT_EQ(double(d[size_t(m * 16 + n)]), want) << "(" << m << ", " << n << ")";
      }
  }
}

TEST(EmuWarpMatrix, CpAsyncLandsAtItsWait) {
  Buf<float> src(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8}), out(12);
  VT_LAUNCH(cp_async_kernel, 1, 32, 0, nullptr, src.p, out.p);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  const auto o = out.get();
  EXPECT_EQ(std::vector<float>(o.begin(), o.begin() + 4), (std::vector<float>{-1, -1, -1, -1}))
      << "nothing lands before the wait";
  EXPECT_EQ(std::vector<float>(o.begin() + 4, o.begin() + 8), (std::vector<float>{1, 0, -1, 4}))
      << "wait_group 1: the older group (copy + zero fill) only";
  EXPECT_EQ(std::vector<float>(o.begin() + 8, o.end()), (std::vector<float>{1, 0, 5, 8}));
}

TEST(EmuWarpMatrix, MmaNeedsTheWholeWarp) {
  {
    Buf<float> d(32);
    VT_LAUNCH(partial_warp_mma_kernel, 1, 32, 0, nullptr, d.p, 16);
  }
  expect_launch_failure("needs all 32 lanes");
  {
    Buf<float> d(16);
    VT_LAUNCH(partial_warp_mma_kernel, 1, 16, 0, nullptr, d.p, 16);  // a 16-thread block
  }
  expect_launch_failure("needs all 32 lanes");
}

TEST(EmuWarpMatrix, DivergentWarpMatrixOperationsFail) {
  {
    Buf<float> d(32);
    VT_LAUNCH(divergent_mma_kernel, 1, 32, 0, nullptr, d.p);
  }
  expect_launch_failure("divergent warp collectives");
  {
    Buf<float> d(32);
    VT_LAUNCH(two_site_mma_kernel, 1, 32, 0, nullptr, d.p);
  }
  expect_launch_failure("divergent warp collectives");
}

TEST(EmuWarpMatrix, MisalignedLdmatrixRowsFail) {
  {
    Buf<uint32_t> out(32);
    VT_LAUNCH(misaligned_ldmatrix_kernel, 1, 32, 0, nullptr, out.p);
  }
  expect_launch_failure("16-byte aligned");
}

}  // namespace
