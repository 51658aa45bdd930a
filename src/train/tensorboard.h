// TensorBoard event files (`vtrain train --tensorboard DIR`): a TFRecord file of Event messages
// (src/train/tensorboard_event.proto, TensorBoard's field numbers), each record framed as
// TensorBoard reads it: uint64 length, masked CRC-32C of the length, the bytes, masked CRC-32C of
// the bytes. The first event names the file version, the second is a restart marker (SessionLog
// START) at the first step this run writes, so that TensorBoard drops the steps an earlier file
// logged that a run resumed from an earlier checkpoint runs again; then scalars per step and the
// run's configuration as text. Written by rank 0 only, each event written whole or not at all
// (nothing lost on a crash, no torn record); a failed write closes the file and says so once on
// stderr, and training goes on (docs/usage.md "When a metrics sink fails"). A resumed run adds a
// new file to the same directory, which TensorBoard reads as one run; the directory belongs to
// one run (vtrain_run.json names it): another run is refused by name
// (check_tensorboard_dir).
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

// The file in a --tensorboard directory naming the run that writes it.
inline constexpr const char* kTensorBoardRunFile = "vtrain_run.json";

// Whether --tensorboard `dir` may take this run's events (reads only): not a directory that
// exists as something else; when it already holds event files or a vtrain_run.json, a fresh run
// (`resumes` false) is refused naming a file there (TensorBoard would draw both runs as one),
// and a resuming run is refused when vtrain_run.json names another run than `identity` (the
// resolved checkpoint directory of this run). Event files of no known run (no vtrain_run.json):
// a warning naming one, returned in `*warning`.
absl::Status check_tensorboard_dir(const std::string& dir, bool resumes, const std::string& identity,
                                   std::string* warning);

class TensorBoardWriter {
 public:
  TensorBoardWriter() = default;
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;
  ~TensorBoardWriter();
  // Creates DIR if needed and a new events.out.tfevents.<seconds>.<host>.<pid>.vtrain in it
  // (its name sorts after every event file there, as TensorBoard reads them in name order),
  // writes vtrain_run.json naming `identity`, the file version and a SessionLog START at
  // `first_step`.
  absl::Status open(const std::string& dir, int64_t first_step, const std::string& identity);
  bool is_open() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }
  // Every number of a metrics record as a scalar at record["step"], its tag the key (nested
  // objects joined with '/': tokens_by_source/web); records without a step are skipped.
  void scalars(const nlohmann::json& record);
  // A text summary (TensorBoard's text plugin) at `step`.
  void text(const std::string& tag, const std::string& text, int64_t step);

 private:
  void write_event(const std::string& bytes);
  int fd_ = -1;
  std::string path_;
  int64_t last_step_ = -1;  // of the last event written whole
};

}  // namespace vt
