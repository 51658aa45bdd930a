// Token shards in the llm.c format: a header of 256 little-endian int32 ([0] magic 20240520 for
// uint16 tokens or 20240801 for uint32 tokens, [1] version 1, [2] token count, the rest zero),
// followed by the tokens. This file owns writing them, validating them, and reading token ranges
// (through mmap) for the loader and tools.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace vt::data {

inline constexpr int32_t kShardMagicU16 = 20240520;
inline constexpr int32_t kShardMagicU32 = 20240801;
inline constexpr int32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderInts = 256;
inline constexpr int64_t kShardHeaderBytes = kShardHeaderInts * 4;
inline constexpr int64_t kCheckChunk = 1 << 20;  // tokens per thread work item of check_ids

// Bytes per stored token for a vocabulary: 2 when every id fits in uint16 (vocab < 65536), else 4.
int shard_token_width(int64_t vocab_size);

// Writes `tokens` to `path` (through `path.tmp` and a rename, so a failed write never leaves a
// half-written shard under the final name). Every id must lie in [0, vocab_size); vocab_size
// picks the token width. At most INT32_MAX tokens (the header's count is an int32).
absl::Status write_shard(const std::string& path, std::span<const int32_t> tokens, int64_t vocab_size);

struct ShardHeader {
  int64_t num_tokens = 0;
  int token_width = 2;  // bytes per token: 2 (uint16) or 4 (uint32)
};

// Reads and validates the header of `path` against the file size. Errors name the file and say
// what is wrong (missing, truncated, wrong magic, unsupported version, size mismatch).
absl::StatusOr<ShardHeader> read_shard_header(const std::string& path);

// Reads a whole shard into int32 ids (validated like read_shard_header).
absl::StatusOr<std::vector<int32_t>> read_shard(const std::string& path);

// A validated, memory-mapped shard for random access by the loader. Move-only.
class ShardReader {
 public:
  static absl::StatusOr<ShardReader> open(const std::string& path);
  ShardReader() = default;
  ShardReader(ShardReader&& o) noexcept;
  ShardReader& operator=(ShardReader&& o) noexcept;
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;
  ~ShardReader();

  const std::string& path() const { return path_; }
  int64_t num_tokens() const { return header_.num_tokens; }
  int token_width() const { return header_.token_width; }
  // Copies tokens [offset, offset + count) into out (int32). Caller keeps the range in bounds.
  void read(int64_t offset, int64_t count, int32_t* out) const;
  // Scans every token (OpenMP threads) and names the first one outside [0, vocab_size) with
  // the file and its offset.
  absl::Status check_ids(int64_t vocab_size) const;

 private:
  void release();
  std::string path_;
  ShardHeader header_;
  const uint8_t* map_ = nullptr;
  size_t map_len_ = 0;
};

}  // namespace vt::data
