// data_tool: a small driver over src/data for tests and quick inspection.
//   data_tool write-shard --out FILE --vocab V [--in TOKENS.txt]     (whitespace-separated ids; stdin if no --in)
//   data_tool read-shard FILE                                        (JSON: num_tokens, token_width, tokens)
//   data_tool train-bpe --input FILE [FILE ...] --vocab N --out TOKENIZER.json [--quiet]
//   data_tool encode --tokenizer TOK --input FILE                    (ids, space-separated, on stdout)
//   data_tool encode-docs --tokenizer TOK --docs FILE [--threads N] [--repeat R] [--out IDS]
//             documents encoded in parallel (OpenMP); JSON {bytes, tokens, docs, seconds: [per repeat]};
//             --out gets, per document, a uint32 count then its uint32 ids
//   data_tool train-bpe --docs FILE --vocab N --out TOKENIZER.json [--threads N]  (as below, documents)
// A docs FILE holds documents as (uint32 little-endian byte length, bytes) records.
//   data_tool decode --tokenizer TOK --ids FILE --out FILE           (raw bytes)
//   data_tool hf-tokenizer --tokenizer TOK --out DIR [--max-length N]
//             DIR/tokenizer.json + tokenizer_config.json, as `vtrain export` writes them
//   data_tool prepare ARGS...                                        (as `vtrain prepare`)
//   data_tool batches --data DIR [--split train] --rows B --seq T --dp D --steps N
//             [--shuffle --seed S] [--state-in FILE] [--state-out FILE]  (JSON line per step and rank)
// TOK is `bytes`, `tiktoken:FILE`, a data directory or a tokenizer.json. Errors: message on stderr, exit 1.
#include <omp.h>

#include <chrono>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "data/bpe_trainer.h"
#include "data/hf_tokenizer.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shards.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"

namespace {
using vt::data::Tokenizer;

struct Args {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> flags;
  bool has(const std::string& k) const { return flags.count(k) > 0; }
  std::string get(const std::string& k, const std::string& def = "") const {
    auto it = flags.find(k);
    return it == flags.end() || it->second.empty() ? def : it->second[0];
  }
  int64_t get_int(const std::string& k, int64_t def) const {
    int64_t v = def;
    if (has(k) && !absl::SimpleAtoi(get(k), &v)) {
      std::fprintf(stderr, "data_tool: %s expects an integer\n", k.c_str());
      std::exit(1);
    }
    return v;
  }
};

// --flag value [value ...] ; flags without values (next starts with --) get an empty list.
Args parse(int argc, char** argv, int start) {
  Args a;
  std::string cur;
  for (int i = start; i < argc; ++i) {
    std::string s = argv[i];
    if (s.rfind("--", 0) == 0) {
      cur = s;
      a.flags[cur];
    } else if (!cur.empty()) {
      a.flags[cur].push_back(s);
    } else {
      a.positional.push_back(s);
    }
  }
  return a;
}

int fail(const absl::Status& s) {
  std::fprintf(stderr, "data_tool: %s\n", std::string(s.message()).c_str());
  return 1;
}

absl::StatusOr<std::string> slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

absl::StatusOr<std::unique_ptr<Tokenizer>> get_tokenizer(const std::string& spec) {
  if (spec == "bytes") return vt::data::make_byte_tokenizer();
  if (spec.rfind("tiktoken:", 0) == 0) return vt::data::load_tiktoken(spec.substr(9));
  return vt::data::load_tokenizer(spec);
}

int cmd_write_shard(const Args& a) {
  std::string text;
  if (a.has("--in")) {
    auto t = slurp(a.get("--in"));
    if (!t.ok()) return fail(t.status());
    text = *t;
  } else {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    text = ss.str();
  }
  std::istringstream in(text);
  std::vector<int32_t> toks;
  int64_t v;
  while (in >> v) toks.push_back(static_cast<int32_t>(v));
  absl::Status s = vt::data::write_shard(a.get("--out"), toks, a.get_int("--vocab", 0));
  return s.ok() ? 0 : fail(s);
}

int cmd_read_shard(const Args& a) {
  if (a.positional.empty()) return fail(absl::InvalidArgumentError("read-shard FILE"));
  auto h = vt::data::read_shard_header(a.positional[0]);
  if (!h.ok()) return fail(h.status());
  auto toks = vt::data::read_shard(a.positional[0]);
  if (!toks.ok()) return fail(toks.status());
  nlohmann::json j = {{"num_tokens", h->num_tokens}, {"token_width", h->token_width}, {"tokens", *toks}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

absl::StatusOr<std::vector<std::string>> read_docs(const std::string& path) {
  VT_ASSIGN_OR_RETURN(std::string all, slurp(path));
  std::vector<std::string> docs;
  for (size_t p = 0; p < all.size();) {
    uint32_t n = 0;
    if (p + 4 > all.size()) return absl::DataLossError(path + ": truncated docs file");
    std::memcpy(&n, all.data() + p, 4);
    if (p + 4 + n > all.size()) return absl::DataLossError(path + ": truncated docs file");
    docs.emplace_back(all, p + 4, n);
    p += 4 + n;
  }
  return docs;
}

int cmd_train_bpe(const Args& a) {
  auto pretok = vt::data::PreTokenizer::create(vt::data::cl100k_pattern());
  if (!pretok.ok()) return fail(pretok.status());
  vt::data::ChunkCounter counter(*pretok);
  int64_t bytes = 0;
  std::vector<std::string> docs;
  if (a.has("--docs")) {
    auto d = read_docs(a.get("--docs"));
    if (!d.ok()) return fail(d.status());
    docs = std::move(*d);
  } else {
    auto it = a.flags.find("--input");
    if (it == a.flags.end()) return fail(absl::InvalidArgumentError("train-bpe needs --input FILE or --docs FILE"));
    for (const std::string& f : it->second) {
      auto t = slurp(f);
      if (!t.ok()) return fail(t.status());
      docs.push_back(std::move(*t));
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  for (const std::string& d : docs) bytes += static_cast<int64_t>(d.size());
  vt::data::count_chunks_parallel(counter, docs, static_cast<int>(a.get_int("--threads", 0)));
  const auto t1 = std::chrono::steady_clock::now();
  vt::data::BpeTrainOptions o;
  o.vocab_size = static_cast<int32_t>(a.get_int("--vocab", 4096));
  o.verbose = !a.has("--quiet");
  auto tok = vt::data::train_bpe(counter, o);
  if (!tok.ok()) return fail(tok.status());
  const auto t2 = std::chrono::steady_clock::now();
  absl::Status s = (*tok)->save(a.get("--out"));
  if (!s.ok()) return fail(s);
  nlohmann::json j = {{"bytes", bytes},
                      {"unique_chunks", counter.counts().size()},
                      {"vocab_size", (*tok)->vocab_size()},
                      {"merges", (*tok)->merges().size()},
                      {"split_seconds", std::chrono::duration<double>(t1 - t0).count()},
                      {"train_seconds", std::chrono::duration<double>(t2 - t1).count()}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int cmd_encode(const Args& a) {
  auto tok = get_tokenizer(a.get("--tokenizer"));
  if (!tok.ok()) return fail(tok.status());
  auto text = slurp(a.get("--input"));
  if (!text.ok()) return fail(text.status());
  std::vector<int32_t> ids = (*tok)->encode(*text);
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) absl::StrAppend(&out, i ? " " : "", ids[i]);
  std::printf("%s\n", out.c_str());
  return 0;
}

int cmd_encode_docs(const Args& a) {
  auto tok = get_tokenizer(a.get("--tokenizer"));
  if (!tok.ok()) return fail(tok.status());
  auto docs = read_docs(a.get("--docs"));
  if (!docs.ok()) return fail(docs.status());
  const int threads = static_cast<int>(a.get_int("--threads", omp_get_max_threads()));
  std::vector<std::vector<int32_t>> ids(docs->size());
  nlohmann::json secs = nlohmann::json::array();
  for (int64_t r = 0; r < a.get_int("--repeat", 1); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
    for (int64_t i = 0; i < static_cast<int64_t>(docs->size()); ++i) ids[i] = (*tok)->encode((*docs)[i]);
    secs.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  int64_t bytes = 0, tokens = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    bytes += static_cast<int64_t>((*docs)[i].size());
    tokens += static_cast<int64_t>(ids[i].size());
  }
  if (a.has("--out")) {
    std::ofstream f(a.get("--out"), std::ios::binary | std::ios::trunc);
    for (const auto& v : ids) {
      const uint32_t n = static_cast<uint32_t>(v.size());
      f.write(reinterpret_cast<const char*>(&n), 4);
      f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * 4));
    }
    if (!f.flush()) return fail(absl::InternalError("cannot write --out"));
  }
  nlohmann::json j = {{"bytes", bytes}, {"tokens", tokens}, {"docs", ids.size()}, {"threads", threads},
                      {"seconds", secs}};
  std::printf("%s\n", j.dump().c_str());
  return 0;
}

int cmd_decode(const Args& a) {
  auto tok = get_tokenizer(a.get("--tokenizer"));
  if (!tok.ok()) return fail(tok.status());
  auto text = slurp(a.get("--ids"));
  if (!text.ok()) return fail(text.status());
  std::istringstream in(*text);
  std::vector<int32_t> ids;
  int64_t v;
  while (in >> v) ids.push_back(static_cast<int32_t>(v));
  auto s = (*tok)->decode(ids);
  if (!s.ok()) return fail(s.status());
  std::ofstream f(a.get("--out"), std::ios::binary | std::ios::trunc);
  f << *s;
  return f ? 0 : fail(absl::InternalError("cannot write --out"));
}

int cmd_batches(const Args& a) {
  vt::data::LoaderOptions lo;
  lo.shuffle_shards = a.has("--shuffle");
  lo.seed = static_cast<uint64_t>(a.get_int("--seed", 0));
  auto dl = vt::data::DataLoader::open(a.get("--data"), a.get("--split", "train"), lo);
  if (!dl.ok()) return fail(dl.status());
  if (a.has("--state-in")) {
    auto t = slurp(a.get("--state-in"));
    if (!t.ok()) return fail(t.status());
    absl::Status s = dl->load_state_json(nlohmann::json::parse(*t));
    if (!s.ok()) return fail(s);
  }
  const int64_t rows = a.get_int("--rows", 1), seq = a.get_int("--seq", 8);
  const int dp = static_cast<int>(a.get_int("--dp", 1));
  for (int64_t step = 0; step < a.get_int("--steps", 1); ++step) {
    // Every rank reads from the same starting state, as separate processes would.
    const nlohmann::json before = dl->state_json();
    for (int r = 0; r < dp; ++r) {
      if (r > 0) (void)dl->load_state_json(before);
      auto b = dl->next_batch(rows, seq, r, dp);
      if (!b.ok()) return fail(b.status());
      const int64_t n = b->inputs.numel();
      nlohmann::json j = {{"step", step}, {"rank", r},
                          {"inputs", std::vector<int32_t>(b->inputs.i32(), b->inputs.i32() + n)},
                          {"targets", std::vector<int32_t>(b->targets.i32(), b->targets.i32() + n)},
                          {"state", dl->state_json()}};
      std::printf("%s\n", j.dump().c_str());
    }
  }
  if (a.has("--state-out")) {
    std::ofstream f(a.get("--state-out"));
    f << dl->state_json().dump() << "\n";
  }
  return 0;
}

}  // namespace
int cmd_hf_tokenizer(const Args& a) {
  auto tok = get_tokenizer(a.get("--tokenizer"));
  if (!tok.ok()) return fail(tok.status());
  std::error_code ec;
  std::filesystem::create_directories(a.get("--out"), ec);
  absl::Status s = vt::data::write_hf_tokenizer(**tok, a.get_int("--max-length", 1024), a.get("--out"));
  return s.ok() ? 0 : fail(s);
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: data_tool write-shard|read-shard|train-bpe|encode|decode|hf-tokenizer|prepare|batches ...\n");
    return 1;
  }
  const std::string cmd = argv[1];
  if (cmd == "prepare") {
    std::vector<std::string> args(argv + 2, argv + argc);
    auto o = vt::data::parse_prepare_args(args);
    if (!o.ok()) return fail(o.status());
    absl::Status s = vt::data::prepare_data(*o);
    return s.ok() ? 0 : fail(s);
  }
  const Args a = parse(argc, argv, 2);
  if (cmd == "write-shard") return cmd_write_shard(a);
  if (cmd == "read-shard") return cmd_read_shard(a);
  if (cmd == "train-bpe") return cmd_train_bpe(a);
  if (cmd == "encode") return cmd_encode(a);
  if (cmd == "encode-docs") return cmd_encode_docs(a);
  if (cmd == "decode") return cmd_decode(a);
  if (cmd == "hf-tokenizer") return cmd_hf_tokenizer(a);
  if (cmd == "batches") return cmd_batches(a);
  return fail(absl::InvalidArgumentError("unknown command " + cmd));
}
