// `prepare`: the token stream (BOS + bytes per document, files in order), the documented val split,
// shard sizes, meta.json / token_bytes.bin / tokenizer.json, the overwrite rules, and input errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "data/loader.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"
#include "nlohmann/json.hpp"

namespace vt::data {
namespace {
namespace fs = std::filesystem;

fs::path root() {
  fs::path d = fs::path(::testing::TempDir()) / ("vt_prepare_test_" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

void write(const fs::path& p, const std::string& s) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << s;
}

std::vector<int32_t> read_split(const fs::path& d, const nlohmann::json& meta, const std::string& split) {
  std::vector<int32_t> all;
  for (const auto& n : meta[split]["shards"]) {
    auto t = read_shard((d / n.get<std::string>()).string());
    EXPECT_TRUE(t.ok()) << t.status();
    all.insert(all.end(), t->begin(), t->end());
  }
  return all;
}

nlohmann::json read_meta(const fs::path& d) {
  std::ifstream f(d / kMetaFile);
  return nlohmann::json::parse(f);
}

PrepareOptions opts(std::vector<std::string> in, const fs::path& out, std::string tok = "bytes") {
  PrepareOptions o;
  o.inputs = std::move(in);
  o.out_dir = out.string();
  o.tokenizer = std::move(tok);
  o.verbose = false;
  return o;
}

TEST(Prepare, BytesStreamSplitAndFiles) {
  const fs::path in = root() / "in1";
  fs::remove_all(in);
  const std::string a = "first document\n", b = std::string("second\0doc \xff!", 13), c = "";
  write(in / "b.txt", b);  // order is by name: a.txt, b.txt, c.txt
  write(in / "a.txt", a);
  write(in / "c.txt", c);
  write(in / ".hidden", "ignored");
  const fs::path out = root() / "out1";
  fs::remove_all(out);
  PrepareOptions o = opts({in.string()}, out);
  o.shard_tokens = 7;
  o.val_fraction = 0.2;
  ASSERT_TRUE(prepare_data(o).ok());

  const nlohmann::json meta = read_meta(out);
  std::vector<int32_t> expect;
  for (const std::string& doc : {a, b, c}) {
    expect.push_back(256);  // <|bos|>
    for (unsigned char ch : doc) expect.push_back(ch);
  }
  const int64_t N = static_cast<int64_t>(expect.size());
  const int64_t n_val = std::max<int64_t>(2, static_cast<int64_t>(std::ceil(0.2 * N)));
  std::vector<int32_t> train = read_split(out, meta, "train"), val = read_split(out, meta, "val");
  EXPECT_EQ(static_cast<int64_t>(val.size()), n_val);
  train.insert(train.end(), val.begin(), val.end());
  EXPECT_EQ(train, expect);
  EXPECT_EQ(meta["train"]["tokens"].get<int64_t>(), N - n_val);
  EXPECT_EQ(meta["val"]["tokens"].get<int64_t>(), n_val);
  EXPECT_EQ(meta["documents"].get<int>(), 3);
  EXPECT_EQ(meta["tokenizer"]["vocab_size"].get<int>(), 257);
  EXPECT_EQ(meta["tokenizer"]["bos_id"].get<int>(), 256);
  EXPECT_EQ(meta["train"]["shards"][0].get<std::string>(), "train_000000.bin");
  EXPECT_EQ(static_cast<int64_t>(meta["train"]["shards"].size()), (N - n_val + 6) / 7);
  for (const auto& n : meta["train"]["shards"]) {
    EXPECT_LE(read_shard_header((out / n.get<std::string>()).string())->num_tokens, 7);
  }
  // token_bytes.bin: int32 per id, 1 for bytes, 0 for <|bos|>.
  EXPECT_EQ(fs::file_size(out / kTokenBytesFile), 257u * 4);
  std::ifstream tb(out / kTokenBytesFile, std::ios::binary);
  std::vector<int32_t> lens(257);
  tb.read(reinterpret_cast<char*>(lens.data()), 257 * 4);
  EXPECT_EQ(lens[0], 1);
  EXPECT_EQ(lens[255], 1);
  EXPECT_EQ(lens[256], 0);
  auto tok = load_tokenizer(out.string());
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ((*tok)->kind(), "bytes");
  EXPECT_FALSE(fs::exists(root() / "out1.prepare-tmp"));
  // The loader reads it.
  auto dl = DataLoader::open(out.string(), "val");
  ASSERT_TRUE(dl.ok()) << dl.status();
  EXPECT_EQ(dl->tokens_per_epoch(), n_val);
}

TEST(Prepare, BpeDirectoryIsConsistent) {
  const fs::path in = root() / "in_bpe.txt";
  std::string text;
  const char* words[] = {"the", "cat", "sat", "on", "mat", "and", "dog", "log", "ran", "far"};
  for (int i = 0; i < 400; ++i) {
    text += words[(i * 7) % 10];
    text += (i % 13 == 0) ? ".\n" : " ";
    text += words[(i * i) % 10] + std::to_string(i % 37) + " ";
  }
  write(in, text);
  const fs::path out = root() / "out_bpe";
  fs::remove_all(out);
  PrepareOptions o = opts({in.string()}, out, "bpe:300");
  o.val_fraction = 0.1;
  ASSERT_TRUE(prepare_data(o).ok());
  const nlohmann::json meta = read_meta(out);
  EXPECT_EQ(meta["tokenizer"]["kind"], "bpe");
  EXPECT_EQ(meta["tokenizer"]["vocab_size"].get<int>(), 300);
  auto tok = load_tokenizer(out.string());
  ASSERT_TRUE(tok.ok()) << tok.status();
  std::vector<int32_t> all = read_split(out, meta, "train");
  std::vector<int32_t> val = read_split(out, meta, "val");
  all.insert(all.end(), val.begin(), val.end());
  ASSERT_EQ(all[0], (*tok)->bos_id());
  EXPECT_EQ(*(*tok)->decode(std::span<const int32_t>(all).subspan(1)), text);
  EXPECT_LT(all.size(), text.size() / 2);
}

TEST(Prepare, OverwriteRules) {
  const fs::path in = root() / "in_ow.txt";
  write(in, "some text for the overwrite test");
  const fs::path out = root() / "out_ow";
  fs::remove_all(out);
  write(out / "notes.txt", "user file");
  absl::Status s = prepare_data(opts({in.string()}, out));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--force"), std::string::npos) << s;
  EXPECT_TRUE(fs::exists(out / "notes.txt"));
  EXPECT_FALSE(fs::exists(out / kMetaFile));

  PrepareOptions f = opts({in.string()}, out);
  f.force = true;
  ASSERT_TRUE(prepare_data(f).ok());
  EXPECT_TRUE(fs::exists(out / "notes.txt"));  // --force replaces only prepare's files
  EXPECT_TRUE(fs::exists(out / kMetaFile));

  // Re-preparing a prepared dir is allowed and removes stale shards.
  write(out / "train_000099.bin", "stale");
  ASSERT_TRUE(prepare_data(opts({in.string()}, out)).ok());
  EXPECT_FALSE(fs::exists(out / "train_000099.bin"));
  EXPECT_TRUE(fs::exists(out / "notes.txt"));

  // A failing run (bad tokenizer) leaves the existing directory untouched.
  const auto before = fs::last_write_time(out / kMetaFile);
  EXPECT_FALSE(prepare_data(opts({in.string()}, out, "bpe:12")).ok());
  EXPECT_EQ(fs::last_write_time(out / kMetaFile), before);
  EXPECT_FALSE(fs::exists(root() / "out_ow.prepare-tmp"));

  // An output path that is a file.
  write(root() / "a_file", "x");
  EXPECT_FALSE(prepare_data(opts({in.string()}, root() / "a_file")).ok());
}

TEST(Prepare, InputErrors) {
  const fs::path out = root() / "out_err";
  fs::remove_all(out);
  absl::Status s = prepare_data(opts({(root() / "missing.txt").string()}, out));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("missing.txt"), std::string::npos) << s;
  EXPECT_FALSE(fs::exists(out));
  const fs::path empty_dir = root() / "empty_dir";
  fs::create_directories(empty_dir);
  EXPECT_FALSE(prepare_data(opts({empty_dir.string()}, out)).ok());
  const fs::path tiny = root() / "tiny.txt";
  write(tiny, "a");
  s = prepare_data(opts({tiny.string()}, out));  // 2 tokens: no room for train + val
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("too few"), std::string::npos) << s;
  PrepareOptions no_val = opts({tiny.string()}, out);
  no_val.val_fraction = 0;
  EXPECT_TRUE(prepare_data(no_val).ok());
  EXPECT_FALSE(prepare_data(opts({tiny.string()}, out, "wordpiece")).ok());
  EXPECT_FALSE(prepare_data(opts({tiny.string()}, out, "bpe:abc")).ok());
  s = prepare_data(opts({tiny.string()}, out, "tiktoken:" + (root() / "no.tiktoken").string()));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("no.tiktoken"), std::string::npos);
}

TEST(Prepare, ParseArgs) {
  auto o = parse_prepare_args({"--input", "a.txt", "b.txt", "--out", "d", "--tokenizer", "bpe:512",
                               "--val-fraction", "0.1", "--shard-tokens", "1000", "--input", "c"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->inputs, (std::vector<std::string>{"a.txt", "b.txt", "c"}));
  EXPECT_EQ(o->out_dir, "d");
  EXPECT_EQ(o->tokenizer, "bpe:512");
  EXPECT_DOUBLE_EQ(o->val_fraction, 0.1);
  EXPECT_EQ(o->shard_tokens, 1000);
  EXPECT_FALSE(parse_prepare_args({"--input", "a", "--out", "d"}).ok());          // no tokenizer
  EXPECT_FALSE(parse_prepare_args({"--out", "d", "--tokenizer", "bytes"}).ok());  // no input
  EXPECT_FALSE(parse_prepare_args({"--input", "a", "--out", "d", "--tokenizer", "bytes",
                                   "--val-fraction", "1.5"}).ok());
  EXPECT_FALSE(parse_prepare_args({"--input", "a", "--out", "d", "--tokenizer", "bytes",
                                   "--shard-tokens", "0"}).ok());
  EXPECT_FALSE(parse_prepare_args({"--input", "a", "--out", "d", "--tokenizer", "bytes", "--bogus"}).ok());
  EXPECT_FALSE(parse_prepare_args({"--input", "a", "--out"}).ok());
}

}  // namespace
}  // namespace vt::data
