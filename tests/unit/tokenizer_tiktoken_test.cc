// Loading .tiktoken ranks files: a tiny hand-written file (bytes at permuted ranks plus a few
// merges) checks the rank rule, ids = ranks, specials after the ranks, save/load, and the errors
// for malformed files.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/escaping.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"

namespace vt::data {
namespace {
namespace fs = std::filesystem;

fs::path dir() {
  fs::path d = fs::path(::testing::TempDir()) / ("vt_tiktoken_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

// Byte b has rank (b * 7 + 3) % 256 (a permutation), then merged tokens from rank 256 on.
int32_t byte_rank(unsigned char b) { return (b * 7 + 3) % 256; }
const std::vector<std::string> kMerges = {"he", "ll", "hell", "lo", "hello", " w", " wo", "or", "ld"};

std::string write_ranks(const std::string& name, const std::vector<std::string>& extra_lines = {},
                        int skip_byte = -1) {
  const fs::path p = dir() / name;
  std::ofstream f(p);
  for (int b = 0; b < 256; ++b) {
    if (b == skip_byte) continue;
    f << absl::Base64Escape(std::string(1, static_cast<char>(b))) << " " << byte_rank(b) << "\n";
  }
  for (size_t i = 0; i < kMerges.size(); ++i) f << absl::Base64Escape(kMerges[i]) << " " << 256 + i << "\n";
  for (const auto& l : extra_lines) f << l << "\n";
  return p.string();
}

int32_t rank_of_merge(const std::string& s) {
  for (size_t i = 0; i < kMerges.size(); ++i) {
    if (kMerges[i] == s) return static_cast<int32_t>(256 + i);
  }
  return -1;
}

TEST(Tiktoken, LoadsAndEncodesByRank) {
  auto t = load_tiktoken(write_ranks("tiny.tiktoken"));
  ASSERT_TRUE(t.ok()) << t.status();
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.kind(), "tiktoken");
  EXPECT_EQ(tok.num_regular(), 256 + static_cast<int32_t>(kMerges.size()));
  EXPECT_EQ(tok.bos_id(), tok.num_regular());
  EXPECT_EQ(tok.vocab_size(), tok.num_regular() + 1);
  // A chunk that is a token is that token.
  EXPECT_EQ(tok.encode("hello"), (std::vector<int32_t>{rank_of_merge("hello")}));
  // "hellx": he(256) first, then ll(257), then hell(258) = he+ll; x is a byte.
  EXPECT_EQ(tok.encode("hellx"), (std::vector<int32_t>{rank_of_merge("hell"), byte_rank('x')}));
  // " world" is one chunk. Lowest pair rank first: " w"(261); then " wo"(262) beats "or"(263);
  // then "ld"(264); "r"+"ld" is no token, so [" wo", "r", "ld"].
  EXPECT_EQ(tok.encode(" world"),
            (std::vector<int32_t>{rank_of_merge(" wo"), byte_rank('r'), rank_of_merge("ld")}));
  // Pre-split happens first: "hello world" -> "hello", " world".
  EXPECT_EQ(tok.encode("hello world"),
            (std::vector<int32_t>{rank_of_merge("hello"), rank_of_merge(" wo"), byte_rank('r'),
                                  rank_of_merge("ld")}));
  // Single bytes use their ranks, not their values.
  EXPECT_EQ(tok.encode("A"), (std::vector<int32_t>{byte_rank('A')}));
  EXPECT_EQ(tok.token_bytes(rank_of_merge("hello")), 5);
  EXPECT_EQ(tok.token_bytes(tok.bos_id()), 0);
}

TEST(Tiktoken, RoundTripsArbitraryBytes) {
  auto t = load_tiktoken(write_ranks("rt.tiktoken"));
  ASSERT_TRUE(t.ok());
  std::mt19937_64 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::string s;
    const size_t n = rng() % 200;
    for (size_t i = 0; i < n; ++i) {
      s += (rng() % 3 == 0) ? std::string(1, static_cast<char>(rng() & 0xff)) : std::string("hello world ");
    }
    auto d = (*t)->decode((*t)->encode(s));
    ASSERT_TRUE(d.ok());
    ASSERT_EQ(*d, s);
  }
}

TEST(Tiktoken, SaveLoadKeepsRanks) {
  auto t = load_tiktoken(write_ranks("save.tiktoken"));
  ASSERT_TRUE(t.ok());
  const std::string p = (dir() / "tok.json").string();
  ASSERT_TRUE((*t)->save(p).ok());
  auto back = load_tokenizer(p);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->kind(), "tiktoken");
  EXPECT_EQ((*back)->vocab_size(), (*t)->vocab_size());
  EXPECT_EQ((*back)->encode("hello world, hellx!"), (*t)->encode("hello world, hellx!"));
}

TEST(Tiktoken, GapsInRanksAreUnusedIds) {
  auto t = load_tiktoken(write_ranks("gap.tiktoken", {absl::Base64Escape("xyz") + " 300"}));
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ((*t)->num_regular(), 301);
  EXPECT_EQ((*t)->token_bytes(290), 0);
  EXPECT_EQ((*t)->encode("xyz"), (std::vector<int32_t>{300}));
}

TEST(Tiktoken, Errors) {
  auto missing = load_tiktoken((dir() / "nope.tiktoken").string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("nope.tiktoken"), std::string::npos);

  auto malformed = load_tiktoken(write_ranks("bad.tiktoken", {"this is not a rank line"}));
  ASSERT_FALSE(malformed.ok());
  EXPECT_NE(malformed.status().message().find("bad.tiktoken:266"), std::string::npos)
      << malformed.status();

  auto bad_b64 = load_tiktoken(write_ranks("b64.tiktoken", {"!!!! 400"}));
  EXPECT_FALSE(bad_b64.ok());

  auto dup = load_tiktoken(write_ranks("dup.tiktoken", {absl::Base64Escape("zz") + " 256"}));
  ASSERT_FALSE(dup.ok());
  EXPECT_NE(dup.status().message().find("twice"), std::string::npos) << dup.status();

  auto dup_bytes = load_tiktoken(write_ranks("dupb.tiktoken", {absl::Base64Escape("he") + " 500"}));
  ASSERT_FALSE(dup_bytes.ok());
  EXPECT_NE(dup_bytes.status().message().find("same bytes"), std::string::npos) << dup_bytes.status();

  auto no_byte = load_tiktoken(write_ranks("nobyte.tiktoken", {}, 0x41));
  ASSERT_FALSE(no_byte.ok());
  EXPECT_NE(no_byte.status().message().find("0x41"), std::string::npos) << no_byte.status();
}

}  // namespace
}  // namespace vt::data
