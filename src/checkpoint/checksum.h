// The layout-independent checksum of a checkpoint dataset ("pkmix64-sum", docs/design.md
// "Checkpoints"):
//   checksum = sum over the global tensor's row-major flat index i of
//              mix(mix(i) ^ bits(x_i))   (mod 2^64),
// where bits() is the float's 32-bit pattern and mix is the splitmix64 finalizer (a bijection).
// Every term depends on the element's position and exact bits, so any changed element changes
// the sum (a single change always does; several cancel with probability ~2^-64), and because
// it is a sum the pieces can be computed by any ranks over any disjoint partition of the tensor
// (the writers' shards, row ranges of a reading pass) and added: the value never depends on the
// layout a checkpoint was written or read with. Stored as 16 hex digits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt::ckpt {

inline constexpr const char* kChecksumAlgorithm = "pkmix64-sum";

// Sum of the terms of n contiguous elements whose first has global flat index `first`.
// `threads`: use the OpenMP team for long runs (false: this thread alone, e.g. beside a write).
uint64_t checksum_run(const float* data, int64_t first, int64_t n, bool threads = true);

// Sum of the terms of a local shard: `local` is row-major with shape `count`, placed at `start`
// in a tensor of shape `global` (a box; any axis may be partial).
uint64_t checksum_box(const float* local, const std::vector<int64_t>& global,
                      const std::vector<int64_t>& start, const std::vector<int64_t>& count,
                      bool threads = true);

std::string checksum_hex(uint64_t c);
absl::StatusOr<uint64_t> parse_checksum_hex(const std::string& s);

}  // namespace vt::ckpt
