// The recipe table (recipes.h) and `--recipe NAME` expansion.
#include "cli/recipes.h"

#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vt {

const std::vector<Recipe>& recipes() {
  static const std::vector<Recipe> table = {
      {"vtrain", "vtrain's own defaults (docs/model.md, docs/usage.md)", "ours", {}},
      {"official",
       "a block shape trained as the SAS paper's official code trains it: one AdamW for every "
       "parameter (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.1 but not on gains), 5% "
       "linear warmup then linear decay to 0, gradient clipping at 1, a ReLU MLP",
       "bobby-he/simplified_transformers config/train/train.yaml, train_utils.py "
       "(MyTrainer.create_optimizer), config/model/default.yaml",
       {{"optimizer", "adamw"},
        {"adamw-lr", "0.001"},
        {"weight-decay", "0.1"},
        {"warmup-frac", "0.05"},
        {"warmdown", "0.95"},
        {"final-lr-frac", "0"},
        {"max-grad-norm", "1"},
        {"mlp-act", "relu"}}},
      {"bov",
       "the Bank of Values paper's training: nanochat's window of w+1 keys, smear gate, Muon "
       "cautious weight decay 0.28 scaled as base_train scales it, momentum 0.85 -> 0.97 -> 0.90 "
       "(choose --value yourself; NorMuon is not implemented, docs/model.md)",
       "RiddleHe/nanochat research/bank_of_values: nanochat/model/gpt_base.py, "
       "scripts/base_train.py, nanochat/optim.py",
       {{"window-keys", "w+1"},
        {"smear-gate", "on"},
        {"muon-wd", "0.28"},
        {"muon-wd-style", "nanochat"},
        {"muon-wd-scale", "nanochat"},
        {"muon-momentum", "nanochat"},
        {"lr-batch-scale", "nanochat"},
        {"coef-optim", "paper"}}},
  };
  return table;
}

std::vector<std::string> recipe_names() {
  std::vector<std::string> names;
  for (const Recipe& r : recipes()) names.push_back(r.name);
  return names;
}

std::string recipes_help() {
  std::string s;
  for (const Recipe& r : recipes()) {
    absl::StrAppend(&s, r.name, ": ", r.help, " (", r.source, ")");
    if (!r.flags.empty()) {
      std::vector<std::string> fl;
      for (const auto& [k, v] : r.flags) fl.push_back(v.empty() ? "--" + k : "--" + k + " " + v);
      absl::StrAppend(&s, ": ", absl::StrJoin(fl, " "));
    }
    s += "; ";
  }
  if (!s.empty()) s.resize(s.size() - 2);
  return s;
}

namespace {

// The flag a command-line word names ("--name" or "--name=value"), or "" for a value.
std::string flag_name(const std::string& word) {
  if (word.rfind("--", 0) != 0 || word == "--") return "";
  const std::string name = word.substr(2);
  return name.substr(0, name.find('='));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> expand_recipe(const std::vector<std::string>& args,
                                                       std::vector<std::string>* applied) {
  std::string name;
  std::set<std::string> given;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string f = flag_name(args[i]);
    if (f.empty()) continue;
    given.insert(f);
    if (f != "recipe") continue;
    if (const auto eq = args[i].find('='); eq != std::string::npos) name = args[i].substr(eq + 1);
    else if (i + 1 < args.size()) name = args[i + 1];
  }
  std::vector<std::string> out = args;
  if (name.empty()) return out;  // no --recipe (or one without a value: the parser says so)
  const Recipe* recipe = nullptr;
  for (const Recipe& r : recipes())
    if (r.name == name) recipe = &r;
  if (recipe == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("--recipe ", name, " does not exist; recipes: ",
                                                   absl::StrJoin(recipe_names(), ", ")));
  for (const auto& [flag, value] : recipe->flags) {
    if (given.count(flag)) continue;
    out.push_back("--" + flag);
    if (!value.empty()) out.push_back(value);
    if (applied) applied->push_back(value.empty() ? "--" + flag : "--" + flag + " " + value);
  }
  return out;
}

}  // namespace vt
