// Flash attention on tensor cores: forward, dQ (and D = rowsum(dO * O)), dK/dV (.cuh); and the
// previous kernels (v1), kept for attention_bench's old-vs-new timing only.
//
// All products are warp-level mma.sync m16n8k16 (bf16 in, fp32 accumulate) on operands read from
// shared memory with ldmatrix (kernels/mma.cuh); tiles move global -> shared with cp.async,
// double-buffered so the next tile loads while this one is multiplied, one barrier per tile.
// Shared tiles are bf16 rows padded to hd + 8 elements (PaddedTile below), so the 8 rows an
// ldmatrix reads fall in 8 different bank groups (v1: XOR-swizzled chunks, Tile). Four warps per
// block; nothing T x T is ever stored.
//
// Forward, block = (128 queries, head, batch), heaviest query tiles launched first; each warp
// owns 32 query rows (two m-tiles). Per key tile of 64 keys, as two sub-tiles of 32, per warp:
// S = Q K^T (32 x 32), masked only when the sub-tile crosses the diagonal or the window's edge;
// online softmax with the running max m (raw units) and the lane's partial row sums l, P =
// exp2(s scale log2e - m scale log2e); P (bf16) becomes the left operand of O += P V directly
// from the score registers (tc::a_from_c). Key tiles no row of the block can see are never
// visited: the loop runs over [max(0, t0 - W + 1), t0 + 127] only, and a warp skips sub-tiles
// none of its rows sees. At the end out = O / l and lse = (m scale log2e + log2 l) ln 2, through
// a shared staging tile for 16-byte stores. The epilogue (FwdEpilogue) is where per-head output
// terms of other block shapes belong: it sees each output element with its row, column, 1/l and
// the row's final max.
//
// Backward recomputes P = exp2(S log2e scale - lse log2e):
//   dS = P (dP - D) scale with dP = dO V^T, D = rowsum(dO * O);
//   dQ = dS K (kernel 1: block = 64 queries of one head, loops over their visible key tiles;
//   it computes D of its rows first, from its dO tile, and writes it for kernel 2);
//   dV = P^T dO, dK = dS^T Q (kernel 2: block = 64 keys of one KV head, each warp 16 keys, loops
//   over the query heads of the group and the 32-query tiles that see the keys).
// S and dP are computed twice (once per kernel), the price of writing every gradient once,
// deterministically, without atomics.
#include "kernels/attention_tc.cuh"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/block_reduce.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "kernels/mma.cuh"
#include "kernels/rope_row.cuh"

namespace vt::cuda {
namespace {

using bf16 = __nv_bfloat16;
using tc::FragA;
using tc::FragB;
using tc::FragC;

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Forward: 128 query rows (32 per warp, two m-tiles) x 64-key tiles. dQ: 64 query rows (16 per
// warp) x 64-key tiles. dK/dV: 64 keys (16 per warp) x 32-query tiles (fewer live score registers
// next to the two hd-wide accumulators). The forward v1 kernel (attention_bench only): 64 x 64.
constexpr int kFwdWarpRows = 32, kFwdRows = kFwdWarpRows * kWarps, kFwdKeys = 64, kFwdSub = 32;
constexpr int kDqRows = 16 * kWarps, kDqKeys = 64;
constexpr int kV1Rows = 16 * kWarps, kV1Keys = 64;
constexpr int kKvKeys = 16 * kWarps, kKvRows = 32;

// A shared tile of bf16 rows of HD elements. Chunk c (elements 8c..8c+7) of row r sits at chunk
// c ^ f(r): with >= 8 chunks per row f(r) = r % 8; with 4 (HD 32, two rows per 128 bytes)
// f(r) = (r / 2) % 4. Either way the 8 consecutive rows of an ldmatrix hit 8 distinct 16-byte
// bank groups, and a row's chunks are only permuted (reads and writes use the same map).
template <int HD>
struct Tile {
  static_assert(HD == 32 || HD == 64 || HD == 128, "head dims 32, 64, 128");
  static constexpr int kChunks = HD / 8;
  __device__ __forceinline__ static int chunk(int row, int c) {
    if constexpr (kChunks >= 8)
      return c ^ (row & 7);
    else
      return c ^ ((row >> 1) & (kChunks - 1));
  }
  // Element offset of (row, col), and of chunk c of a row.
  __device__ __forceinline__ static int at(int row, int col) {
    return row * HD + (chunk(row, col >> 3) << 3) + (col & 7);
  }
  __device__ __forceinline__ static int chunk_at(int row, int c) {
    return row * HD + (chunk(row, c) << 3);
  }
};

// The layout of the forward, dQ and dK/dV kernels (Tile stays for the v1 forward): rows padded
// to HD + 8 elements, chunks in place. Row strides of 80, 144
// and 272 bytes are odd multiples of 16, so 8 consecutive rows at one column still fall in 8
// distinct 16-byte bank groups, and every offset is additive: a lane's ldmatrix addresses are one
// base register plus immediates, where the XOR swizzle needs an operation (or a register kept
// live) per column step. Costs 8 elements a row of shared memory (6% at HD 128).
template <int HD>
struct PaddedTile {
  static_assert(HD == 32 || HD == 64 || HD == 128, "head dims 32, 64, 128");
  static constexpr int kStride = HD + 8;
  __device__ __forceinline__ static int at(int row, int col) { return row * kStride + col; }
  __device__ __forceinline__ static int chunk_at(int row, int c) { return row * kStride + c * 8; }
};

// Rows [row0, row0 + ROWS) of head `head` of a (B, T, heads, HD) tensor into a shared tile, as
// 16-byte cp.async copies; rows at or past T become zeros.
template <int HD, int ROWS, class L = Tile<HD>>
__device__ __forceinline__ void load_rows_async(bf16* tile, const bf16* __restrict__ g, int64_t b,
                                                int64_t row0, int64_t T, int heads, int head) {
  constexpr int kChunks = HD / 8;
  for (int i = threadIdx.x; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t t = row0 + r;
    const bool valid = t < T;
    const bf16* src = g + ((b * T + (valid ? t : 0)) * heads + head) * HD + c * 8;
    tc::cp_async16(tile + L::chunk_at(r, c), src, valid);
  }
}

// The same for a tensor given as `base` (row 0 of one (batch, head)) and its row stride in
// elements, in 32-bit row indices (T < 2^30, check_args): each thread copies one column chunk of
// rows r, r + kThreads / chunks, ..., through a pointer advanced by a fixed step, so nothing per
// copy stays live across a key loop (the loop above keeps a 64-bit address per copy).
template <int HD, int ROWS, class L>
__device__ __forceinline__ void load_tile_async(bf16* tile, const bf16* __restrict__ base,
                                                int row_stride, int row0, int T) {
  constexpr int kChunks = HD / 8, kRowStep = kThreads / kChunks;
  static_assert(kThreads % kChunks == 0 && ROWS % kRowStep == 0, "whole passes only");
  const int c = threadIdx.x % kChunks, r0 = threadIdx.x / kChunks;
  const int64_t step = int64_t(kRowStep) * row_stride;
  const bf16* src = base + int64_t(row0 + r0) * row_stride + c * 8;
#pragma unroll
  for (int n = 0; n < ROWS / kRowStep; ++n, src += step) {
    const int r = r0 + n * kRowStep;
    const bool valid = row0 + r < T;
    tc::cp_async16(tile + L::chunk_at(r, c), valid ? src : base, valid);
  }
}

// ROWS fp32 values [row0, row0 + ROWS) of a (B, H, T) statistic of head `head`; 0 past T.
template <int ROWS>
__device__ __forceinline__ void load_stats_async(float* dst, const float* __restrict__ g,
                                                 int64_t b, int64_t row0, int64_t T, int H,
                                                 int head) {
  for (int i = threadIdx.x; i < ROWS; i += kThreads) {
    const int64_t t = row0 + i;
    const bool valid = t < T;
    tc::cp_async4(dst + i, g + (b * H + head) * T + (valid ? t : 0), valid);
  }
}

// A shared tile back to rows [row0, row0 + ROWS) of head `head` of (B, T, heads, HD), 16 bytes
// per copy; rows at or past T are not written.
template <int HD, int ROWS, class L = Tile<HD>>
__device__ __forceinline__ void store_rows(bf16* __restrict__ g, const bf16* tile, int64_t b,
                                           int64_t row0, int64_t T, int heads, int head) {
  constexpr int kChunks = HD / 8;
  for (int i = threadIdx.x; i < ROWS * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const int64_t t = row0 + r;
    if (t < T)
      *reinterpret_cast<uint4*>(g + ((b * T + t) * heads + head) * HD + c * 8) =
          *reinterpret_cast<const uint4*>(tile + L::chunk_at(r, c));
  }
}

// The epilogue of dQ and dK under QK-norm (RopeNormGrad): back through the QK-norm and RoPE that
// made q or k from the saved pre-RoPE x, on the 16 rows [r0, r0 + 16) of a staged gradient tile
// (bf16, already rounded as it would be stored), in place, one row at a time by the warp that
// owns them; the function is rope_rmsnorm_backward_kernel's (kernels/rope_row.cuh), so the result
// is bit for bit the unfused pair's.
template <int HD, class L = Tile<HD>>
__device__ __forceinline__ void rope_norm_rows(bf16* tile, int r0, const RopeNormGrad::Side& x,
                                               const RopeNormGrad& rn, int64_t b, int64_t row0,
                                               int64_t T, int heads, int head) {
  constexpr int kPer = (HD / 2 + 31) / 32;
  for (int r = r0; r < r0 + 16; ++r) {
    const int64_t t = row0 + r;
    if (t >= T) break;  // the same for every lane
    const int64_t item = (b * T + t) * heads + head;
    detail::rope_rmsnorm_backward_row<kPer>(
        x.x + item * HD, x.rstd[item], rn.table + (t + rn.pos_offset) * (HD / 2), HD / 2, rn.scale,
        [&](int64_t j) { return detail::to_f32(tile[L::at(r, int(j))]); },
        [&](int64_t j, float v) { tile[L::at(r, int(j))] = detail::from_f32<bf16>(v); });
  }
}

// Fragments, from a shared tile (see kernels/mma.cuh for the lane -> row address patterns).
// A operand, rows [r0, r0 + 16) x cols [k0, k0 + 16) of a tile stored [m][k].
template <int HD, class L = Tile<HD>>
__device__ __forceinline__ FragA frag_a(const bf16* tile, int r0, int k0) {
  const int l = threadIdx.x & 31;
  FragA a;
  tc::ldsm_x4(a.r, tile + L::at(r0 + (l & 15), k0 + (l >> 4) * 8));
  return a;
}
// B operands of two n-tiles [n0, n0 + 8), [n0 + 8, n0 + 16) for k in [k0, k0 + 16), from a tile
// stored [n][k] (B = tile^T: K in S = Q K^T).
template <int HD, class L = Tile<HD>>
__device__ __forceinline__ void frag_b_nk(FragB& b0, FragB& b1, const bf16* tile, int n0, int k0) {
  const int l = threadIdx.x & 31;
  uint32_t x[4];
  tc::ldsm_x4(x, tile + L::at(n0 + (l & 7) + (l >> 4) * 8, k0 + ((l >> 3) & 1) * 8));
  b0 = FragB{{x[0], x[1]}};
  b1 = FragB{{x[2], x[3]}};
}
// The same from a tile stored [k][n] (B = tile: V in O = P V), through ldmatrix .trans.
template <int HD, class L = Tile<HD>>
__device__ __forceinline__ void frag_b_kn(FragB& b0, FragB& b1, const bf16* tile, int k0, int n0) {
  const int l = threadIdx.x & 31;
  uint32_t x[4];
  tc::ldsm_x4_trans(x, tile + L::at(k0 + (l & 7) + ((l >> 3) & 1) * 8, n0 + (l >> 4) * 8));
  b0 = FragB{{x[0], x[1]}};
  b1 = FragB{{x[2], x[3]}};
}

// Writes a warp's 16 x HD accumulator rows [r0, r0 + 16), times mul[0] (rows g) and mul[1]
// (rows g + 8), into a shared tile as bf16.
template <int HD, class L = Tile<HD>>
__device__ __forceinline__ void stage_rows(bf16* tile, const FragC (&acc)[HD / 8], int r0,
                                           const float (&mul)[2]) {
  const int l = threadIdx.x & 31, g = l >> 2, c = l & 3;
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) {
    const int col = nt * 8 + 2 * c;
    *reinterpret_cast<uint32_t*>(tile + L::at(r0 + g, col)) =
        tc::pack_bf16(acc[nt].x[0] * mul[0], acc[nt].x[1] * mul[0]);
    *reinterpret_cast<uint32_t*>(tile + L::at(r0 + g + 8, col)) =
        tc::pack_bf16(acc[nt].x[2] * mul[1], acc[nt].x[3] * mul[1]);
  }
}

__device__ __forceinline__ int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

__device__ __forceinline__ bool visible(int64_t t, int64_t s, int64_t W) {
  return s <= t && t - s < W;
}

// Maxima propagate NaN (detail::nan_max), so a non-finite score reaches out and lse.
__device__ __forceinline__ float quad_max(float x) {
  x = detail::nan_max(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return detail::nan_max(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_max_nan(float x) {  // the same with tc::max_nan
  x = tc::max_nan(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return tc::max_nan(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// The output of one element of a query row: O / l. Per-head terms of other attention shapes
// (e.g. alpha v_t + beta softmax(.)v - gamma mean(v)) are added here: the epilogue runs once per
// output tile with the row (t), the column, 1/l and the row's final log2-unit max at hand.
struct FwdEpilogue {
  __device__ __forceinline__ static float row_scale(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }
};

// Dynamic shared memory as 16-byte aligned bf16 (cp.async and ldmatrix need the alignment).
#define VT_ATTN_SMEM(name)                     \
  VT_DYNAMIC_SHARED(uint4, name##_raw);        \
  bf16* const name = reinterpret_cast<bf16*>(name##_raw)

// ---------------------------------------------------------------------------------------------
// Forward. Block = 128 queries of one head, four warps, each owning 32 query rows as two 16-row
// m-tiles, so every K and V fragment read from shared memory feeds two MMAs per n-tile (twice the
// v1 kernel's reuse: 0.375 ldmatrix.x4 per MMA where v1 issues 0.5). Q is read from shared
// memory at each k-step (its fragments would not fit in registers beside the 32 x HD accumulator).
// Shared, in PaddedTile rows: Q (128) | K (2 x 64) | V (2 x 64). Key tiles of 64 move with
// cp.async, double-buffered: tile j + 1 loads while tile j is multiplied, and one barrier per tile
// orders both (the loads into a buffer are issued after the barrier that follows its last reads).
// Each tile is multiplied as two sub-tiles of 32 keys (S = Q K^T, softmax, O += P V each): the
// 32 x 64 scores of a whole tile beside the 32 x 128 accumulator need more than 255 registers
// (ptxas spilled), 32 x 32 leave 253 in use at HD 128.
//
// The running max m is kept in raw score units; a probability is exp2(s * scale log2e - m scale
// log2e): one FMA and one ex2.approx (tc::exp2_approx); maxima are max.NaN (tc::max_nan). Only
// sub-tiles that cross the diagonal or the window's edge take the masked instance of the body; a
// warp skips a sub-tile none of its 32 rows can see (e.g. the keys above its rows on the diagonal).
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attn_tc_fwd_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                       const bf16* __restrict__ v, bf16* __restrict__ out,
                       float* __restrict__ lse, int64_t T, int H, int Hkv, int64_t W,
                       float scale_log2) {
  constexpr int kN = HD / 8;         // n-tiles of O
  constexpr int kK = HD / 16;        // k-steps of S = Q K^T
  constexpr int kS = kFwdSub / 8;    // n-tiles of S (one sub-tile)
  constexpr int kM = kFwdWarpRows / 16;  // m-tiles per warp
  using L = PaddedTile<HD>;
  constexpr int kKeyTile = kFwdKeys * L::kStride;  // elements of one K or V buffer
  VT_ATTN_SMEM(smem);
  bf16* const Qs = smem;
  bf16* const Ks = Qs + kFwdRows * L::kStride;
  bf16* const Vs = Ks + 2 * kKeyTile;

  // 32-bit rows and keys (T < 2^30, check_args).
  const int Ti = int(T), Wi = int(W);
  const int t0 = int(gridDim.x - 1 - blockIdx.x) * kFwdRows;  // heaviest tiles first
  const int h = blockIdx.y, kvh = h / (H / Hkv);
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int t_last = min(t0 + kFwdRows, Ti) - 1;
  const int j_begin = max(0, t0 - Wi + 1) / kFwdKeys, j_end = t_last / kFwdKeys;
  const int wr0 = warp * kFwdWarpRows;  // the warp's first row in the block
  const int w_first = t0 + wr0, w_last = w_first + kFwdWarpRows - 1;
  // This lane's rows: m-tile mt, half rr -> t0 + wr0 + 16 mt + 8 rr + g.
  auto row_of = [&](int mt, int rr) { return w_first + 16 * mt + 8 * rr + g; };
  // Row 0 of this (batch, head) in q and out, and of its KV head in k and v.
  const int64_t q_off = (b * T * H + h) * HD, kv_off = (b * T * Hkv + kvh) * HD;
  const bf16* const kb = k + kv_off;
  const bf16* const vb = v + kv_off;

  load_tile_async<HD, kFwdRows, L>(Qs, q + q_off, H * HD, t0, Ti);
  load_tile_async<HD, kFwdKeys, L>(Ks, kb, Hkv * HD, j_begin * kFwdKeys, Ti);
  load_tile_async<HD, kFwdKeys, L>(Vs, vb, Hkv * HD, j_begin * kFwdKeys, Ti);
  tc::cp_async_commit();

  FragC o[kM][kN];
#pragma unroll
  for (int mt = 0; mt < kM; ++mt)
#pragma unroll
    for (int nt = 0; nt < kN; ++nt) o[mt][nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
  float m[kM][2], l[kM][2];  // running max (raw units) and the lane's partial row sum
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.0f;

  // One key tile: S = Q K^T, (masked,) online softmax, O += P V. kMasked is a compile-time
  // constant, so the unmasked instance carries no mask code.
  auto tile = [&](const bf16* Kt, const bf16* Vt, int s0, auto masked_c) {
    constexpr bool kMasked = decltype(masked_c)::value;
    FragC s[kM][kS];
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int nt = 0; nt < kS; ++nt) s[mt][nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      FragA qa[kM];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) qa[mt] = frag_a<HD, L>(Qs, wr0 + 16 * mt, kk * 16);
#pragma unroll
      for (int np = 0; np < kS / 2; ++np) {
        FragB b0, b1;
        frag_b_nk<HD, L>(b0, b1, Kt, np * 16, kk * 16);
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          tc::mma_bf16(s[mt][2 * np], qa[mt], b0);
          tc::mma_bf16(s[mt][2 * np + 1], qa[mt], b1);
        }
      }
    }
    if constexpr (kMasked) {
      const int d0 = w_first - s0 + g - 2 * c;  // query row minus key, lane's first pair
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
#pragma unroll
        for (int nt = 0; nt < kS; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const int d = d0 + 16 * mt + 8 * (i >> 1) - nt * 8 - (i & 1);
            if (d < 0 || d >= Wi) s[mt][nt].x[i] = -INFINITY;
          }
    }
    // Online softmax, rows g (x[0], x[1]) and g + 8 (x[2], x[3]) of each m-tile. alpha rescales
    // a row's earlier sums; it is exactly 1 when the row's max did not move, and the warp skips
    // the 32 x HD rescale of O when that holds for all its rows (most tiles after the first few).
    float alpha[kM][2];
    bool moved = false;
#pragma unroll
    for (int mt = 0; mt < kM; ++mt)
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        float mx = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < kS; ++nt)
          mx = tc::max_nan(mx, tc::max_nan(s[mt][nt].x[2 * rr], s[mt][nt].x[2 * rr + 1]));
        mx = quad_max_nan(mx);
        const float m_old = m[mt][rr], m_new = tc::max_nan(m_old, mx);
        // m_new * scale log2e, 0 for a row with nothing visible yet (its p are then all 0, and
        // so are its l and O: alpha 1 keeps them so).
        const float m_scaled = m_new == -INFINITY ? 0.0f : m_new * scale_log2;
        const float a = m_new == -INFINITY ? 1.0f : tc::exp2_approx((m_old - m_new) * scale_log2);
        alpha[mt][rr] = a;
        moved |= a != 1.0f;  // NaN too
        m[mt][rr] = m_new;
        float sum = 0.0f;
#pragma unroll
        for (int nt = 0; nt < kS; ++nt) {
          const float p0 = tc::exp2_approx(fmaf(s[mt][nt].x[2 * rr], scale_log2, -m_scaled));
          const float p1 = tc::exp2_approx(fmaf(s[mt][nt].x[2 * rr + 1], scale_log2, -m_scaled));
          s[mt][nt].x[2 * rr] = p0;
          s[mt][nt].x[2 * rr + 1] = p1;
          sum += p0 + p1;
        }
        l[mt][rr] = l[mt][rr] * a + sum;
      }
    if (__any_sync(0xffffffffu, moved)) {
#pragma unroll
      for (int mt = 0; mt < kM; ++mt)
#pragma unroll
        for (int nt = 0; nt < kN; ++nt) {
          o[mt][nt].x[0] *= alpha[mt][0];
          o[mt][nt].x[1] *= alpha[mt][0];
          o[mt][nt].x[2] *= alpha[mt][1];
          o[mt][nt].x[3] *= alpha[mt][1];
        }
    }
    // O += P V: P's score registers are the A operand of 16-key steps.
#pragma unroll
    for (int kk = 0; kk < kFwdSub / 16; ++kk) {
      FragA pa[kM];
#pragma unroll
      for (int mt = 0; mt < kM; ++mt) pa[mt] = tc::a_from_c(s[mt][2 * kk], s[mt][2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        FragB b0, b1;
        frag_b_kn<HD, L>(b0, b1, Vt, kk * 16, np * 16);
#pragma unroll
        for (int mt = 0; mt < kM; ++mt) {
          tc::mma_bf16(o[mt][2 * np], pa[mt], b0);
          tc::mma_bf16(o[mt][2 * np + 1], pa[mt], b1);
        }
      }
    }
  };

#pragma unroll 1
  for (int j = j_begin; j <= j_end; ++j) {
    const int buf = (j - j_begin) & 1;
    // Tile j has landed (this thread's copies; the barrier makes everyone's visible), and every
    // warp is done with tile j - 1, whose buffer tile j + 1 now fills.
    tc::cp_async_wait<0>();
    __syncthreads();
    if (j < j_end) {
      load_tile_async<HD, kFwdKeys, L>(Ks + (buf ^ 1) * kKeyTile, kb, Hkv * HD, (j + 1) * kFwdKeys,
                                       Ti);
      load_tile_async<HD, kFwdKeys, L>(Vs + (buf ^ 1) * kKeyTile, vb, Hkv * HD, (j + 1) * kFwdKeys,
                                       Ti);
      tc::cp_async_commit();
    }
    // The tile in sub-tiles of kFwdSub keys, each multiplied, masked and softmaxed on its own.
#pragma unroll
    for (int sub = 0; sub < kFwdKeys / kFwdSub; ++sub) {
      const int s0 = j * kFwdKeys + sub * kFwdSub, s_last = s0 + kFwdSub - 1;
      // Skip a sub-tile no row of this warp sees: all keys after its last row, or all of them at
      // least W before its first.
      if (s0 > w_last || w_first - s_last >= Wi) continue;
      const bf16* Kt = Ks + buf * kKeyTile + sub * kFwdSub * L::kStride;
      const bf16* Vt = Vs + buf * kKeyTile + sub * kFwdSub * L::kStride;
      if (s_last > w_first || w_last - s0 >= Wi)
        tile(Kt, Vt, s0, std::integral_constant<bool, true>{});
      else
        tile(Kt, Vt, s0, std::integral_constant<bool, false>{});
    }
  }

  // Epilogue: row sums over the quad, out = O / l through the Q tile (each warp only ever read
  // its own 32 rows of it, and the last barrier is behind every load), lse in natural log.
#pragma unroll
  for (int mt = 0; mt < kM; ++mt) {
    float inv[2], l_row[2];
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      l_row[rr] = quad_sum(l[mt][rr]);
      inv[rr] = FwdEpilogue::row_scale(l_row[rr]);
    }
    stage_rows<HD, L>(Qs, o[mt], wr0 + 16 * mt, inv);
    if (c == 0) {
#pragma unroll
      for (int rr = 0; rr < 2; ++rr) {
        const int t = row_of(mt, rr);
        if (t < Ti) lse[(b * H + h) * T + t] = (m[mt][rr] * scale_log2 + log2f(l_row[rr])) * kLn2;
      }
    }
  }
  __syncthreads();
  store_rows<HD, kFwdRows, L>(out, Qs, b, t0, T, H, h);
}

// ---------------------------------------------------------------------------------------------
// Forward v1 (the 2026-11-26 window's kernel, 176 TFLOP/s at d24 on an H200), kept only so that
// attention_bench measures it beside the forward above in the same call (attention_tc_forward_v1).
// Block = 64 queries, four warps of 16 rows each, Q's fragments in registers, two barriers per key
// tile. Shared: Q (64 x HD) | K (2 x 64 x HD) | V (2 x 64 x HD).
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attn_tc_fwd_v1_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                       const bf16* __restrict__ v, bf16* __restrict__ out,
                       float* __restrict__ lse, int64_t T, int H, int Hkv, int64_t W,
                       float scale_log2) {
  constexpr int kN = HD / 8;         // n-tiles of O
  constexpr int kK = HD / 16;        // k-steps of S = Q K^T
  constexpr int kS = kV1Keys / 8;   // n-tiles of S
  VT_ATTN_SMEM(smem);
  bf16* const Qs = smem;
  bf16* const Ks = Qs + kV1Rows * HD;
  bf16* const Vs = Ks + 2 * kV1Keys * HD;

  const int64_t t0 = int64_t(gridDim.x - 1 - blockIdx.x) * kV1Rows;  // heaviest tiles first
  const int h = blockIdx.y, kvh = h / (H / Hkv);
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int64_t t_last = min64(t0 + kV1Rows, T) - 1;
  const int64_t j_begin = max64(0, t0 - W + 1) / kV1Keys, j_end = t_last / kV1Keys;
  const int64_t row0 = t0 + warp * 16 + g, row1 = row0 + 8;  // this lane's two query rows

  load_rows_async<HD, kV1Rows>(Qs, q, b, t0, T, H, h);
  load_rows_async<HD, kV1Keys>(Ks, k, b, j_begin * kV1Keys, T, Hkv, kvh);
  load_rows_async<HD, kV1Keys>(Vs, v, b, j_begin * kV1Keys, T, Hkv, kvh);
  tc::cp_async_commit();

  FragA qf[kK];
  FragC o[kN];
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) o[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  for (int64_t j = j_begin; j <= j_end; ++j) {
    const int buf = int(j - j_begin) & 1;
    const bf16* Kt = Ks + buf * kV1Keys * HD;
    const bf16* Vt = Vs + buf * kV1Keys * HD;
    if (j < j_end) {  // next tile into the other buffer (free since the last iteration's barrier)
      load_rows_async<HD, kV1Keys>(Ks + (buf ^ 1) * kV1Keys * HD, k, b, (j + 1) * kV1Keys, T,
                                    Hkv, kvh);
      load_rows_async<HD, kV1Keys>(Vs + (buf ^ 1) * kV1Keys * HD, v, b, (j + 1) * kV1Keys, T,
                                    Hkv, kvh);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    if (j == j_begin) {
#pragma unroll
      for (int kk = 0; kk < kK; ++kk) qf[kk] = frag_a<HD>(Qs, warp * 16, kk * 16);
    }

    // S = Q K^T, 16 x 64 per warp.
    FragC s[kS];
#pragma unroll
    for (int nt = 0; nt < kS; ++nt) s[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kK; ++kk)
#pragma unroll
      for (int np = 0; np < kS / 2; ++np) {
        FragB b0, b1;
        frag_b_nk<HD>(b0, b1, Kt, np * 16, kk * 16);
        tc::mma_bf16(s[2 * np], qf[kk], b0);
        tc::mma_bf16(s[2 * np + 1], qf[kk], b1);
      }

    // Scale to log2 units; mask only a tile that crosses the diagonal or the window's edge.
    const int64_t s0 = j * kV1Keys;
    const bool masked = s0 + kV1Keys - 1 > t0 || t0 + kV1Rows - 1 - s0 >= W;
#pragma unroll
    for (int nt = 0; nt < kS; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        float x = s[nt].x[i] * scale_log2;
        if (masked && !visible(i < 2 ? row0 : row1, s0 + nt * 8 + 2 * c + (i & 1), W))
          x = -INFINITY;
        s[nt].x[i] = x;
      }

    // Online softmax, rows g (x[0], x[1]) and g + 8 (x[2], x[3]).
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kS; ++nt)
        mx = detail::nan_max(mx, detail::nan_max(s[nt].x[2 * rr], s[nt].x[2 * rr + 1]));
      mx = quad_max(mx);
      const float m_new = detail::nan_max(m[rr], mx);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing visible yet
      const float alpha = exp2f(m[rr] - m_use);                // 0 while m was -inf
      m[rr] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kS; ++nt) {
        const float p0 = exp2f(s[nt].x[2 * rr] - m_use), p1 = exp2f(s[nt].x[2 * rr + 1] - m_use);
        s[nt].x[2 * rr] = p0;
        s[nt].x[2 * rr + 1] = p1;
        sum += p0 + p1;
      }
      l[rr] = l[rr] * alpha + sum;
#pragma unroll
      for (int nt = 0; nt < kN; ++nt) {
        o[nt].x[2 * rr] *= alpha;
        o[nt].x[2 * rr + 1] *= alpha;
      }
    }

    // O += P V: P's score registers are the A operand of 16-key steps.
#pragma unroll
    for (int kk = 0; kk < kV1Keys / 16; ++kk) {
      const FragA pa = tc::a_from_c(s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        FragB b0, b1;
        frag_b_kn<HD>(b0, b1, Vt, kk * 16, np * 16);
        tc::mma_bf16(o[2 * np], pa, b0);
        tc::mma_bf16(o[2 * np + 1], pa, b1);
      }
    }
    __syncthreads();  // every warp is done with this buffer before it is refilled
  }

  // Epilogue: row sums over the quad, out = O / l through the Q tile (each warp only ever read
  // its own 16 rows of it), lse in natural log.
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] = quad_sum(l[rr]);
    inv[rr] = FwdEpilogue::row_scale(l[rr]);
  }
  stage_rows<HD>(Qs, o, warp * 16, inv);
  if (c == 0) {
    if (row0 < T) lse[(b * H + h) * T + row0] = (m[0] + log2f(l[0])) * kLn2;
    if (row1 < T) lse[(b * H + h) * T + row1] = (m[1] + log2f(l[1])) * kLn2;
  }
  __syncthreads();
  store_rows<HD, kV1Rows>(out, Qs, b, t0, T, H, h);
}

// ---------------------------------------------------------------------------------------------
// D[b,h,t] = sum_c dO[b,t,h,c] * O[b,t,h,c] for the dQ block's ROWS rows (issue 29: computed
// by the dQ kernel from its staged dO tile instead of by a kernel of its own that read dO again):
// HD/8 consecutive threads per row, 8 elements (16 bytes of O) each, fma in element order, then
// a shuffle sum over the row's threads. Written to D_s (0 past T) and to D (B,H,T), which the
// dK/dV kernel, launched after, reads.
template <int HD, int ROWS, class L = Tile<HD>>
__device__ __forceinline__ void rows_d(float* D_s, float* __restrict__ D, const bf16* dOs,
                                       const bf16* __restrict__ out, int64_t b, int64_t row0,
                                       int64_t T, int H, int h) {
  constexpr int kPer = HD / 8;  // threads per row (a power of 2 dividing 32)
  static_assert((ROWS * kPer) % kThreads == 0, "every thread takes part in every shuffle");
  for (int i = threadIdx.x; i < ROWS * kPer; i += kThreads) {
    const int r = i / kPer, part = i % kPer;
    const int64_t t = row0 + r;
    float acc = 0.0f;
    if (t < T) {
      const uint4 ov = *reinterpret_cast<const uint4*>(out + ((b * T + t) * H + h) * HD + part * 8);
      const uint4 dv =
          *reinterpret_cast<const uint4*>(dOs + L::chunk_at(r, part));
      bf16 o8[8], d8[8];
      __builtin_memcpy(static_cast<void*>(o8), &ov, sizeof(ov));
      __builtin_memcpy(static_cast<void*>(d8), &dv, sizeof(dv));
#pragma unroll
      for (int e = 0; e < 8; ++e)
        acc = fmaf(__bfloat162float(o8[e]), __bfloat162float(d8[e]), acc);
    }
#pragma unroll
    for (int off = kPer / 2; off > 0; off >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, off);
    if (part == 0) {
      D_s[r] = acc;
      if (t < T) D[(b * H + h) * T + t] = acc;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// dQ. Block = 64 queries of one head, four warps of 16 rows. Shared, in PaddedTile rows: Q, dO
// (64) | K, V (2 x 64) | lse, D (64 fp32). Key tiles double-buffered with one barrier per tile
// and masked only where they cross the diagonal or the window's edge, as in the forward.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attn_tc_dq_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                      const bf16* __restrict__ v, const bf16* __restrict__ out,
                      const bf16* __restrict__ dout, const float* __restrict__ lse,
                      float* __restrict__ D,
                      bf16* __restrict__ dq, int64_t T, int H, int Hkv, int64_t W, float scale,
                      float scale_log2, RopeNormGrad rn) {
  constexpr int kN = HD / 8, kK = HD / 16, kS = kDqKeys / 8;
  using L = PaddedTile<HD>;
  constexpr int kKeyTile = kDqKeys * L::kStride;  // elements of one K or V buffer
  VT_ATTN_SMEM(smem);
  bf16* const Qs = smem;
  bf16* const dOs = Qs + kDqRows * L::kStride;
  bf16* const Ks = dOs + kDqRows * L::kStride;
  bf16* const Vs = Ks + 2 * kKeyTile;
  float* const lse_s = reinterpret_cast<float*>(Vs + 2 * kKeyTile);
  float* const D_s = lse_s + kDqRows;

  // 32-bit rows and keys (T < 2^30, check_args).
  const int Ti = int(T), Wi = int(W);
  const int t0 = int(gridDim.x - 1 - blockIdx.x) * kDqRows;
  const int h = blockIdx.y, kvh = h / (H / Hkv);
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int t_last = min(t0 + kDqRows, Ti) - 1;
  const int j_begin = max(0, t0 - Wi + 1) / kDqKeys, j_end = t_last / kDqKeys;
  const int w_first = t0 + warp * 16, w_last = w_first + 15;
  const int64_t q_off = (b * T * H + h) * HD, kv_off = (b * T * Hkv + kvh) * HD;
  const bf16* const kb = k + kv_off;
  const bf16* const vb = v + kv_off;

  load_tile_async<HD, kDqRows, L>(Qs, q + q_off, H * HD, t0, Ti);
  load_tile_async<HD, kDqRows, L>(dOs, dout + q_off, H * HD, t0, Ti);
  load_stats_async<kDqRows>(lse_s, lse, b, t0, T, H, h);
  tc::cp_async_commit();
  load_tile_async<HD, kDqKeys, L>(Ks, kb, Hkv * HD, j_begin * kDqKeys, Ti);
  load_tile_async<HD, kDqKeys, L>(Vs, vb, Hkv * HD, j_begin * kDqKeys, Ti);
  tc::cp_async_commit();
  // D of this block's rows from the staged dO while the first key tile loads (the loop's first
  // barrier orders D_s before its reads).
  tc::cp_async_wait<1>();
  __syncthreads();
  rows_d<HD, kDqRows, L>(D_s, D, dOs, out, b, t0, T, H, h);

  FragC acc[kN];
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) acc[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
  float lse2[2] = {0.0f, 0.0f}, Dr[2] = {0.0f, 0.0f};

  // One key tile: S = Q K^T and dP = dO V^T, dS = P (dP - D) scale (masked where kMasked), then
  // dQ += dS K.
  auto tile = [&](const bf16* Kt, const bf16* Vt, int s0, auto masked_c) {
    constexpr bool kMasked = decltype(masked_c)::value;
    FragC s[kS], dp[kS];
#pragma unroll
    for (int nt = 0; nt < kS; ++nt) {
      s[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
      dp[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
    }
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      const FragA qa = frag_a<HD, L>(Qs, warp * 16, kk * 16);
      const FragA da = frag_a<HD, L>(dOs, warp * 16, kk * 16);
#pragma unroll
      for (int np = 0; np < kS / 2; ++np) {
        FragB b0, b1;
        frag_b_nk<HD, L>(b0, b1, Kt, np * 16, kk * 16);
        tc::mma_bf16(s[2 * np], qa, b0);
        tc::mma_bf16(s[2 * np + 1], qa, b1);
        frag_b_nk<HD, L>(b0, b1, Vt, np * 16, kk * 16);
        tc::mma_bf16(dp[2 * np], da, b0);
        tc::mma_bf16(dp[2 * np + 1], da, b1);
      }
    }
    const int d0 = w_first - s0 + g - 2 * c;  // query row minus key, the lane's first pair
#pragma unroll
    for (int nt = 0; nt < kS; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int rr = i >> 1;
        float p = tc::exp2_approx(fmaf(s[nt].x[i], scale_log2, -lse2[rr]));
        if constexpr (kMasked) {
          const int d = d0 + 8 * rr - nt * 8 - (i & 1);
          if (d < 0 || d >= Wi) p = 0.0f;
        }
        s[nt].x[i] = p * (dp[nt].x[i] - Dr[rr]) * scale;
      }
#pragma unroll
    for (int kk = 0; kk < kDqKeys / 16; ++kk) {
      const FragA sa = tc::a_from_c(s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        FragB b0, b1;
        frag_b_kn<HD, L>(b0, b1, Kt, kk * 16, np * 16);
        tc::mma_bf16(acc[2 * np], sa, b0);
        tc::mma_bf16(acc[2 * np + 1], sa, b1);
      }
    }
  };

#pragma unroll 1
  for (int j = j_begin; j <= j_end; ++j) {
    const int buf = (j - j_begin) & 1;
    // Tile j has landed and every warp is done with tile j - 1, whose buffer tile j + 1 fills.
    tc::cp_async_wait<0>();
    __syncthreads();
    if (j < j_end) {
      load_tile_async<HD, kDqKeys, L>(Ks + (buf ^ 1) * kKeyTile, kb, Hkv * HD, (j + 1) * kDqKeys,
                                      Ti);
      load_tile_async<HD, kDqKeys, L>(Vs + (buf ^ 1) * kKeyTile, vb, Hkv * HD, (j + 1) * kDqKeys,
                                      Ti);
      tc::cp_async_commit();
    }
    if (j == j_begin) {
      lse2[0] = lse_s[warp * 16 + g] * kLog2e;
      lse2[1] = lse_s[warp * 16 + g + 8] * kLog2e;
      Dr[0] = D_s[warp * 16 + g];
      Dr[1] = D_s[warp * 16 + g + 8];
    }
    const int s0 = j * kDqKeys, s_last = s0 + kDqKeys - 1;
    if (s0 > w_last || w_first - s_last >= Wi) continue;  // no row of this warp sees the tile
    const bf16* Kt = Ks + buf * kKeyTile;
    const bf16* Vt = Vs + buf * kKeyTile;
    if (s_last > w_first || w_last - s0 >= Wi)
      tile(Kt, Vt, s0, std::integral_constant<bool, true>{});
    else
      tile(Kt, Vt, s0, std::integral_constant<bool, false>{});
  }

  const float one[2] = {1.0f, 1.0f};
  stage_rows<HD, L>(Qs, acc, warp * 16, one);  // each warp read only its own rows of Q
  if (rn.q.x != nullptr) {
    __syncwarp();
    rope_norm_rows<HD, L>(Qs, warp * 16, rn.q, rn, b, t0, T, H, h);
  }
  __syncthreads();
  store_rows<HD, kDqRows, L>(dq, Qs, b, t0, T, H, h);
}

// ---------------------------------------------------------------------------------------------
// dK, dV. Block = 64 keys of one KV head, four warps of 16 keys; steps over (query head of the
// group, 32-query tile) pairs. Shared, in PaddedTile rows: K, V (64) | Q, dO (2 x 32) | lse, D
// (2 x 32 fp32). The step's tiles are double-buffered with one barrier per step; a step is
// masked only where it crosses the diagonal or the window's edge for the warp's keys, and a warp
// skips a step none of its keys is seen in.
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attn_tc_dkdv_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                        const bf16* __restrict__ v, const bf16* __restrict__ dout,
                        const float* __restrict__ lse, const float* __restrict__ D,
                        bf16* __restrict__ dk, bf16* __restrict__ dv, int64_t T, int H, int Hkv,
                        int64_t W, float scale, float scale_log2, RopeNormGrad rn) {
  constexpr int kN = HD / 8, kK = HD / 16, kS = kKvRows / 8;
  using L = PaddedTile<HD>;
  constexpr int kRowTile = kKvRows * L::kStride;  // elements of one Q or dO buffer
  VT_ATTN_SMEM(smem);
  bf16* const Ks = smem;
  bf16* const Vs = Ks + kKvKeys * L::kStride;
  bf16* const Qs = Vs + kKvKeys * L::kStride;
  bf16* const dOs = Qs + 2 * kRowTile;
  float* const lse_s = reinterpret_cast<float*>(dOs + 2 * kRowTile);
  float* const D_s = lse_s + 2 * kKvRows;

  // 32-bit rows and keys (T < 2^30, check_args).
  const int Ti = int(T), Wi = int(W);
  const int s0 = int(blockIdx.x) * kKvKeys;  // early key tiles (most queries) first
  const int kvh = blockIdx.y, group = H / Hkv;
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int s_last = min(s0 + kKvKeys, Ti) - 1;
  const int t_end = min(Ti, s_last + Wi);  // queries [s0, t_end) see a key here
  const int i_begin = s0 / kKvRows, n_i = (t_end - 1) / kKvRows - i_begin + 1;
  const int steps = n_i * group;  // (head, query tile) pairs, head-major
  const int k_first = s0 + warp * 16, k_last = k_first + 15;  // this warp's keys
  const int64_t kv_off = (b * T * Hkv + kvh) * HD;

  auto load_step = [&](int u, int buf) {
    const int h = kvh * group + u / n_i;
    const int t = (i_begin + u % n_i) * kKvRows;
    const int64_t q_off = (b * T * H + h) * HD;
    load_tile_async<HD, kKvRows, L>(Qs + buf * kRowTile, q + q_off, H * HD, t, Ti);
    load_tile_async<HD, kKvRows, L>(dOs + buf * kRowTile, dout + q_off, H * HD, t, Ti);
    load_stats_async<kKvRows>(lse_s + buf * kKvRows, lse, b, t, T, H, h);
    load_stats_async<kKvRows>(D_s + buf * kKvRows, D, b, t, T, H, h);
  };
  load_tile_async<HD, kKvKeys, L>(Ks, k + kv_off, Hkv * HD, s0, Ti);
  load_tile_async<HD, kKvKeys, L>(Vs, v + kv_off, Hkv * HD, s0, Ti);
  load_step(0, 0);
  tc::cp_async_commit();

  FragC dk_acc[kN], dv_acc[kN];
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) {
    dk_acc[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
    dv_acc[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
  }

  // One step: S^T = K Q^T (16 keys x 32 queries per warp) -> P^T (masked where kMasked);
  // dV += P^T dO; dP^T = V dO^T -> dS^T = P^T (dP^T - D) scale; dK += dS^T Q.
  auto step = [&](const bf16* Qt, const bf16* dOt, const float* lse_t, const float* D_t, int t0,
                  auto masked_c) {
    constexpr bool kMasked = decltype(masked_c)::value;
    FragC p[kS];
#pragma unroll
    for (int nt = 0; nt < kS; ++nt) p[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      const FragA ka = frag_a<HD, L>(Ks, warp * 16, kk * 16);
#pragma unroll
      for (int np = 0; np < kS / 2; ++np) {
        FragB b0, b1;
        frag_b_nk<HD, L>(b0, b1, Qt, np * 16, kk * 16);
        tc::mma_bf16(p[2 * np], ka, b0);
        tc::mma_bf16(p[2 * np + 1], ka, b1);
      }
    }
    const int d0 = t0 - k_first + 2 * c - g;  // query minus key, the lane's first pair
#pragma unroll
    for (int nt = 0; nt < kS; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = nt * 8 + 2 * c + (i & 1);  // query t0 + col
        float x = tc::exp2_approx(fmaf(p[nt].x[i], scale_log2, -lse_t[col] * kLog2e));
        if constexpr (kMasked) {
          const int d = d0 + nt * 8 + (i & 1) - 8 * (i >> 1);
          if (d < 0 || d >= Wi) x = 0.0f;
        }
        p[nt].x[i] = x;
      }

#pragma unroll
    for (int kk = 0; kk < kKvRows / 16; ++kk) {
      const FragA pa = tc::a_from_c(p[2 * kk], p[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        FragB b0, b1;
        frag_b_kn<HD, L>(b0, b1, dOt, kk * 16, np * 16);
        tc::mma_bf16(dv_acc[2 * np], pa, b0);
        tc::mma_bf16(dv_acc[2 * np + 1], pa, b1);
      }
    }

    FragC dp[kS];
#pragma unroll
    for (int nt = 0; nt < kS; ++nt) dp[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      const FragA va = frag_a<HD, L>(Vs, warp * 16, kk * 16);
#pragma unroll
      for (int np = 0; np < kS / 2; ++np) {
        FragB b0, b1;
        frag_b_nk<HD, L>(b0, b1, dOt, np * 16, kk * 16);
        tc::mma_bf16(dp[2 * np], va, b0);
        tc::mma_bf16(dp[2 * np + 1], va, b1);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kS; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = nt * 8 + 2 * c + (i & 1);
        p[nt].x[i] = p[nt].x[i] * (dp[nt].x[i] - D_t[col]) * scale;
      }

#pragma unroll
    for (int kk = 0; kk < kKvRows / 16; ++kk) {
      const FragA sa = tc::a_from_c(p[2 * kk], p[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        FragB b0, b1;
        frag_b_kn<HD, L>(b0, b1, Qt, kk * 16, np * 16);
        tc::mma_bf16(dk_acc[2 * np], sa, b0);
        tc::mma_bf16(dk_acc[2 * np + 1], sa, b1);
      }
    }
  };

#pragma unroll 1
  for (int u = 0; u < steps; ++u) {
    const int buf = u & 1;
    // Step u's tiles have landed and every warp is done with step u - 1, whose buffers step
    // u + 1 now fills.
    tc::cp_async_wait<0>();
    __syncthreads();
    if (u + 1 < steps) {
      load_step(u + 1, buf ^ 1);
      tc::cp_async_commit();
    }
    const int t0 = (i_begin + u % n_i) * kKvRows, t_last = t0 + kKvRows - 1;
    // Skip a step no key of this warp is seen in: every query before its first key, or at least
    // W after its last.
    if (t_last < k_first || t0 - k_last >= Wi) continue;
    const bf16* Qt = Qs + buf * kRowTile;
    const bf16* dOt = dOs + buf * kRowTile;
    const float* lse_t = lse_s + buf * kKvRows;
    const float* D_t = D_s + buf * kKvRows;
    if (t0 < k_last || t_last - k_first >= Wi)
      step(Qt, dOt, lse_t, D_t, t0, std::integral_constant<bool, true>{});
    else
      step(Qt, dOt, lse_t, D_t, t0, std::integral_constant<bool, false>{});
  }

  // Each warp read only its own 16 rows of K and V: stage dK, dV there.
  const float one[2] = {1.0f, 1.0f};
  stage_rows<HD, L>(Ks, dk_acc, warp * 16, one);
  stage_rows<HD, L>(Vs, dv_acc, warp * 16, one);
  if (rn.k.x != nullptr) {
    __syncwarp();
    rope_norm_rows<HD, L>(Ks, warp * 16, rn.k, rn, b, s0, T, Hkv, kvh);
  }
  __syncthreads();
  store_rows<HD, kKvKeys, L>(dk, Ks, b, s0, T, Hkv, kvh);
  store_rows<HD, kKvKeys, L>(dv, Vs, b, s0, T, Hkv, kvh);
}

// ---------------------------------------------------------------------------------------------
// Backward v1: the 2026-11-26 window's dQ and dK/dV kernels (152 TFLOP/s at d24 on an H200),
// kept only so that attention_bench measures them beside the kernels above in the same call
// (attention_tc_backward_v1). XOR-swizzled Tile rows, two barriers per tile, the mask decided at
// run time per tile and element.
// dQ v1. Shared: Q, dO (64 x HD) | K, V (2 x 64 x HD) | lse, D (64 fp32).
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attn_tc_dq_v1_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                      const bf16* __restrict__ v, const bf16* __restrict__ out,
                      const bf16* __restrict__ dout, const float* __restrict__ lse,
                      float* __restrict__ D,
                      bf16* __restrict__ dq, int64_t T, int H, int Hkv, int64_t W, float scale,
                      float scale_log2, RopeNormGrad rn) {
  constexpr int kN = HD / 8, kK = HD / 16, kS = kV1Keys / 8;
  VT_ATTN_SMEM(smem);
  bf16* const Qs = smem;
  bf16* const dOs = Qs + kV1Rows * HD;
  bf16* const Ks = dOs + kV1Rows * HD;
  bf16* const Vs = Ks + 2 * kV1Keys * HD;
  float* const lse_s = reinterpret_cast<float*>(Vs + 2 * kV1Keys * HD);
  float* const D_s = lse_s + kV1Rows;

  const int64_t t0 = int64_t(gridDim.x - 1 - blockIdx.x) * kV1Rows;
  const int h = blockIdx.y, kvh = h / (H / Hkv);
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int64_t t_last = min64(t0 + kV1Rows, T) - 1;
  const int64_t j_begin = max64(0, t0 - W + 1) / kV1Keys, j_end = t_last / kV1Keys;
  const int64_t row0 = t0 + warp * 16 + g, row1 = row0 + 8;

  load_rows_async<HD, kV1Rows>(Qs, q, b, t0, T, H, h);
  load_rows_async<HD, kV1Rows>(dOs, dout, b, t0, T, H, h);
  load_stats_async<kV1Rows>(lse_s, lse, b, t0, T, H, h);
  tc::cp_async_commit();
  load_rows_async<HD, kV1Keys>(Ks, k, b, j_begin * kV1Keys, T, Hkv, kvh);
  load_rows_async<HD, kV1Keys>(Vs, v, b, j_begin * kV1Keys, T, Hkv, kvh);
  tc::cp_async_commit();
  // D of this block's rows from the staged dO while the first key tile loads (the loop's first
  // __syncthreads orders D_s before its reads).
  tc::cp_async_wait<1>();
  __syncthreads();
  rows_d<HD, kV1Rows>(D_s, D, dOs, out, b, t0, T, H, h);

  FragC acc[kN];
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) acc[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
  float lse2[2] = {0.0f, 0.0f}, Dr[2] = {0.0f, 0.0f};

  for (int64_t j = j_begin; j <= j_end; ++j) {
    const int buf = int(j - j_begin) & 1;
    const bf16* Kt = Ks + buf * kV1Keys * HD;
    const bf16* Vt = Vs + buf * kV1Keys * HD;
    if (j < j_end) {
      load_rows_async<HD, kV1Keys>(Ks + (buf ^ 1) * kV1Keys * HD, k, b, (j + 1) * kV1Keys, T,
                                    Hkv, kvh);
      load_rows_async<HD, kV1Keys>(Vs + (buf ^ 1) * kV1Keys * HD, v, b, (j + 1) * kV1Keys, T,
                                    Hkv, kvh);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    if (j == j_begin) {
      lse2[0] = lse_s[warp * 16 + g] * kLog2e;
      lse2[1] = lse_s[warp * 16 + g + 8] * kLog2e;
      Dr[0] = D_s[warp * 16 + g];
      Dr[1] = D_s[warp * 16 + g + 8];
    }

    // S = Q K^T and dP = dO V^T, 16 x 64 per warp.
    FragC s[kS], dp[kS];
#pragma unroll
    for (int nt = 0; nt < kS; ++nt) {
      s[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
      dp[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
    }
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      const FragA qa = frag_a<HD>(Qs, warp * 16, kk * 16);
      const FragA da = frag_a<HD>(dOs, warp * 16, kk * 16);
#pragma unroll
      for (int np = 0; np < kS / 2; ++np) {
        FragB b0, b1;
        frag_b_nk<HD>(b0, b1, Kt, np * 16, kk * 16);
        tc::mma_bf16(s[2 * np], qa, b0);
        tc::mma_bf16(s[2 * np + 1], qa, b1);
        frag_b_nk<HD>(b0, b1, Vt, np * 16, kk * 16);
        tc::mma_bf16(dp[2 * np], da, b0);
        tc::mma_bf16(dp[2 * np + 1], da, b1);
      }
    }

    // dS = P (dP - D) scale, kept in s.
    const int64_t s0 = j * kV1Keys;
    const bool masked = s0 + kV1Keys - 1 > t0 || t0 + kV1Rows - 1 - s0 >= W;
#pragma unroll
    for (int nt = 0; nt < kS; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int rr = i >> 1;
        float p = exp2f(s[nt].x[i] * scale_log2 - lse2[rr]);
        if (masked && !visible(rr ? row1 : row0, s0 + nt * 8 + 2 * c + (i & 1), W)) p = 0.0f;
        s[nt].x[i] = p * (dp[nt].x[i] - Dr[rr]) * scale;
      }

    // dQ += dS K.
#pragma unroll
    for (int kk = 0; kk < kV1Keys / 16; ++kk) {
      const FragA sa = tc::a_from_c(s[2 * kk], s[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        FragB b0, b1;
        frag_b_kn<HD>(b0, b1, Kt, kk * 16, np * 16);
        tc::mma_bf16(acc[2 * np], sa, b0);
        tc::mma_bf16(acc[2 * np + 1], sa, b1);
      }
    }
    __syncthreads();
  }

  const float one[2] = {1.0f, 1.0f};
  stage_rows<HD>(Qs, acc, warp * 16, one);  // each warp read only its own rows of Q
  if (rn.q.x != nullptr) {
    __syncwarp();
    rope_norm_rows<HD>(Qs, warp * 16, rn.q, rn, b, t0, T, H, h);
  }
  __syncthreads();
  store_rows<HD, kV1Rows>(dq, Qs, b, t0, T, H, h);
}

// ---------------------------------------------------------------------------------------------
// dK, dV v1. Shared: K, V (64 x HD) | Q, dO (2 x 32 x HD) | lse, D (2 x 32 fp32).
template <int HD>
__global__ void __launch_bounds__(kThreads)
    attn_tc_dkdv_v1_kernel(const bf16* __restrict__ q, const bf16* __restrict__ k,
                        const bf16* __restrict__ v, const bf16* __restrict__ dout,
                        const float* __restrict__ lse, const float* __restrict__ D,
                        bf16* __restrict__ dk, bf16* __restrict__ dv, int64_t T, int H, int Hkv,
                        int64_t W, float scale, float scale_log2, RopeNormGrad rn) {
  constexpr int kN = HD / 8, kK = HD / 16, kS = kKvRows / 8;
  VT_ATTN_SMEM(smem);
  bf16* const Ks = smem;
  bf16* const Vs = Ks + kKvKeys * HD;
  bf16* const Qs = Vs + kKvKeys * HD;
  bf16* const dOs = Qs + 2 * kKvRows * HD;
  float* const lse_s = reinterpret_cast<float*>(dOs + 2 * kKvRows * HD);
  float* const D_s = lse_s + 2 * kKvRows;

  const int64_t s0 = int64_t(blockIdx.x) * kKvKeys;  // early key tiles (most queries) first
  const int kvh = blockIdx.y, group = H / Hkv;
  const int64_t b = blockIdx.z;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
  const int64_t s_last = min64(s0 + kKvKeys, T) - 1;
  const int64_t t_end = min64(T, s_last + W);  // queries [s0, t_end) see a key here
  const int64_t i_begin = s0 / kKvRows, n_i = (t_end - 1) / kKvRows - i_begin + 1;
  const int64_t steps = n_i * group;  // (head, query tile) pairs, head-major
  const int64_t key0 = s0 + warp * 16 + g, key1 = key0 + 8;  // this lane's two keys

  auto load_step = [&](int64_t u, int buf) {
    const int h = kvh * group + int(u / n_i);
    const int64_t t = (i_begin + u % n_i) * kKvRows;
    load_rows_async<HD, kKvRows>(Qs + buf * kKvRows * HD, q, b, t, T, H, h);
    load_rows_async<HD, kKvRows>(dOs + buf * kKvRows * HD, dout, b, t, T, H, h);
    load_stats_async<kKvRows>(lse_s + buf * kKvRows, lse, b, t, T, H, h);
    load_stats_async<kKvRows>(D_s + buf * kKvRows, D, b, t, T, H, h);
  };
  load_rows_async<HD, kKvKeys>(Ks, k, b, s0, T, Hkv, kvh);
  load_rows_async<HD, kKvKeys>(Vs, v, b, s0, T, Hkv, kvh);
  load_step(0, 0);
  tc::cp_async_commit();

  FragC dk_acc[kN], dv_acc[kN];
#pragma unroll
  for (int nt = 0; nt < kN; ++nt) {
    dk_acc[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
    dv_acc[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
  }

  for (int64_t u = 0; u < steps; ++u) {
    const int buf = int(u & 1);
    const bf16* Qt = Qs + buf * kKvRows * HD;
    const bf16* dOt = dOs + buf * kKvRows * HD;
    const float* lse_t = lse_s + buf * kKvRows;
    const float* D_t = D_s + buf * kKvRows;
    if (u + 1 < steps) {
      load_step(u + 1, buf ^ 1);
      tc::cp_async_commit();
      tc::cp_async_wait<1>();
    } else {
      tc::cp_async_wait<0>();
    }
    __syncthreads();
    const int64_t t0 = (i_begin + u % n_i) * kKvRows;

    // S^T = K Q^T (16 keys x 32 queries per warp) -> P^T.
    FragC p[kS];
#pragma unroll
    for (int nt = 0; nt < kS; ++nt) p[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      const FragA ka = frag_a<HD>(Ks, warp * 16, kk * 16);
#pragma unroll
      for (int np = 0; np < kS / 2; ++np) {
        FragB b0, b1;
        frag_b_nk<HD>(b0, b1, Qt, np * 16, kk * 16);
        tc::mma_bf16(p[2 * np], ka, b0);
        tc::mma_bf16(p[2 * np + 1], ka, b1);
      }
    }
    const bool masked = t0 < s0 + kKvKeys - 1 || t0 + kKvRows - 1 - s0 >= W;
#pragma unroll
    for (int nt = 0; nt < kS; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = nt * 8 + 2 * c + (i & 1);  // query t0 + col
        float x = exp2f(p[nt].x[i] * scale_log2 - lse_t[col] * kLog2e);
        if (masked && !visible(t0 + col, i < 2 ? key0 : key1, W)) x = 0.0f;
        p[nt].x[i] = x;
      }

    // dV += P^T dO.
#pragma unroll
    for (int kk = 0; kk < kKvRows / 16; ++kk) {
      const FragA pa = tc::a_from_c(p[2 * kk], p[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        FragB b0, b1;
        frag_b_kn<HD>(b0, b1, dOt, kk * 16, np * 16);
        tc::mma_bf16(dv_acc[2 * np], pa, b0);
        tc::mma_bf16(dv_acc[2 * np + 1], pa, b1);
      }
    }

    // dP^T = V dO^T -> dS^T = P^T (dP^T - D) scale, in p.
    FragC dp[kS];
#pragma unroll
    for (int nt = 0; nt < kS; ++nt) dp[nt] = FragC{{0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
    for (int kk = 0; kk < kK; ++kk) {
      const FragA va = frag_a<HD>(Vs, warp * 16, kk * 16);
#pragma unroll
      for (int np = 0; np < kS / 2; ++np) {
        FragB b0, b1;
        frag_b_nk<HD>(b0, b1, dOt, np * 16, kk * 16);
        tc::mma_bf16(dp[2 * np], va, b0);
        tc::mma_bf16(dp[2 * np + 1], va, b1);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kS; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int col = nt * 8 + 2 * c + (i & 1);
        p[nt].x[i] = p[nt].x[i] * (dp[nt].x[i] - D_t[col]) * scale;
      }

    // dK += dS^T Q.
#pragma unroll
    for (int kk = 0; kk < kKvRows / 16; ++kk) {
      const FragA sa = tc::a_from_c(p[2 * kk], p[2 * kk + 1]);
#pragma unroll
      for (int np = 0; np < kN / 2; ++np) {
        FragB b0, b1;
        frag_b_kn<HD>(b0, b1, Qt, kk * 16, np * 16);
        tc::mma_bf16(dk_acc[2 * np], sa, b0);
        tc::mma_bf16(dk_acc[2 * np + 1], sa, b1);
      }
    }
    __syncthreads();
  }

  // Each warp read only its own 16 rows of K and V: stage dK, dV there.
  const float one[2] = {1.0f, 1.0f};
  stage_rows<HD>(Ks, dk_acc, warp * 16, one);
  stage_rows<HD>(Vs, dv_acc, warp * 16, one);
  if (rn.k.x != nullptr) {
    __syncwarp();
    rope_norm_rows<HD>(Ks, warp * 16, rn.k, rn, b, s0, T, Hkv, kvh);
  }
  __syncthreads();
  store_rows<HD, kKvKeys>(dk, Ks, b, s0, T, Hkv, kvh);
  store_rows<HD, kKvKeys>(dv, Vs, b, s0, T, Hkv, kvh);
}

// ---------------------------------------------------------------------------------------------
template <int HD>
constexpr size_t fwd_smem() {
  return sizeof(bf16) * size_t(kFwdRows + 4 * kFwdKeys) * PaddedTile<HD>::kStride;
}
template <int HD>
constexpr size_t fwd_v1_smem() {
  return sizeof(bf16) * size_t(kV1Rows + 4 * kV1Keys) * HD;
}
template <int HD>
constexpr size_t dq_v1_smem() {
  return sizeof(bf16) * size_t(2 * kV1Rows + 4 * kV1Keys) * HD + sizeof(float) * 2 * kV1Rows;
}
template <int HD>
constexpr size_t dkdv_v1_smem() {
  return sizeof(bf16) * size_t(2 * kKvKeys + 4 * kKvRows) * HD + sizeof(float) * 4 * kKvRows;
}
template <int HD>
constexpr size_t dq_smem() {
  return sizeof(bf16) * size_t(2 * kDqRows + 4 * kDqKeys) * PaddedTile<HD>::kStride +
         sizeof(float) * 2 * kDqRows;
}
template <int HD>
constexpr size_t dkdv_smem() {
  return sizeof(bf16) * size_t(2 * kKvKeys + 4 * kKvRows) * PaddedTile<HD>::kStride +
         sizeof(float) * 4 * kKvRows;
}

void check_args(const AttnShape& s, std::initializer_list<const void*> ptrs) {
  VT_CUDA_REQUIRE(s.B >= 1 && s.T >= 1 && s.H >= 1 && s.Hkv >= 1,
                  "attention shape must have B, T, H, Hkv >= 1");
  VT_CUDA_REQUIRE(s.H % s.Hkv == 0, "H must be a multiple of Hkv");
  VT_CUDA_REQUIRE(s.window >= 1, "attention window must be >= 1");
  VT_CUDA_REQUIRE(attention_tc_supported(s),
                  "tensor-core attention handles head dims 32, 64 and 128 only");
  VT_CUDA_REQUIRE(s.H <= 65535 && s.B <= 65535, "B and H must be <= 65535 (grid y/z limits)");
  VT_CUDA_REQUIRE(s.T < (int64_t(1) << 30), "tensor-core attention needs T < 2^30");
  for (const void* p : ptrs)
    VT_CUDA_REQUIRE(reinterpret_cast<uintptr_t>(p) % 16 == 0,
                    "tensor-core attention needs 16-byte aligned q, k, v, out, dout, dq, dk, dv");
}

template <int HD>
void forward_hd(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                const AttnShape& s, float scale, cudaStream_t stream) {
  const int64_t W = std::min(s.window, s.T);
  set_dynamic_smem(reinterpret_cast<const void*>(attn_tc_fwd_kernel<HD>), fwd_smem<HD>(),
                   "tensor-core attention forward");
  const dim3 grid(unsigned((s.T + kFwdRows - 1) / kFwdRows), unsigned(s.H), unsigned(s.B));
  VT_LAUNCH(attn_tc_fwd_kernel<HD>, grid, kThreads, fwd_smem<HD>(), stream, q, k, v, out, lse,
            s.T, int(s.H), int(s.Hkv), W, scale * kLog2e);
  VT_CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void forward_v1_hd(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                   const AttnShape& s, float scale, cudaStream_t stream) {
  const int64_t W = std::min(s.window, s.T);
  set_dynamic_smem(reinterpret_cast<const void*>(attn_tc_fwd_v1_kernel<HD>), fwd_v1_smem<HD>(),
                   "tensor-core attention forward (v1)");
  const dim3 grid(unsigned((s.T + kV1Rows - 1) / kV1Rows), unsigned(s.H), unsigned(s.B));
  VT_LAUNCH(attn_tc_fwd_v1_kernel<HD>, grid, kThreads, fwd_v1_smem<HD>(), stream, q, k, v, out,
            lse, s.T, int(s.H), int(s.Hkv), W, scale * kLog2e);
  VT_CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void backward_hd(const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                 const bf16* dout, bf16* dq, bf16* dk, bf16* dv, const AttnShape& s, float scale,
                 float* D, const RopeNormGrad& rn, cudaStream_t stream) {
  const int64_t W = std::min(s.window, s.T);
  const int H = int(s.H), Hkv = int(s.Hkv);
  set_dynamic_smem(reinterpret_cast<const void*>(attn_tc_dq_kernel<HD>), dq_smem<HD>(),
                   "tensor-core attention backward (dQ)");
  const dim3 gq(unsigned((s.T + kDqRows - 1) / kDqRows), unsigned(H), unsigned(s.B));
  VT_LAUNCH(attn_tc_dq_kernel<HD>, gq, kThreads, dq_smem<HD>(), stream, q, k, v, out, dout, lse,
            D, dq, s.T, H, Hkv, W, scale, scale * kLog2e, rn);
  VT_CUDA_CHECK(cudaGetLastError());

  set_dynamic_smem(reinterpret_cast<const void*>(attn_tc_dkdv_kernel<HD>), dkdv_smem<HD>(),
                   "tensor-core attention backward (dK, dV)");
  const dim3 gkv(unsigned((s.T + kKvKeys - 1) / kKvKeys), unsigned(Hkv), unsigned(s.B));
  VT_LAUNCH(attn_tc_dkdv_kernel<HD>, gkv, kThreads, dkdv_smem<HD>(), stream, q, k, v, dout, lse,
            D, dk, dv, s.T, H, Hkv, W, scale, scale * kLog2e, rn);
  VT_CUDA_CHECK(cudaGetLastError());
}

template <int HD>
void backward_v1_hd(const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                    const bf16* dout, bf16* dq, bf16* dk, bf16* dv, const AttnShape& s,
                    float scale, float* D, const RopeNormGrad& rn, cudaStream_t stream) {
  const int64_t W = std::min(s.window, s.T);
  const int H = int(s.H), Hkv = int(s.Hkv);
  set_dynamic_smem(reinterpret_cast<const void*>(attn_tc_dq_v1_kernel<HD>), dq_v1_smem<HD>(),
                   "tensor-core attention backward (dQ, v1)");
  const dim3 gq(unsigned((s.T + kV1Rows - 1) / kV1Rows), unsigned(H), unsigned(s.B));
  VT_LAUNCH(attn_tc_dq_v1_kernel<HD>, gq, kThreads, dq_v1_smem<HD>(), stream, q, k, v, out, dout,
            lse, D, dq, s.T, H, Hkv, W, scale, scale * kLog2e, rn);
  VT_CUDA_CHECK(cudaGetLastError());
  set_dynamic_smem(reinterpret_cast<const void*>(attn_tc_dkdv_v1_kernel<HD>), dkdv_v1_smem<HD>(),
                   "tensor-core attention backward (dK, dV, v1)");
  const dim3 gkv(unsigned((s.T + kKvKeys - 1) / kKvKeys), unsigned(Hkv), unsigned(s.B));
  VT_LAUNCH(attn_tc_dkdv_v1_kernel<HD>, gkv, kThreads, dkdv_v1_smem<HD>(), stream, q, k, v, dout,
            lse, D, dk, dv, s.T, H, Hkv, W, scale, scale * kLog2e, rn);
  VT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool attention_tc_supported(const AttnShape& s) {
  return s.hd == 32 || s.hd == 64 || s.hd == 128;
}

size_t attention_tc_backward_workspace_bytes(const AttnShape& s) {
  return sizeof(float) * size_t(s.B) * size_t(s.H) * size_t(s.T);
}

void attention_tc_forward(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                          const AttnShape& s, float scale, cudaStream_t stream) {
  check_args(s, {q, k, v, out});
  switch (s.hd) {
    case 32: forward_hd<32>(q, k, v, out, lse, s, scale, stream); break;
    case 64: forward_hd<64>(q, k, v, out, lse, s, scale, stream); break;
    default: forward_hd<128>(q, k, v, out, lse, s, scale, stream); break;
  }
}

void attention_tc_forward_v1(const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse,
                             const AttnShape& s, float scale, cudaStream_t stream) {
  check_args(s, {q, k, v, out});
  switch (s.hd) {
    case 32: forward_v1_hd<32>(q, k, v, out, lse, s, scale, stream); break;
    case 64: forward_v1_hd<64>(q, k, v, out, lse, s, scale, stream); break;
    default: forward_v1_hd<128>(q, k, v, out, lse, s, scale, stream); break;
  }
}

void attention_tc_backward(const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                           const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv,
                           const AttnShape& s, float scale, void* workspace,
                           cudaStream_t stream, const RopeNormGrad& rn) {
  check_args(s, {q, k, v, out, dout, dq, dk, dv});
  VT_CUDA_REQUIRE((rn.q.x == nullptr) == (rn.k.x == nullptr) &&
                      (rn.q.x == nullptr || (rn.q.rstd != nullptr && rn.k.rstd != nullptr &&
                                             rn.table != nullptr && rn.pos_offset >= 0)),
                  "attention backward: the RoPE + QK-norm epilogue needs q and k, both rstd and "
                  "the rope table");
  VT_CUDA_REQUIRE(workspace != nullptr, "attention backward needs a workspace");
  float* D = static_cast<float*>(workspace);
  switch (s.hd) {
    case 32: backward_hd<32>(q, k, v, out, lse, dout, dq, dk, dv, s, scale, D, rn, stream); break;
    case 64: backward_hd<64>(q, k, v, out, lse, dout, dq, dk, dv, s, scale, D, rn, stream); break;
    default: backward_hd<128>(q, k, v, out, lse, dout, dq, dk, dv, s, scale, D, rn, stream); break;
  }
}

void attention_tc_backward_v1(const bf16* q, const bf16* k, const bf16* v, const bf16* out,
                              const float* lse, const bf16* dout, bf16* dq, bf16* dk, bf16* dv,
                              const AttnShape& s, float scale, void* workspace,
                              cudaStream_t stream) {
  check_args(s, {q, k, v, out, dout, dq, dk, dv});
  VT_CUDA_REQUIRE(workspace != nullptr, "attention backward needs a workspace");
  float* D = static_cast<float*>(workspace);
  const RopeNormGrad rn{};
  switch (s.hd) {
    case 32: backward_v1_hd<32>(q, k, v, out, lse, dout, dq, dk, dv, s, scale, D, rn, stream); break;
    case 64: backward_v1_hd<64>(q, k, v, out, lse, dout, dq, dk, dv, s, scale, D, rn, stream); break;
    default: backward_v1_hd<128>(q, k, v, out, lse, dout, dq, dk, dv, s, scale, D, rn, stream); break;
  }
}

}  // namespace vt::cuda
