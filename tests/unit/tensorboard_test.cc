// train/tensorboard: CRC-32C against its published check value and TFRecord's mask, and the
// framing of an event file (length, masked CRC of the length, bytes, masked CRC of the bytes)
// read back record by record. TensorBoard's own reader checks the contents:
// tests/e2e/test_tensorboard.py.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "train/tensorboard.h"

namespace vt {
namespace {

TEST(TensorBoard, Crc32cCheckValues) {
  // The CRC-32C check value (RFC 3720 B.4 / the Rocksoft catalogue): "123456789" -> 0xE3069283.
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const unsigned char zeros[32] = {};
  EXPECT_EQ(crc32c(zeros, 32), 0x8A9136AAu);  // RFC 3720 B.4: 32 bytes of zeros
  const uint32_t c = crc32c("123456789", 9);
  EXPECT_EQ(masked_crc32c("123456789", 9), ((c >> 15) | (c << 17)) + 0xA282EAD8u);
}

TEST(TensorBoard, RecordsAreFramedAndChecksummed) {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   ("vt_tb_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string path;
  {
    TensorBoardWriter w;
    ASSERT_TRUE(w.open(dir.string(), 4, "/runs/x/ckpt").ok());
    path = w.path();
    w.scalars({{"step", 3}, {"loss", 2.5}, {"tokens_by_source", {{"web", 64}}}});
    w.scalars({{"loss", 1.0}});  // no step: skipped
    w.text("config", "hello", 0);
  }
  std::ifstream f(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  size_t at = 0;
  int records = 0;
  while (at < bytes.size()) {
    ASSERT_LE(at + 12, bytes.size());
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
    uint32_t lc = 0, dc = 0;
    std::memcpy(&lc, bytes.data() + at + 8, 4);
    EXPECT_EQ(lc, masked_crc32c(bytes.data() + at, 8));
    ASSERT_LE(at + 12 + n + 4, bytes.size());
    std::memcpy(&dc, bytes.data() + at + 12 + n, 4);
    EXPECT_EQ(dc, masked_crc32c(bytes.data() + at + 12, n));
    at += 12 + n + 4;
    ++records;
  }
  EXPECT_EQ(records, 4);  // the file version, the restart marker, one step's scalars, the text
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  // The run's name beside the events (check_tensorboard_dir reads it).
  std::ifstream run(dir / kTensorBoardRunFile);
  const std::string run_json((std::istreambuf_iterator<char>(run)), std::istreambuf_iterator<char>());
  EXPECT_EQ(run_json, "{\"run\":\"/runs/x/ckpt\"}\n");
  EXPECT_NE(bytes.find("tokens_by_source/web"), std::string::npos);
  EXPECT_FALSE(TensorBoardWriter().is_open());
  TensorBoardWriter bad;
  EXPECT_FALSE(bad.open("/proc/no/such/dir", 1, "").ok());
}

TEST(TensorBoard, ADirectoryBelongsToOneRun) {
  const auto dir = std::filesystem::path(::testing::TempDir()) /
                   ("vt_tb_runs_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::string warning;
  EXPECT_TRUE(check_tensorboard_dir(dir.string(), false, "/a", &warning).ok());  // not there yet
  { TensorBoardWriter w; ASSERT_TRUE(w.open(dir.string(), 1, "/a").ok()); }
  // A fresh run (resume none) is refused, named, whoever it is; a resume of /a goes on.
  absl::Status fresh = check_tensorboard_dir(dir.string(), false, "/a", &warning);
  EXPECT_FALSE(fresh.ok());
  EXPECT_NE(fresh.message().find("already holds the event files of another run (events.out.tfevents."),
            std::string::npos) << fresh;
  EXPECT_TRUE(check_tensorboard_dir(dir.string(), true, "/a", &warning).ok());
  EXPECT_TRUE(warning.empty());
  // Another run's resume is refused naming both.
  absl::Status other = check_tensorboard_dir(dir.string(), true, "/b", &warning);
  EXPECT_FALSE(other.ok());
  EXPECT_NE(other.message().find("names the checkpoint directory /a, this run's is /b"),
            std::string::npos) << other;
  // Event files of no known run: a warning naming one.
  std::filesystem::remove(dir / kTensorBoardRunFile);
  EXPECT_TRUE(check_tensorboard_dir(dir.string(), true, "/b", &warning).ok());
  EXPECT_NE(warning.find("name no run (events.out.tfevents."), std::string::npos) << warning;
  // A file where the directory should be.
  const auto file = dir / "events.out.tfevents.1.h.2.vtrain";
  std::ofstream(file) << "";
  absl::Status not_dir = check_tensorboard_dir(file.string(), true, "/a", &warning);
  EXPECT_FALSE(not_dir.ok());
  EXPECT_NE(not_dir.message().find("is a regular file, not a directory"), std::string::npos);
  // A new file sorts after every event file there (TensorBoard reads them in name order).
  std::ofstream(dir / "events.out.tfevents.9999999999.h.1.vtrain") << "";
  TensorBoardWriter w;
  ASSERT_TRUE(w.open(dir.string(), 5, "/a").ok());
  EXPECT_NE(w.path().find("events.out.tfevents.10000000000."), std::string::npos) << w.path();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace vt
