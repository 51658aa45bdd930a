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
    ASSERT_TRUE(w.open(dir.string()).ok());
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
  EXPECT_EQ(records, 3);  // the file version, one step's scalars, the text
  EXPECT_NE(bytes.find("brain.Event:2"), std::string::npos);
  EXPECT_NE(bytes.find("tokens_by_source/web"), std::string::npos);
  EXPECT_FALSE(TensorBoardWriter().is_open());
  TensorBoardWriter bad;
  EXPECT_FALSE(bad.open("/proc/no/such/dir").ok());
}

}  // namespace
}  // namespace vt
