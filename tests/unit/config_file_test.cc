// Run config files (cli/config_file.h) read through `vtrain train`'s flag table: keys become
// the flags they name, the command line wins, and an unknown key, a wrong type or a value out of
// range is refused naming the file, the line and the key; what config_text writes reads back.
#include "cli/config_file.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cli/train_flags.h"

namespace vt {
namespace {

class ConfigFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("vtrain_config_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string write(const std::string& text) {
    const std::string path = (dir_ / "run.toml").string();
    std::ofstream(path) << text;
    return path;
  }
  absl::StatusOr<std::vector<std::string>> read(const std::string& text,
                                                std::set<std::string> given = {}) {
    return config_file_args(train_command(), write(text), given);
  }
  std::filesystem::path dir_;
};

using Args = std::vector<std::string>;

TEST_F(ConfigFile, KeysBecomeTheirFlagsAtTheTopOrInTheirSection) {
  auto a = read(
      "steps = 20\n"
      "[schedule]\nmatrix-lr = 0.03\nwarmdown = 1\npolar-express = true\n"
      "[device]\ntable-offload = false\ngrad-sync = \"bf16\"\n"
      "[data]\ndata = \"/d\"\ndata-stage = [\"1e6:a=1\", \"2e6:a=0.5\"]\n");
  ASSERT_TRUE(a.ok()) << a.status();
  // In the file's key order as toml++ keeps it (sorted), a switch set to false left out.
  EXPECT_EQ(*a, (Args{"--data", "/d", "--data-stage", "1e6:a=1", "2e6:a=0.5", "--grad-sync",
                      "bf16", "--matrix-lr", "0.03", "--polar-express", "--warmdown", "1",
                      "--steps", "20"}));
}

TEST_F(ConfigFile, TheCommandLineWins) {
  auto a = read("[schedule]\nsteps = 20\nseed = 3\n", {"steps"});
  // seed is under [output] in --help: refused in [schedule].
  EXPECT_FALSE(a.ok());
  a = read("[schedule]\nsteps = 20\n[output]\nseed = 3\n", {"steps"});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (Args{"--seed", "3"}));
}

TEST_F(ConfigFile, UnknownKeyIsRefusedNamingTheFileLineAndKey) {
  const std::string path = write("[schedule]\nsteps = 2\nstepz = 3\n");
  auto a = config_file_args(train_command(), path, {});
  ASSERT_FALSE(a.ok());
  const std::string m(a.status().message());
  EXPECT_NE(m.find(path + ":3: key 'stepz' is not a flag of vtrain train"), std::string::npos) << m;
}

TEST_F(ConfigFile, WrongTypeIsRefusedNamingTheKeyAndTheFlag) {
  const std::string path = write("[schedule]\nsteps = \"100\"\n");
  auto a = config_file_args(train_command(), path, {});
  ASSERT_FALSE(a.ok());
  const std::string m(a.status().message());
  EXPECT_NE(m.find(path + ":2: key 'steps' is a string, expected an integer (the value of --steps)"),
            std::string::npos) << m;
  a = read("[schedule]\nsteps = 2.5\n");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(std::string(a.status().message()).find("a float, expected an integer"), std::string::npos);
  a = read("[schedule]\npolar-express = \"yes\"\n");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(std::string(a.status().message()).find("expected true or false"), std::string::npos);
}

TEST_F(ConfigFile, OutOfRangeIsRefusedAsTheFlagIs) {
  const std::string path = write("[schedule]\nsteps = 0\n");
  auto a = config_file_args(train_command(), path, {});
  ASSERT_FALSE(a.ok());
  const std::string m(a.status().message());
  EXPECT_NE(m.find(path + ":2: key 'steps': --steps 0: out of range, expected an integer in [1, "),
            std::string::npos) << m;
  a = read("[schedule]\noptimizer = \"sgd\"\n");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(std::string(a.status().message()).find("key 'optimizer': --optimizer sgd: expected one of muon, adamw"),
            std::string::npos) << a.status();
  a = read("[schedule]\nwarmdown = 1.5\n");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(std::string(a.status().message()).find("--warmdown 1.5: out of range"), std::string::npos);
}

TEST_F(ConfigFile, SectionsAreTheHelpHeadings) {
  auto a = read("[non-finite-values]\non-nonfinite = \"skip-step\"\n[blocks]\nblock = \"sas\"\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(*a, (Args{"--block", "sas", "--on-nonfinite", "skip-step"}));
  a = read("[training]\nsteps = 1\n");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(std::string(a.status().message()).find("section [training] is not one of vtrain train's"),
            std::string::npos) << a.status();
  a = read("config = \"other.toml\"\n");
  EXPECT_FALSE(a.ok());
}

TEST_F(ConfigFile, NotTomlIsRefusedNamingTheFile) {
  const std::string path = write("steps == 3\n");
  auto a = config_file_args(train_command(), path, {});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(std::string(a.status().message()).rfind(path + ":1: not a TOML file", 0), 0u)
      << a.status();
  EXPECT_FALSE(config_file_args(train_command(), (dir_ / "none.toml").string(), {}).ok());
}

TEST_F(ConfigFile, WrittenConfigReadsBack) {
  const std::vector<std::pair<std::string, nlohmann::json>> values = {
      {"steps", 20}, {"matrix-lr", 0.025}, {"adamw-lr", 1e-5}, {"polar-express", true},
      {"data", "/d"}, {"data-stage", nlohmann::json::array({"1e6:a=1"})}, {"seed", 9},
      {"grad-sync", "bf16"}};
  const std::string text = config_text(train_command(), values, "a header\nof two lines");
  EXPECT_EQ(text.rfind("# a header\n# of two lines\n", 0), 0u) << text;
  auto a = read(text);
  ASSERT_TRUE(a.ok()) << a.status() << "\n" << text;
  EXPECT_EQ(*a, (Args{"--data", "/d", "--data-stage", "1e6:a=1", "--grad-sync", "bf16",
                      "--seed", "9", "--adamw-lr", "1e-05", "--matrix-lr", "0.025",
                      "--polar-express", "--steps", "20"}))
      << text;
}

TEST(ConfigFileNames, SectionsAndGivenFlags) {
  EXPECT_EQ(config_section("non-finite values"), "non-finite-values");
  EXPECT_EQ(config_section("blocks (docs/model.md)"), "blocks");
  EXPECT_EQ(flags_given({"--steps", "3", "--seed=4", "x"}), (std::set<std::string>{"steps", "seed"}));
  EXPECT_EQ(config_path_in({"--steps", "3", "--config", "a.toml"}), "a.toml");
  EXPECT_EQ(config_path_in({"--config=b.toml"}), "b.toml");
  EXPECT_EQ(config_path_in({"--steps", "3"}), "");
}

}  // namespace
}  // namespace vt
