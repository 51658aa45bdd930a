// Flags parsing.
#include "core/flags.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace vt {

absl::StatusOr<Flags> Flags::parse(int argc, char** argv, int first,
                                   const std::set<std::string>& value_flags,
                                   const std::set<std::string>& bool_flags) {
  Flags f;
  for (int i = first; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--", 0) != 0) {
      f.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool has_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      has_value = true;
    }
    if (bool_flags.count(name)) {
      if (has_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      f.values_[name] = "1";
    } else if (value_flags.count(name)) {
      if (!has_value) {
        if (i + 1 >= argc)
          return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
        value = argv[++i];
      }
      f.values_[name] = value;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name, " (see --help)"));
    }
  }
  return f;
}

std::string Flags::get_string(const std::string& name, const std::string& def) const {
  auto it = values_.find(name);
  return it == values_.end() ? def : it->second;
}

absl::StatusOr<int64_t> Flags::get_int(const std::string& name, int64_t def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  int64_t v = 0;
  if (!absl::SimpleAtoi(it->second, &v))
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " expects an integer, got '", it->second, "'"));
  return v;
}

absl::StatusOr<double> Flags::get_double(const std::string& name, double def) const {
  auto it = values_.find(name);
  if (it == values_.end()) return def;
  double v = 0;
  if (!absl::SimpleAtod(it->second, &v))
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " expects a number, got '", it->second, "'"));
  return v;
}

}  // namespace vt
