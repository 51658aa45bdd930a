// One CORE example as nanochat's core_eval.py builds it: the few-shot examples (Python's
// random.Random(1234 + index).sample of the other examples), the prompts rendered as its Jinja
// templates render them, each prompt tokenized with <|bos|> prepended, the span of tokens that is
// scored (multiple_choice: after the choices' common prefix; schema: the common suffix;
// language_modeling: what the prompt with the continuation adds to the prompt without it, which
// must be its prefix), and left-cropping to the model's sequence length.
//   multiple_choice:  per choice c: for each shot "query<d>choices[gold]\n\n", then "query<d>c"
//   schema:           per context option o: shots "context_options[gold]<d>continuation\n\n",
//                     then "o<d>continuation"
//   language_modeling: shots "strip(context)<d>continuation\n\n", then "strip(context)<d>" with
//                     and without the continuation; the one without is strip()ped
// strip() is Python's str.strip (Unicode whitespace).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"
#include "eval/core_bundle.h"

namespace vt::eval {

struct CoreExample {
  std::vector<std::vector<int32_t>> rows;  // one token row per prompt (<|bos|> first)
  std::vector<int> start, end;             // scored targets are tokens [start, end) of each row
  int gold = 0;                            // multiple_choice / schema: the right row
};

// Python's str.strip() on UTF-8 text.
std::string py_strip(const std::string& s);

// The prompts of example `index` of `task`.
absl::StatusOr<std::vector<std::string>> render_core_prompts(const CoreTask& task, int64_t index);

// Rows and spans of example `index`, cropped from the left to max_len tokens.
absl::StatusOr<CoreExample> build_core_example(const CoreTask& task, int64_t index,
                                               const data::Tokenizer& tok, int max_len);

}  // namespace vt::eval
