// cli/recipes: `--recipe NAME` fills in the flags its row names and no others, flags given by hand
// win, an unknown recipe is refused with the list, and every row's flags exist in `vtrain train`
// with values its parser and the model-flag checks accept.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/model_flags.h"
#include "cli/recipes.h"
#include "cli/train_flags.h"

namespace vt {
namespace {

TEST(Recipes, DefaultFirstAndNamesUnique) {
  ASSERT_FALSE(recipes().empty());
  EXPECT_EQ(recipes()[0].name, "vtrain");
  EXPECT_TRUE(recipes()[0].flags.empty());
  std::vector<std::string> names = recipe_names();
  std::sort(names.begin(), names.end());
  EXPECT_EQ(std::adjacent_find(names.begin(), names.end()), names.end());
  for (const Recipe& r : recipes()) {
    EXPECT_FALSE(r.help.empty()) << r.name;
    EXPECT_FALSE(r.source.empty()) << r.name;
  }
}

TEST(Recipes, NoRecipeLeavesTheCommandLineAlone) {
  const std::vector<std::string> args = {"--data", "d", "--steps", "3"};
  std::vector<std::string> applied;
  auto out = expand_recipe(args, &applied);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, args);
  EXPECT_TRUE(applied.empty());
}

TEST(Recipes, UnknownRecipeIsRefusedWithTheList) {
  for (const std::vector<std::string> args :
       {std::vector<std::string>{"--recipe", "nope"}, std::vector<std::string>{"--recipe=nope"}}) {
    auto out = expand_recipe(args, nullptr);
    ASSERT_FALSE(out.ok());
    const std::string msg(out.status().message());
    EXPECT_NE(msg.find("--recipe nope does not exist"), std::string::npos) << msg;
    for (const std::string& n : recipe_names()) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  }
}

// Each recipe, alone: exactly its flags are added (in its order), and the result parses as a
// `vtrain train` command line whose model flags give a valid config.
TEST(Recipes, EveryRecipeExpandsToFlagsTrainAccepts) {
  for (const Recipe& r : recipes()) {
    SCOPED_TRACE(r.name);
    std::vector<std::string> applied;
    auto out = expand_recipe({"--data", "d", "--recipe", r.name}, &applied);
    ASSERT_TRUE(out.ok()) << out.status();
    std::vector<std::string> want = {"--data", "d", "--recipe", r.name};
    for (const auto& [k, v] : r.flags) {
      want.push_back("--" + k);
      if (!v.empty()) want.push_back(v);
    }
    EXPECT_EQ(*out, want);
    EXPECT_EQ(applied.size(), r.flags.size());
    auto f = Flags::parse(train_command(), *out);
    ASSERT_TRUE(f.ok()) << f.status();
    auto cfg = model_config_from_flags(*f);
    EXPECT_TRUE(cfg.ok()) << cfg.status();
  }
}

// A flag given by hand (either spelling) wins over the recipe's, and is not reported as applied.
TEST(Recipes, FlagsGivenByHandWin) {
  for (const Recipe& r : recipes()) {
    if (r.flags.empty()) continue;
    SCOPED_TRACE(r.name);
    const auto& [flag, value] = r.flags.front();
    std::vector<std::string> args = {"--recipe=" + r.name};
    if (value.empty()) args.push_back("--" + flag);
    else args.push_back("--" + flag + "=" + value + "0");  // a different value, by hand
    std::vector<std::string> applied;
    auto out = expand_recipe(args, &applied);
    ASSERT_TRUE(out.ok()) << out.status();
    int times = 0;
    for (const std::string& a : *out) times += a.rfind("--" + flag, 0) == 0;
    EXPECT_EQ(times, 1);
    EXPECT_EQ(applied.size(), r.flags.size() - 1);
  }
}

}  // namespace
}  // namespace vt
