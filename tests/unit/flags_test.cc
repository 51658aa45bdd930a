// The shared flag parser (core/flags.h): types, ranges, choices, lists, required flags, help and
// the refusals that keep bad numbers out of the commands.
#include "core/flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace vt {
namespace {

CommandSpec test_command() {
  CommandSpec c;
  c.name = "vtrain test";
  c.synopsis = "vtrain test --need X [options]";
  c.max_positional = 1;
  c.flags = {
      required(text_flag("need", "", "a required path")),
      flag_heading("numbers"),
      int_flag("count", 4, 1, 100, "an integer"),
      num_flag("rate", 0.5, 0, 1, "a fraction"),
      no_default(int_flag("width", 0, 2, 64, "only when given")),
      choice_flag("mode", "a", {"a", "b"}, "a choice"),
      bool_flag("flag", "a switch"),
      list_flag("inputs", "several values"),
  };
  return c;
}

absl::StatusOr<Flags> parse(std::vector<std::string> args) {
  return Flags::parse(test_command(), args);
}

std::string error_of(std::vector<std::string> args) {
  auto f = parse(std::move(args));
  EXPECT_FALSE(f.ok());
  return f.ok() ? "" : std::string(f.status().message());
}

TEST(Flags, DefaultsAndValues) {
  // A list takes the values up to the next flag: a bare argument after it belongs to it.
  auto f = parse({"--need", "p", "--count=7", "--rate", "0.25", "--mode", "b", "--flag", "pos",
                  "--inputs", "x", "y", "--inputs", "z"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->get_string("need"), "p");
  EXPECT_EQ(f->get_int("count"), 7);
  EXPECT_DOUBLE_EQ(f->get_double("rate"), 0.25);
  EXPECT_EQ(f->get_string("mode"), "b");
  EXPECT_TRUE(f->get_bool("flag"));
  EXPECT_EQ(f->get_list("inputs"), (std::vector<std::string>{"x", "y", "z"}));
  EXPECT_EQ(f->positional(), (std::vector<std::string>{"pos"}));
  EXPECT_FALSE(f->has("width"));

  auto d = parse({"--need", "p"});
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->get_int("count"), 4);
  EXPECT_DOUBLE_EQ(d->get_double("rate"), 0.5);
  EXPECT_EQ(d->get_string("mode"), "a");
  EXPECT_FALSE(d->get_bool("flag"));
  EXPECT_TRUE(d->get_list("inputs").empty());
}

TEST(Flags, IntegersMayBeWrittenInScientificNotation) {
  auto f = parse({"--need", "p", "--count", "1e2"});
  ASSERT_TRUE(f.ok()) << f.status();
  EXPECT_EQ(f->get_int("count"), 100);
  EXPECT_NE(error_of({"--need", "p", "--count", "2.5"}).find("expected an integer"), std::string::npos);
}

// Integers: decimal digits with an optional '-', or a whole number in exponent form; numbers:
// decimal notation (docs/design.md, "Numbers on the command line").
TEST(Flags, OnlyDecimalSpellingsAreNumbers) {
  for (const char* ok : {"2", "002", "2e0", "2E1", "1.5e1", "1e+1"}) {
    auto f = parse({"--need", "p", "--count", ok});
    EXPECT_TRUE(f.ok()) << ok << ": " << f.status();
  }
  for (const char* bad : {"0x2", " 2", "2 ", "+2", "2.0", "25e-1", "2e", "e2", "", "-", "1_000", "２"})
    EXPECT_NE(error_of({"--need", "p", "--count", bad}).find("expected an integer"), std::string::npos)
        << "'" << bad << "'";
  for (const char* ok : {"0.5", ".5", "1.", "5e-1", "0", "1", "1E0"}) {
    auto f = parse({"--need", "p", "--rate", ok});
    EXPECT_TRUE(f.ok()) << ok << ": " << f.status();
  }
  for (const char* bad : {"0x1p-1", " 0.5", "+0.5", "0.5 ", ".", "e1", "infinity", "-nan"})
    EXPECT_NE(error_of({"--need", "p", "--rate", bad}).find("expected a finite number"), std::string::npos)
        << "'" << bad << "'";
}

TEST(Flags, RefusalsNameTheFlagAndTheLimit) {
  EXPECT_EQ(error_of({"--need", "p", "--count", "0"}),
            "--count 0: out of range, expected an integer in [1, 100]");
  EXPECT_EQ(error_of({"--need", "p", "--count", "4294967296"}),
            "--count 4294967296: out of range, expected an integer in [1, 100]");
  EXPECT_EQ(error_of({"--need", "p", "--count", "-5"}),
            "--count -5: out of range, expected an integer in [1, 100]");
  EXPECT_EQ(error_of({"--need", "p", "--count", "many"}),
            "--count many: expected an integer in [1, 100] (decimal digits, or a whole number like "
            "2e9)");
  EXPECT_EQ(error_of({"--need", "p", "--rate", "nan"}),
            "--rate nan: expected a finite number in [0, 1] (decimal, e.g. 0.5 or 3e-4)");
  EXPECT_EQ(error_of({"--need", "p", "--rate", "inf"}),
            "--rate inf: expected a finite number in [0, 1] (decimal, e.g. 0.5 or 3e-4)");
  EXPECT_EQ(error_of({"--need", "p", "--rate", "1.5"}),
            "--rate 1.5: out of range, expected a number in [0, 1]");
  EXPECT_EQ(error_of({"--need", "p", "--width", "1"}),
            "--width 1: out of range, expected an integer in [2, 64]");
  EXPECT_EQ(error_of({"--need", "p", "--mode", "c"}), "--mode c: expected one of a, b");
  EXPECT_EQ(error_of({"--need", "p", "--bogus"}), "unknown flag --bogus (see vtrain test --help)");
  EXPECT_EQ(error_of({"--need", "p", "--count", "3", "--count", "4"}), "--count is given twice");
  EXPECT_EQ(error_of({"--need", "p", "--count"}), "--count needs a value");
  EXPECT_EQ(error_of({"--need", "--count", "3"}), "--need needs a value");
  EXPECT_EQ(error_of({"--need", ""}), "--need needs a non-empty value");
  EXPECT_EQ(error_of({"--need", "p", "--flag=1"}), "--flag takes no value");
  EXPECT_EQ(error_of({"--count", "3"}), "--need is required (see vtrain test --help)");
  EXPECT_NE(error_of({"--need", "p", "one", "two"}).find("unexpected argument 'two'"), std::string::npos);
}

TEST(Flags, HelpAnywhereWinsAndUsageShowsTheLimits) {
  auto f = parse({"--count", "0", "--help"});  // help even with bad or missing flags
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->help_requested());
  const std::string u = usage(test_command());
  EXPECT_NE(u.find("usage: vtrain test --need X [options]"), std::string::npos);
  EXPECT_NE(u.find("numbers:"), std::string::npos);
  EXPECT_NE(u.find("--count N"), std::string::npos);
  EXPECT_NE(u.find("(default 4, range [1, 100])"), std::string::npos);
  EXPECT_NE(u.find("--mode a|b"), std::string::npos);
  EXPECT_NE(u.find("[required]"), std::string::npos);
  EXPECT_NE(u.find("only when given (range [2, 64])"), std::string::npos);
  for (size_t start = 0, end; start < u.size(); start = end + 1) {
    end = u.find('\n', start);
    EXPECT_LE(end - start, 100u) << "a --help line is wider than 100 columns";
  }
}

}  // namespace
}  // namespace vt
