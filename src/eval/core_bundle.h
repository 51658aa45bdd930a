// The DCLM CORE eval bundle as nanochat reads it (nanochat/scripts/base_eval.py):
//   DIR/core.yaml              `icl_tasks:` a list of {label, dataset_uri, num_fewshot: [k],
//                              icl_task_type: multiple_choice|schema|language_modeling,
//                              continuation_delimiter (default " ")}; other keys are ignored
//   DIR/eval_meta_data.csv     columns "Eval Task" (the label) and "Random baseline" (percent)
//   DIR/eval_data/<dataset_uri> one JSON object per line: multiple_choice {query, choices, gold},
//                              schema {context_options, continuation, gold},
//                              language_modeling {context, continuation}
// Each task's examples are shuffled with Python's random.Random(1337) and cut to max_per_task
// (> 0), as nanochat does. core.yaml is read by a small reader of the YAML this file uses
// (block lists of flat mappings, plain/quoted scalars, flow lists); anything else is an error
// naming the line.
#pragma once
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace vt::eval {

enum class CoreTaskType { kMultipleChoice, kSchema, kLanguageModeling };
const char* core_task_type_name(CoreTaskType t);

struct CoreTask {
  std::string label;
  std::string dataset_uri;
  CoreTaskType type = CoreTaskType::kMultipleChoice;
  int num_fewshot = 0;
  std::string delimiter = " ";
  double random_baseline = 0.0;  // percent
  std::vector<nlohmann::json> data;
  std::vector<int64_t> lines;  // the line of data[i] in data_path (shuffled along with it)
  std::string data_path;
};

// Declared ranges of a bundle's numbers (refused outside, naming the file and the field).
inline constexpr int kMaxCoreFewshot = 1000;  // num_fewshot in [0, 1000]
// Random baseline (percent) in [0, 100): 100 would divide the centered accuracy by zero.

// Checks one example of a task of `type` (nanochat's fields): multiple_choice {query, choices,
// gold}, schema {context_options, continuation, gold}, language_modeling {context,
// continuation}. Text fields are strings (or numbers/booleans, rendered as Python's str() does),
// lists are non-empty, gold is an integer index into the list. The error names the field and
// its allowed range.
absl::Status check_core_row(CoreTaskType type, const nlohmann::json& row);
// Parses a task's JSON lines: one object per non-blank line, each passing check_core_row; the
// error names path:line. `lines` (when given) receives each row's line number.
absl::StatusOr<std::vector<nlohmann::json>> parse_core_rows(const std::string& text,
                                                             CoreTaskType type,
                                                             const std::string& path,
                                                             std::vector<int64_t>* lines = nullptr);

absl::StatusOr<std::vector<CoreTask>> load_core_bundle(const std::string& dir, int max_per_task = -1);

// The YAML subset reader, exposed for tests: the `icl_tasks` list as string maps (a flow list
// value such as [0] is kept as its JSON array).
absl::StatusOr<std::vector<nlohmann::json>> parse_core_yaml(const std::string& text,
                                                            const std::string& path);

}  // namespace vt::eval
