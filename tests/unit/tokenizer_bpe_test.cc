// Pre-splitting and the byte-level BPE: the cl100k regex splits as GPT-4 does and never drops a
// byte, training is deterministic with the documented tie rule, merges compress English, and
// decode(encode(x)) == x for arbitrary bytes (invalid UTF-8, NULs, whitespace runs, emoji).
#include <gtest/gtest.h>
#include <unistd.h>

#include <ctime>
#include <filesystem>
#include <fstream>
#include <random>

#include "core/check.h"

#include "data/bpe.h"
#include "data/bpe_trainer.h"
#include "data/pretokenize.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"

namespace vt::data {
namespace {
namespace fs = std::filesystem;

const char* kEnglish =
    "The quick brown fox jumps over the lazy dog. The dog was not amused; the fox, however, was "
    "delighted with the outcome. In the beginning there was the word, and the word was with the "
    "fox, and the fox was the word. They said that the weather would be fine, but the weather "
    "turned out to be rather wet, and they walked home through the rain, talking about the fox and "
    "the dog and the weather. It's the thing they'll remember: we've seen the rain and we're fine.\n";

std::vector<std::string> split(const PreTokenizer& p, std::string_view text) {
  std::vector<std::string> out;
  p.split(text, [&](std::string_view c) { out.emplace_back(c); });
  return out;
}

std::shared_ptr<const PreTokenizer> cl100k() {
  auto p = PreTokenizer::create(cl100k_pattern());
  VT_CHECK(p.ok());
  return *p;
}

std::string random_bytes(std::mt19937_64& rng, size_t n) {
  // A mix of ASCII words, whitespace, NULs, multi-byte UTF-8, and raw (often invalid) bytes.
  static const std::vector<std::string> pieces = {
      "the", " fox", "  ", "\n", "\r\n", "\t", std::string(1, '\0'), "\xf0\x9f\x98\x80",
      "\xe2\x82\xac", "\xc3\xa9", "123", "'s", "'LL", ".", "!!", "\xff", "\xc3", "\x80\x80",
      "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe0\x80", "  \xff  ", "\x7f"};
  std::string s;
  while (s.size() < n) {
    if (rng() % 4 == 0) {
      s.push_back(static_cast<char>(rng() & 0xff));
    } else {
      s += pieces[rng() % pieces.size()];
    }
  }
  return s;
}

TEST(PreTokenize, MatchesGpt4Splits) {
  auto p = cl100k();
  EXPECT_EQ(split(*p, "Hello world's 123456  foo\n\nbar"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", "123", "456", " ", " foo", "\n\n",
                                      "bar"}));
  EXPECT_EQ(split(*p, "don't WE'LL x"), (std::vector<std::string>{"don", "'t", " WE", "'LL", " x"}));
  EXPECT_EQ(split(*p, "a...!? b"), (std::vector<std::string>{"a", "...!?", " b"}));
  EXPECT_EQ(split(*p, "caf\xc3\xa9 \xf0\x9f\x98\x80!"),
            (std::vector<std::string>{"caf\xc3\xa9", " \xf0\x9f\x98\x80!"}));
  EXPECT_EQ(split(*p, "x   \n"), (std::vector<std::string>{"x", "   \n"}));
}

TEST(PreTokenize, InvalidUtf8BecomesOwnChunks) {
  auto p = cl100k();
  std::vector<std::string> c = split(*p, "ab\xff\xfe cd\xc3");
  std::string joined;
  for (auto& s : c) joined += s;
  EXPECT_EQ(joined, "ab\xff\xfe cd\xc3");
  EXPECT_EQ(c.front(), "ab");
  EXPECT_EQ(c.back(), "\xc3");
}

TEST(PreTokenize, NeverDropsBytes) {
  auto p = cl100k();
  std::mt19937_64 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const std::string s = random_bytes(rng, 1 + rng() % 300);
    std::string joined;
    p->split(s, [&](std::string_view c) {
      EXPECT_FALSE(c.empty());
      joined += c;
    });
    ASSERT_EQ(joined, s) << "trial " << trial;
  }
}

// The code point sets another regex engine is given (hf_tokenizer.h): PCRE2's own, as ranges.
TEST(PreTokenize, ClassRangesArePcre2Sets) {
  using R = std::vector<std::pair<uint32_t, uint32_t>>;
  auto has = [](const R& r, uint32_t cp) {
    for (auto [lo, hi] : r)
      if (lo <= cp && cp <= hi) return true;
    return false;
  };
  auto space = pcre2_class_ranges("\\s");
  ASSERT_TRUE(space.ok());
  for (uint32_t cp : {0x09u, 0x0Au, 0x0Du, 0x20u, 0x85u, 0xA0u, 0x180Eu, 0x2003u, 0x2028u, 0x3000u})
    EXPECT_TRUE(has(*space, cp)) << std::hex << cp;
  for (uint32_t cp : {0x41u, 0x30u, 0x200Bu, 0xFEFFu, 0x10FFFFu}) EXPECT_FALSE(has(*space, cp)) << std::hex << cp;
  auto digits = pcre2_class_ranges("\\p{N}");
  ASSERT_TRUE(digits.ok());
  EXPECT_EQ(digits->front(), (std::pair<uint32_t, uint32_t>{0x30, 0x39}));
  EXPECT_TRUE(has(*digits, 0x0661) && has(*digits, 0x00B2) && !has(*digits, 0x41));
  auto not_space = pcre2_class_ranges("\\S");  // the complement, surrogates left out
  ASSERT_TRUE(not_space.ok());
  uint64_t n = 0;
  for (const R* r : {&*space, &*not_space})
    for (auto [lo, hi] : *r) n += hi - lo + 1 - (lo <= 0xD7FF && hi >= 0xE000 ? 0x800 : 0);
  EXPECT_EQ(n, 0x110000u - 0x800u);
  EXPECT_FALSE(pcre2_class_ranges("\\p{Nope}").ok());
}

TEST(Bpe, DeterministicAndTieBreak) {
  BpeTrainOptions o;
  o.vocab_size = 300;
  auto a = train_bpe_on_text(kEnglish, o);
  auto b = train_bpe_on_text(kEnglish, o);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ((*a)->merges().size(), (*b)->merges().size());
  for (size_t i = 0; i < (*a)->merges().size(); ++i) {
    EXPECT_EQ((*a)->merges()[i].left, (*b)->merges()[i].left);
    EXPECT_EQ((*a)->merges()[i].right, (*b)->merges()[i].right);
  }
  // Chunks "ab", " ab", " cd", " cd": (' ','c'), ('a','b'), ('c','d') all occur twice; the lowest
  // pair of ids, (32, 99), wins, then (97, 98), then (99, 100).
  o.vocab_size = 260;
  auto t = train_bpe_on_text("ab ab cd cd", o);
  ASSERT_TRUE(t.ok());
  ASSERT_GE((*t)->merges().size(), 3u);
  EXPECT_EQ((*t)->merges()[0].left, 32);
  EXPECT_EQ((*t)->merges()[0].right, 99);
  EXPECT_EQ((*t)->merges()[1].left, 97);
  EXPECT_EQ((*t)->merges()[1].right, 98);
  EXPECT_EQ((*t)->token(256), " c");
}

TEST(Bpe, VocabLayoutAndSpecials) {
  BpeTrainOptions o;
  o.vocab_size = 320;
  auto t = train_bpe_on_text(kEnglish, o);
  ASSERT_TRUE(t.ok());
  const Tokenizer& tok = **t;
  EXPECT_EQ(tok.vocab_size(), 320);
  EXPECT_EQ(tok.bos_id(), 319);
  EXPECT_EQ(tok.token_bytes(tok.bos_id()), 0);
  EXPECT_EQ(tok.token_bytes('a'), 1);
  for (int32_t id = 256; id < tok.num_regular(); ++id) EXPECT_GE(tok.token_bytes(id), 2);
  std::vector<int32_t> tb = token_bytes_table(tok);
  ASSERT_EQ(tb.size(), 320u);
  EXPECT_EQ(tb[319], 0);
  auto d = tok.decode(std::vector<int32_t>{tok.bos_id(), 'h', 'i'});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, "<|bos|>hi");
  EXPECT_FALSE(tok.decode(std::vector<int32_t>{320}).ok());
  EXPECT_FALSE(tok.decode(std::vector<int32_t>{-1}).ok());
}

TEST(Bpe, MergesCompressEnglish) {
  BpeTrainOptions o;
  o.vocab_size = 512;
  auto t = train_bpe_on_text(kEnglish, o);
  ASSERT_TRUE(t.ok());
  const size_t bpe_tokens = (*t)->encode(kEnglish).size();
  const size_t byte_tokens = make_byte_tokenizer()->encode(kEnglish).size();
  EXPECT_EQ(byte_tokens, std::string(kEnglish).size());
  EXPECT_LT(bpe_tokens * 2, byte_tokens) << bpe_tokens << " vs " << byte_tokens;
  // And on a sentence it never saw, still fewer tokens than bytes.
  const std::string unseen = "The fox and the dog walked through the weather together.";
  EXPECT_LT((*t)->encode(unseen).size(), unseen.size());
}

TEST(Bpe, RoundTripArbitraryBytes) {
  BpeTrainOptions o;
  o.vocab_size = 600;
  std::mt19937_64 rng(7);
  const std::string corpus = std::string(kEnglish) + random_bytes(rng, 20000);
  auto t = train_bpe_on_text(corpus, o);
  ASSERT_TRUE(t.ok());
  std::vector<std::unique_ptr<Tokenizer>> toks;
  toks.push_back(std::move(*t));
  toks.push_back(make_byte_tokenizer());
  for (const auto& tok : toks) {
    for (int trial = 0; trial < 300; ++trial) {
      const std::string s = random_bytes(rng, rng() % 500);
      std::vector<int32_t> ids = tok->encode(s);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok->num_regular());
      auto d = tok->decode(ids);
      ASSERT_TRUE(d.ok());
      ASSERT_EQ(*d, s) << tok->kind() << " trial " << trial;
    }
    // All 256 single bytes, and every byte value pair.
    std::string all;
    for (int c = 0; c < 256; ++c) all.push_back(static_cast<char>(c));
    EXPECT_EQ(*tok->decode(tok->encode(all)), all);
    std::string pairs;
    for (int c = 0; c < 256; ++c) {
      for (int e = 0; e < 256; e += 17) pairs += std::string{static_cast<char>(c), static_cast<char>(e)};
    }
    EXPECT_EQ(*tok->decode(tok->encode(pairs)), pairs);
  }
}

TEST(Bpe, LongWhitespaceRunsAreFastAndExact) {
  BpeTrainOptions o;
  o.vocab_size = 400;
  const std::string corpus = std::string(kEnglish) + std::string(5000, ' ') + "x" + std::string(3000, '\n');
  auto t = train_bpe_on_text(corpus, o);
  ASSERT_TRUE(t.ok());
  const std::string s = "a" + std::string(200000, ' ') + "b" + std::string(100000, '\t') + "\n" +
                        std::string(50000, '\n') + "end";
  // The process's CPU time, not the wall clock: other work on a busy machine does not count.
  const std::clock_t c0 = std::clock();
  std::vector<int32_t> ids = (*t)->encode(s);
  const double cpu_secs = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  EXPECT_EQ(*(*t)->decode(ids), s);
  EXPECT_LT(ids.size(), s.size() / 2);  // whitespace merges apply inside the run
  // About 0.1 s here; quadratic behaviour in the run length would take minutes.
  EXPECT_LT(cpu_secs, 20.0);
}

TEST(Bpe, SaveLoadRoundTrip) {
  BpeTrainOptions o;
  o.vocab_size = 350;
  auto t = train_bpe_on_text(kEnglish, o);
  ASSERT_TRUE(t.ok());
  const fs::path dir = fs::path(::testing::TempDir()) / ("vt_tok_bpe_save_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE((*t)->save((dir / kTokenizerFile).string()).ok());
  auto back = load_tokenizer(dir.string());
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ((*back)->kind(), "bpe");
  EXPECT_EQ((*back)->vocab_size(), 350);
  EXPECT_EQ((*back)->bos_id(), 349);
  for (int32_t id = 0; id < 350; ++id) EXPECT_EQ((*back)->token(id), (*t)->token(id));
  const std::string probe = "The weather, the fox \xff\xfe and 12345 dogs.";
  EXPECT_EQ((*back)->encode(probe), (*t)->encode(probe));
  // Byte tokenizer too.
  ASSERT_TRUE(make_byte_tokenizer()->save((dir / "bytes.json").string()).ok());
  auto bytes = load_tokenizer((dir / "bytes.json").string());
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  EXPECT_EQ((*bytes)->kind(), "bytes");
  EXPECT_EQ((*bytes)->vocab_size(), 257);
  // Corrupt files give errors, not crashes.
  std::ofstream(dir / "bad.json") << "{\"format\": \"vtrain-tokenizer\", \"version\": 1, \"kind\": \"bpe\"}";
  auto bad = load_tokenizer((dir / "bad.json").string());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("bad.json"), std::string::npos);
  // Numbers that are not integers the field holds (fuzz.parsers found 2.44e75 as a special's id).
  const std::string good = [&] {
    std::ifstream in(dir / kTokenizerFile);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"\"version\":1", "\"version\":1.5"},
           {"\"<|bos|>\":349", "\"<|bos|>\":2.44444e+75"},
           {"\"<|bos|>\":349", "\"<|bos|>\":18446744073709551615"},
           {"\"merges\":[[", "\"merges\":[[4294967296,"},
           {"\"merges\":[[", "\"merges\":[[1e40,"}}) {
    const size_t at = good.find(from);
    ASSERT_NE(at, std::string::npos) << from << " not in the saved file";
    std::string text = good;
    text.replace(at, from.size(), to);
    std::ofstream(dir / "number.json") << text;
    auto r = load_tokenizer((dir / "number.json").string());
    ASSERT_FALSE(r.ok()) << to;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
  }
  std::ofstream(dir / "garbage.json") << "not json";
  EXPECT_FALSE(load_tokenizer((dir / "garbage.json").string()).ok());
  EXPECT_FALSE(load_tokenizer((dir / "missing.json").string()).ok());
}

TEST(Bpe, TooSmallAndExhausted) {
  BpeTrainOptions o;
  o.vocab_size = 100;
  auto t = train_bpe_on_text(kEnglish, o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("257"), std::string::npos);
  o.vocab_size = 257;
  t = train_bpe_on_text(kEnglish, o);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ((*t)->vocab_size(), 257);
  EXPECT_TRUE((*t)->merges().empty());
  // A tiny corpus runs out of repeated pairs: fewer ids than asked, still consistent.
  o.vocab_size = 5000;
  t = train_bpe_on_text("abc abc", o);
  ASSERT_TRUE(t.ok());
  EXPECT_LT((*t)->vocab_size(), 5000);
  EXPECT_EQ((*t)->bos_id(), (*t)->vocab_size() - 1);
  EXPECT_EQ((*t)->encode("abc abc").size(), 2u);
}

}  // namespace
}  // namespace vt::data
