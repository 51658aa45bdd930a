// The warp matrix instructions of the emulation (vt_emu/warp_matrix.h): mma.sync m16n8k16 bf16
// and ldmatrix as warp exchanges that place every element where the PTX ISA's fragment layouts
// put it, and cp.async as per-thread copies that complete at cp.async.wait_group.
//
// The layouts, with groupID = lane >> 2 and threadID_in_group = lane % 4 (PTX ISA, "Matrix
// Fragments for mma.m16n8k16 with floating point type" and "ldmatrix"):
//   A (16x16 .bf16, a0..a7, two per 32-bit register, low half first):
//     row = groupID for a0, a1, a4, a5, groupID + 8 otherwise;
//     col = threadID_in_group * 2 + (i & 1), + 8 for i >= 4.
//   B (16x8 .bf16, b0..b3): row = threadID_in_group * 2 + (i & 1), + 8 for i >= 2; col = groupID.
//   C, D (16x8 .f32, c0..c3): row = groupID for c0, c1, groupID + 8 otherwise;
//     col = threadID_in_group * 2 + (i & 1).
//   ldmatrix m8n8 .b16: matrix i's rows come from the addresses of lanes 8i..8i+7 (row r from lane
//     8i + r); lane l's register i holds row l / 4, columns 2 (l % 4) and 2 (l % 4) + 1 (low half
//     first); with .trans it holds the same positions of the transposed matrix, i.e. elements
//     (2 (l % 4), l / 4) and (2 (l % 4) + 1, l / 4) of the rows as stored.
#include "vt_emu/warp_matrix.h"

#include <cstring>

#include "vt_emu/simt.h"

namespace vt_emu {

namespace {

constexpr unsigned kFullWarp = 0xffffffffu;

float bf16_bits_to_float(uint32_t bits16) {
  const uint32_t u = (bits16 & 0xffffu) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t half_of(uint32_t reg, int hi) { return uint16_t(hi ? reg >> 16 : reg & 0xffffu); }

struct MmaRecord {
  float* d;
  const uint32_t* a;
  const uint32_t* b;
  const float* c;
};

const char* mma_exchange(void* const records[32], unsigned mask) {
  if (mask != kFullWarp) return "mma.sync needs all 32 lanes of the warp";
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const auto* r = static_cast<const MmaRecord*>(records[l]);
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 8; ++i) {
      const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8;
      const int col = t * 2 + (i & 1) + (i >= 4 ? 8 : 0);
      A[row][col] = bf16_bits_to_float(half_of(r->a[i / 2], i & 1));
    }
    for (int i = 0; i < 4; ++i) {
      const int row = t * 2 + (i & 1) + (i >= 2 ? 8 : 0);
      B[row][g] = bf16_bits_to_float(half_of(r->b[i / 2], i & 1));
    }
    for (int i = 0; i < 4; ++i) C[i < 2 ? g : g + 8][t * 2 + (i & 1)] = r->c[i];
  }
  // Every record is read before any is written: d may be c.
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) {
      float acc = C[m][n];
      for (int k = 0; k < 16; ++k) acc += A[m][k] * B[k][n];  // each product exact in fp32
      C[m][n] = acc;
    }
  for (int l = 0; l < 32; ++l) {
    auto* r = static_cast<MmaRecord*>(records[l]);
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < 4; ++i) r->d[i] = C[i < 2 ? g : g + 8][t * 2 + (i & 1)];
  }
  return nullptr;
}

struct LdmatrixRecord {
  uint32_t* regs;
  const unsigned char* row;
  int num;
  bool trans;
};

const char* ldmatrix_exchange(void* const records[32], unsigned mask) {
  if (mask != kFullWarp) return "ldmatrix needs all 32 lanes of the warp";
  const auto* r0 = static_cast<const LdmatrixRecord*>(records[0]);
  const int num = r0->num;
  for (int l = 1; l < 32; ++l) {
    const auto* r = static_cast<const LdmatrixRecord*>(records[l]);
    if (r->num != num || r->trans != r0->trans)
      return "lanes of one ldmatrix disagree on .num or .trans";
  }
  if (num != 1 && num != 2 && num != 4) return "ldmatrix .num must be x1, x2 or x4";
  for (int l = 0; l < 8 * num; ++l) {
    const auto* p = static_cast<const LdmatrixRecord*>(records[l])->row;
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      return "ldmatrix row address not 16-byte aligned";
  }
  // The 16-bit element (row, col) of matrix i as stored.
  auto elem = [&](int i, int row, int col) {
    uint16_t v;
    std::memcpy(&v, static_cast<const LdmatrixRecord*>(records[8 * i + row])->row + 2 * col, 2);
    return uint32_t(v);
  };
  uint32_t out[32][4];
  for (int l = 0; l < 32; ++l) {
    const int g = l >> 2, t = l & 3;
    for (int i = 0; i < num; ++i) {
      const uint32_t lo = r0->trans ? elem(i, 2 * t, g) : elem(i, g, 2 * t);
      const uint32_t hi = r0->trans ? elem(i, 2 * t + 1, g) : elem(i, g, 2 * t + 1);
      out[l][i] = lo | (hi << 16);
    }
  }
  for (int l = 0; l < 32; ++l) {
    auto* r = static_cast<LdmatrixRecord*>(records[l]);
    for (int i = 0; i < num; ++i) r->regs[i] = out[l][i];
  }
  return nullptr;
}

}  // namespace

void mma_m16n8k16_bf16(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4],
                       const std::source_location& loc) {
  MmaRecord rec{d, a, b, c};
  detail::warp_exchange("mma.sync.m16n8k16.bf16", kFullWarp, &rec, mma_exchange, loc);
}

void ldmatrix_b16(uint32_t* regs, int num, bool trans, const void* row,
                  const std::source_location& loc) {
  LdmatrixRecord rec{regs, static_cast<const unsigned char*>(row), num, trans};
  detail::warp_exchange(trans ? "ldmatrix.trans" : "ldmatrix", kFullWarp, &rec,
                        ldmatrix_exchange, loc);
}

void cp_async(void* dst, const void* src, unsigned bytes, unsigned src_bytes) {
  const auto loc = std::source_location::current();
  if ((bytes != 4 && bytes != 8 && bytes != 16) || src_bytes > bytes) {
    detail::thread_fault("cp.async size must be 4, 8 or 16 bytes, src-size at most that", loc);
    return;
  }
  if (reinterpret_cast<uintptr_t>(dst) % bytes || (src_bytes && reinterpret_cast<uintptr_t>(src) % bytes)) {
    detail::thread_fault("cp.async addresses must be aligned to the copy size", loc);
    return;
  }
  detail::cur_thread().async_copies.push_back(AsyncCopy{dst, src, bytes, src_bytes});
}

void cp_async_commit() {
  SimtThread& t = detail::cur_thread();
  t.async_groups.push_back(t.async_copies.size());
}

void cp_async_wait(int n) {
  SimtThread& t = detail::cur_thread();
  const int groups = int(t.async_groups.size());
  if (n < 0) n = 0;
  if (groups <= n) return;
  const size_t done = t.async_groups[size_t(groups - n - 1)];  // copies of the older groups
  for (size_t i = 0; i < done; ++i) {
    const AsyncCopy& c = t.async_copies[i];
    auto* dst = static_cast<unsigned char*>(c.dst);
    if (c.src_bytes) std::memcpy(dst, c.src, c.src_bytes);
    std::memset(dst + c.src_bytes, 0, c.bytes - c.src_bytes);
  }
  t.async_copies.erase(t.async_copies.begin(), t.async_copies.begin() + std::ptrdiff_t(done));
  t.async_groups.erase(t.async_groups.begin(), t.async_groups.begin() + (groups - n));
  for (size_t& end : t.async_groups) end -= done;
}

}  // namespace vt_emu
