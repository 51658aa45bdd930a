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
};

absl::StatusOr<std::vector<CoreTask>> load_core_bundle(const std::string& dir, int max_per_task = -1);

// The YAML subset reader, exposed for tests: the `icl_tasks` list as string maps (a flow list
// value such as [0] is kept as its JSON array).
absl::StatusOr<std::vector<nlohmann::json>> parse_core_yaml(const std::string& text,
                                                            const std::string& path);

}  // namespace vt::eval
