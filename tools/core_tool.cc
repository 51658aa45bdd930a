// core_tool: the CORE evaluation's building blocks from outside, for tests.
//   core_tool pyrandom --seed S --shuffle N             JSON list: random.Random(S).shuffle(range(N))
//   core_tool pyrandom --seed S --sample N K            JSON list: random.Random(S).sample(range(N), K)
//   core_tool prompts --core DIR --tokenizer TOK [--seq-len T] [--max-per-task N]
//             one JSON line per example: task, index, prompts, rows, start, end, gold
// TOK is `bytes`, a data directory or a tokenizer.json. Errors: message on stderr, exit 1.
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "data/tokenizer.h"
#include "data/tokenizer_files.h"
#include "eval/core_bundle.h"
#include "eval/core_prompts.h"
#include "eval/py_random.h"
#include "nlohmann/json.hpp"

namespace {

int fail(const std::string& msg) {
  std::fprintf(stderr, "core_tool: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: core_tool pyrandom|prompts ...");
  std::map<std::string, std::vector<std::string>> flags;
  std::string cur;
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--", 0) == 0) {
      cur = a;
      flags[cur];
    } else {
      flags[cur].push_back(a);
    }
  }
  auto num = [&](const std::string& k, int64_t def, int at = 0) {
    int64_t v = def;
    if (flags.count(k) && static_cast<int>(flags[k].size()) > at) (void)absl::SimpleAtoi(flags[k][at], &v);
    return v;
  };
  const std::string cmd = argv[1];
  if (cmd == "pyrandom") {
    vt::eval::PyRandom rng(static_cast<uint64_t>(num("--seed", 0)));
    std::vector<int64_t> v;
    if (flags.count("--shuffle")) {
      for (int64_t i = 0; i < num("--shuffle", 0); ++i) v.push_back(i);
      rng.shuffle(v);
    } else {
      std::vector<int64_t> pop;
      for (int64_t i = 0; i < num("--sample", 0, 0); ++i) pop.push_back(i);
      v = rng.sample(pop, num("--sample", 0, 1));
    }
    std::printf("%s\n", nlohmann::json(v).dump().c_str());
    return 0;
  }
  if (cmd == "prompts") {
    const std::string spec = flags.count("--tokenizer") ? flags["--tokenizer"].at(0) : "bytes";
    auto tok = spec == "bytes" ? absl::StatusOr<std::unique_ptr<vt::data::Tokenizer>>(vt::data::make_byte_tokenizer())
                               : vt::data::load_tokenizer(spec);
    if (!tok.ok()) return fail(std::string(tok.status().message()));
    if (!flags.count("--core")) return fail("prompts needs --core DIR");
    auto tasks = vt::eval::load_core_bundle(flags["--core"].at(0), static_cast<int>(num("--max-per-task", -1)));
    if (!tasks.ok()) return fail(std::string(tasks.status().message()));
    for (const auto& t : *tasks) {
      for (int64_t i = 0; i < static_cast<int64_t>(t.data.size()); ++i) {
        auto prompts = vt::eval::render_core_prompts(t, i);
        if (!prompts.ok()) return fail(std::string(prompts.status().message()));
        auto ex = vt::eval::build_core_example(t, i, **tok, static_cast<int>(num("--seq-len", 1 << 20)));
        if (!ex.ok()) return fail(std::string(ex.status().message()));
        nlohmann::json j = {{"task", t.label}, {"index", i}, {"item", t.data[i]}, {"prompts", *prompts},
                            {"rows", ex->rows}, {"start", ex->start}, {"end", ex->end}, {"gold", ex->gold}};
        std::printf("%s\n", j.dump().c_str());
      }
    }
    return 0;
  }
  return fail("unknown command " + cmd);
}
