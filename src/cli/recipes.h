// Recipes: named bundles of `vtrain train` flags that train a model the way a paper did
// (`--recipe NAME`). A recipe only fills in flags the command line leaves out: every flag given
// by hand wins, and the banner names what the recipe set. The table, each row with its source,
// is recipes.cc; docs/usage.md "Recipes" describes them.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace vt {

struct Recipe {
  std::string name;
  std::string help;    // one line: what it reproduces
  std::string source;  // the paper section / official file its values come from
  // (flag, value) pairs; an empty value is a boolean flag switched on. Prefer choice flags
  // (on|off) for switches, so a user can turn one back off by hand.
  std::vector<std::pair<std::string, std::string>> flags;
};

// Every recipe, the default ("vtrain": no flags) first.
const std::vector<Recipe>& recipes();
std::vector<std::string> recipe_names();
// "name: help (source)" lines for --help.
std::string recipes_help();

// The command line `args` (flags only, after the command) with `--recipe NAME` expanded: each
// flag of the recipe that `args` does not give is appended. `applied` receives the flags the
// recipe set, as "--flag value" strings. An unknown recipe is refused with the list.
absl::StatusOr<std::vector<std::string>> expand_recipe(const std::vector<std::string>& args,
                                                       std::vector<std::string>* applied);

}  // namespace vt
