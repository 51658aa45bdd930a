// Fuzz target: the rows of a CORE task (eval/core_bundle.h parse_core_rows, the JSON-lines file a
// bundle's dataset_uri names) for each task type, and the prompts of the rows that pass (the
// rendering and tokenizing of eval/core_prompts.h with the byte tokenizer, cropped to a short
// context). A bad row is an error status naming path:line; an accepted row must render.
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "eval/core_bundle.h"
#include "eval/core_prompts.h"
#include "fuzz_util.h"

using namespace vt;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) {
    fuzz::write_text(dir + "/multiple_choice",
                     "{\"query\": \"Q: 2+2=\", \"choices\": [\"4\", \"five\"], \"gold\": 0}\n"
                     "{\"query\": \"Q: 1+1=\", \"choices\": [\"2\", \"3\", 4], \"gold\": 2}\n");
    fuzz::write_text(dir + "/schema",
                     "{\"context_options\": [\"The cat\", \"A dog\"], \"continuation\": \"ran\", \"gold\": 1}\n\n"
                     "{\"context_options\": [\"x\"], \"continuation\": \"y\", \"gold\": 0}\n");
    fuzz::write_text(dir + "/language_modeling",
                     "{\"context\": \"What is up?\", \"continuation\": \" sky\"}\n"
                     "{\"context\": \"a\", \"continuation\": \"b\"}\n");
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::unique_ptr<data::Tokenizer> tok = data::make_byte_tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (eval::CoreTaskType type : {eval::CoreTaskType::kMultipleChoice, eval::CoreTaskType::kSchema,
                                  eval::CoreTaskType::kLanguageModeling}) {
    eval::CoreTask task;
    task.label = "fuzz";
    task.type = type;
    auto rows = eval::parse_core_rows(text, type, "fuzz.jsonl", &task.lines);
    if (!rows.ok()) continue;
    task.data = *std::move(rows);
    task.data_path = "fuzz.jsonl";
    if (task.lines.size() != task.data.size()) std::abort();
    task.num_fewshot = task.data.size() > 1 ? 1 : 0;
    for (int64_t i = 0; i < static_cast<int64_t>(task.data.size()) && i < 8; ++i) {
      if (!eval::check_core_row(type, task.data[i]).ok()) std::abort();  // accepted, then refused
      (void)eval::build_core_example(task, i, *tok, 48);
    }
  }
  return 0;
}
