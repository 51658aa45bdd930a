// Command-line flags with declared types and limits, shared by every vtrain command and tool.
// A command declares its flags once (a CommandSpec: name, type, default, range or choices, help
// line, heading); parse() accepts `--name value`, `--name=value`, boolean `--name` and list flags
// (`--input a b c`, values up to the next `--flag`), and refuses, naming the flag and the limit,
// anything it cannot prove valid: an unknown flag, a missing value, a number that does not parse,
// is not finite, or lies outside its range, a value not among the choices, a flag given twice.
// After a successful parse the getters cannot fail. `--help`/`-h` anywhere sets help_requested()
// and usage() renders the whole table, so `vtrain CMD --help` is generated from the same spec that
// checks the input (docs/design.md, "CLI").
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt {

enum class FlagType { kBool, kInt, kNumber, kText, kChoice, kList };

struct FlagSpec {
  std::string name;  // without the leading "--"
  FlagType type = FlagType::kText;
  std::string def;   // default as text (shown in --help); "" = none
  double lo = 0, hi = 0;  // inclusive range of kInt / kNumber
  std::vector<std::string> choices;  // kChoice
  std::string help;
  bool required = false;
  bool allow_empty = false;  // kText: "" is a value (e.g. an empty prompt)
};

// Builders: int_flag("steps", 1000, 1, 1e12, "optimizer steps") etc. Integers are decimal digits
// with an optional '-', or a whole number in exponent form (2e9, 1.5e6); not 0x2, " 2", +2 or
// 2.0. Numbers are decimal (0.5, 3e-4) and finite (docs/design.md, "CLI").
FlagSpec int_flag(const std::string& name, int64_t def, double lo, double hi, const std::string& help);
FlagSpec num_flag(const std::string& name, double def, double lo, double hi, const std::string& help);
FlagSpec text_flag(const std::string& name, const std::string& def, const std::string& help);
FlagSpec choice_flag(const std::string& name, const std::string& def,
                     const std::vector<std::string>& choices, const std::string& help);
FlagSpec bool_flag(const std::string& name, const std::string& help);
FlagSpec list_flag(const std::string& name, const std::string& help);
FlagSpec required(FlagSpec f);  // the command refuses to run without it
FlagSpec no_default(FlagSpec f);  // read only when given (has()); --help shows no default

struct CommandSpec {
  std::string name;      // "vtrain train"
  std::string synopsis;  // the first line after "usage: "
  // Flags in --help order; a spec whose name starts with "#" is a heading line in --help.
  std::vector<FlagSpec> flags;
  int max_positional = 0;         // bare arguments accepted
  std::string epilog;             // text after the table
};

// A heading in a CommandSpec's flag list (rendered as a blank line and the title).
FlagSpec flag_heading(const std::string& title);

class Flags {
 public:
  static absl::StatusOr<Flags> parse(const CommandSpec& spec, const std::vector<std::string>& args);
  static absl::StatusOr<Flags> parse(const CommandSpec& spec, int argc, char** argv, int first);

  bool help_requested() const { return help_; }
  bool has(const std::string& name) const;  // given on the command line
  bool get_bool(const std::string& name) const;
  int64_t get_int(const std::string& name) const;  // the value given, else the default
  double get_double(const std::string& name) const;
  std::string get_string(const std::string& name) const;
  std::vector<std::string> get_list(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  const FlagSpec& spec_of(const std::string& name) const;
  std::map<std::string, FlagSpec> specs_;
  std::map<std::string, std::vector<std::string>> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// "usage: <synopsis>" and the flag table with defaults, ranges and choices.
std::string usage(const CommandSpec& spec);

// True when argv[first..] holds --help or -h (checked before anything else runs, MPI included).
bool wants_help(int argc, char** argv, int first);

// Whether `value` is a valid value of flag `f`, for values that come from elsewhere than the
// command line (run config files: cli/config_file.h), so that they are refused exactly as the
// flag would be: the error names the flag and the limit ("--steps 0: out of range, expected an
// integer in [1, ...]").
absl::Status check_flag_value(const FlagSpec& f, const std::string& value);

}  // namespace vt
