// TensorBoard event files (`vtrain train --tensorboard DIR`): a TFRecord file of Event messages
// (src/train/tensorboard_event.proto, TensorBoard's field numbers), each record framed as
// TensorBoard reads it: uint64 length, masked CRC-32C of the length, the bytes, masked CRC-32C of
// the bytes. The first event names the file version; then scalars per step and the run's
// configuration as text. Written by rank 0 only, flushed per event (nothing lost on a crash); a
// resumed run adds a new file to the same directory, which TensorBoard reads as one run.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

namespace vt {

// CRC-32C (Castagnoli) of `n` bytes, and TFRecord's mask of it.
uint32_t crc32c(const void* data, size_t n);
uint32_t masked_crc32c(const void* data, size_t n);

class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();
  // Creates DIR if needed and a new events.out.tfevents.<seconds>.<host>.<pid>.vtrain in it.
  absl::Status open(const std::string& dir);
  bool is_open() const { return f_ != nullptr; }
  const std::string& path() const { return path_; }
  // Every number of a metrics record as a scalar at record["step"], its tag the key (nested
  // objects joined with '/': tokens_by_source/web); records without a step are skipped.
  void scalars(const nlohmann::json& record);
  // A text summary (TensorBoard's text plugin) at `step`.
  void text(const std::string& tag, const std::string& text, int64_t step);

 private:
  void write_event(const std::string& bytes);
  std::FILE* f_ = nullptr;
  std::string path_;
};

}  // namespace vt
