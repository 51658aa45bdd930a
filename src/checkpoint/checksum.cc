// pkmix64-sum checksums (see checksum.h).
#include "checkpoint/checksum.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace vt::ckpt {

namespace {
inline uint64_t mix(uint64_t z) {
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
}  // namespace

uint64_t checksum_run(const float* data, int64_t first, int64_t n, bool threads) {
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (threads && n > (1 << 16))
  for (int64_t k = 0; k < n; ++k) {
    uint32_t bits;
    std::memcpy(&bits, data + k, 4);
    sum += mix(mix(static_cast<uint64_t>(first + k)) ^ bits);
  }
  return sum;
}

uint64_t checksum_box(const float* local, const std::vector<int64_t>& global,
                      const std::vector<int64_t>& start, const std::vector<int64_t>& count,
                      bool threads) {
  const int nd = static_cast<int>(global.size());
  if (nd == 0) return checksum_run(local, 0, 1, false);
  // Innermost contiguous run: the last dimension's count; iterate the outer indices.
  const int64_t run = count[nd - 1];
  int64_t outer = 1;
  for (int d = 0; d + 1 < nd; ++d) outer *= count[d];
  if (run == 0 || outer == 0) return 0;
  // Global strides (row-major).
  std::vector<int64_t> stride(nd, 1);
  for (int d = nd - 2; d >= 0; --d) stride[d] = stride[d + 1] * global[d + 1];
  uint64_t sum = 0;
#pragma omp parallel for reduction(+ : sum) schedule(static) if (threads && outer >= 64 && run < (1 << 16))
  for (int64_t o = 0; o < outer; ++o) {
    int64_t rem = o, g = start[nd - 1];
    for (int d = nd - 2; d >= 0; --d) {
      const int64_t idx = rem % count[d];
      rem /= count[d];
      g += (start[d] + idx) * stride[d];
    }
    sum += checksum_run(local + o * run, g, run, threads);
  }
  return sum;
}

std::string checksum_hex(uint64_t c) { return absl::StrFormat("%016x", c); }

absl::StatusOr<uint64_t> parse_checksum_hex(const std::string& s) {
  if (s.size() != 16) return absl::DataLossError(absl::StrCat("bad checksum '", s, "'"));
  uint64_t v = 0;
  for (char ch : s) {
    int d;
    if (ch >= '0' && ch <= '9') d = ch - '0';
    else if (ch >= 'a' && ch <= 'f') d = ch - 'a' + 10;
    else return absl::DataLossError(absl::StrCat("bad checksum '", s, "'"));
    v = v << 4 | static_cast<uint64_t>(d);
  }
  return v;
}

}  // namespace vt::ckpt
