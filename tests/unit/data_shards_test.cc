// Token shards: round trips in both widths, the width rule, and every corruption the reader must
// catch with an error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>

#include "data/shards.h"

namespace vt::data {
namespace {
namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  // One directory per process: ctest runs this binary's tests in parallel processes.
  fs::path d = fs::path(::testing::TempDir()) / ("vt_data_shards_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return (d / name).string();
}

std::vector<char> file_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::vector<char>(std::istreambuf_iterator<char>(f), {});
}

void put_bytes(const std::string& p, const std::vector<char>& b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(b.data(), static_cast<std::streamsize>(b.size()));
}

void set_header_int(std::vector<char>& b, int i, int32_t v) { std::memcpy(b.data() + 4 * i, &v, 4); }

TEST(Shards, RoundTripUint16) {
  std::vector<int32_t> toks(5000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<int32_t>((i * 7919) % 65536);
  const std::string p = temp_path("u16.bin");
  ASSERT_TRUE(write_shard(p, toks, 65536).ok());
  auto h = read_shard_header(p);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->token_width, 2);
  EXPECT_EQ(h->num_tokens, 5000);
  EXPECT_EQ(fs::file_size(p), 1024u + 2 * 5000);
  std::vector<char> b = file_bytes(p);
  int32_t hdr[3];
  std::memcpy(hdr, b.data(), 12);
  EXPECT_EQ(hdr[0], 20240520);
  EXPECT_EQ(hdr[1], 1);
  EXPECT_EQ(hdr[2], 5000);
  auto back = read_shard(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, toks);
  EXPECT_FALSE(fs::exists(p + ".tmp"));
}

TEST(Shards, RoundTripUint32) {
  std::vector<int32_t> toks = {0, 65535, 65536, 100255, 100256, 7};
  const std::string p = temp_path("u32.bin");
  ASSERT_TRUE(write_shard(p, toks, 100257).ok());
  auto h = read_shard_header(p);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->token_width, 4);
  std::vector<char> b = file_bytes(p);
  int32_t magic;
  std::memcpy(&magic, b.data(), 4);
  EXPECT_EQ(magic, 20240801);
  auto r = ShardReader::open(p);
  ASSERT_TRUE(r.ok());
  std::vector<int32_t> mid(3);
  r->read(2, 3, mid.data());
  EXPECT_EQ(mid, (std::vector<int32_t>{65536, 100255, 100256}));
  EXPECT_EQ(*read_shard(p), toks);
}

TEST(Shards, WidthRule) {
  EXPECT_EQ(shard_token_width(257), 2);
  EXPECT_EQ(shard_token_width(65536), 2);
  EXPECT_EQ(shard_token_width(65537), 4);
}

TEST(Shards, EmptyShard) {
  const std::string p = temp_path("empty.bin");
  ASSERT_TRUE(write_shard(p, {}, 300).ok());
  auto t = read_shard(p);
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->empty());
}

TEST(Shards, WriterRejectsOutOfVocab) {
  const std::string p = temp_path("oov.bin");
  std::vector<int32_t> toks = {1, 2, 300};
  absl::Status s = write_shard(p, toks, 300);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("300"), std::string::npos);
  EXPECT_FALSE(fs::exists(p));
  std::vector<int32_t> neg = {-1};
  EXPECT_FALSE(write_shard(p, neg, 300).ok());
  EXPECT_FALSE(write_shard(temp_path("no/such/dir.bin"), toks, 1000).ok());
}

class ShardCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    good_ = temp_path("good.bin");
    std::vector<int32_t> toks(100);
    std::iota(toks.begin(), toks.end(), 0);
    ASSERT_TRUE(write_shard(good_, toks, 1000).ok());
    bytes_ = file_bytes(good_);
    bad_ = temp_path("bad.bin");
  }
  // Writes the modified bytes and expects an error naming the file and containing `what`.
  void expect_error(const std::string& what) {
    put_bytes(bad_, bytes_);
    auto h = read_shard_header(bad_);
    ASSERT_FALSE(h.ok());
    EXPECT_NE(h.status().message().find(bad_), std::string::npos) << h.status();
    EXPECT_NE(h.status().message().find(what), std::string::npos) << h.status();
    EXPECT_FALSE(read_shard(bad_).ok());
    EXPECT_FALSE(ShardReader::open(bad_).ok());
  }
  std::string good_, bad_;
  std::vector<char> bytes_;
};

TEST_F(ShardCorruption, Missing) {
  auto h = read_shard_header(temp_path("does_not_exist.bin"));
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("does_not_exist.bin"), std::string::npos);
}

TEST_F(ShardCorruption, ShorterThanHeader) {
  bytes_.resize(100);
  expect_error("truncated");
}

TEST_F(ShardCorruption, EmptyFile) {
  bytes_.clear();
  expect_error("truncated");
}

TEST_F(ShardCorruption, WrongMagic) {
  set_header_int(bytes_, 0, 12345);
  expect_error("magic");
}

TEST_F(ShardCorruption, WrongVersion) {
  set_header_int(bytes_, 1, 2);
  expect_error("version");
}

TEST_F(ShardCorruption, NegativeCount) {
  set_header_int(bytes_, 2, -5);
  expect_error("negative");
}

TEST_F(ShardCorruption, TruncatedBody) {
  bytes_.resize(bytes_.size() - 3);
  expect_error("truncated");
}

TEST_F(ShardCorruption, CountLargerThanFile) {
  set_header_int(bytes_, 2, 101);
  expect_error("truncated");
}

TEST_F(ShardCorruption, TrailingBytes) {
  bytes_.push_back(0);
  bytes_.push_back(0);
  expect_error("trailing");
}

TEST_F(ShardCorruption, WidthMismatch) {
  // A uint16 body labelled as uint32: the size no longer matches the count.
  set_header_int(bytes_, 0, kShardMagicU32);
  expect_error("truncated");
}

}  // namespace
}  // namespace vt::data
