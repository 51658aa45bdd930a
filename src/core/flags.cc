// Flags parsing and --help rendering (see flags.h).
#include "core/flags.h"

#include <cmath>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "core/check.h"

namespace vt {

namespace {

// Integral bounds print as integers (1e+12 would read worse than 1000000000000).
std::string bound_text(double v) {
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e18) return absl::StrCat(static_cast<int64_t>(v));
  return absl::StrFormat("%g", v);
}

std::string range_text(const FlagSpec& f) {
  return absl::StrCat("[", bound_text(f.lo), ", ", bound_text(f.hi), "]");
}

// The spellings a number may take (docs/design.md, "CLI"): decimal only, no spaces, no sign but
// '-', no hexadecimal: [-]digits[.digits] or [-].digits, then an optional exponent e[+-]digits.
bool is_digit(char c) { return c >= '0' && c <= '9'; }
size_t digits_at(const std::string& v, size_t i) {
  size_t j = i;
  while (j < v.size() && is_digit(v[j])) ++j;
  return j - i;
}
bool decimal_integer_text(const std::string& v) {
  const size_t i = !v.empty() && v[0] == '-' ? 1 : 0;
  return v.size() > i && digits_at(v, i) == v.size() - i;
}
// Returns whether `v` is a decimal number; `exponent` says whether it has an exponent part.
bool decimal_number_text(const std::string& v, bool* exponent) {
  size_t i = !v.empty() && v[0] == '-' ? 1 : 0;
  const size_t whole = digits_at(v, i);
  i += whole;
  size_t frac = 0;
  if (i < v.size() && v[i] == '.') {
    frac = digits_at(v, i + 1);
    i += 1 + frac;
  }
  if (whole + frac == 0) return false;
  *exponent = false;
  if (i < v.size() && (v[i] == 'e' || v[i] == 'E')) {
    ++i;
    if (i < v.size() && (v[i] == '+' || v[i] == '-')) ++i;
    const size_t e = digits_at(v, i);
    if (e == 0) return false;
    i += e;
    *exponent = true;
  }
  return i == v.size();
}

absl::StatusOr<double> parse_number(const FlagSpec& f, const std::string& v) {
  double d = 0;
  bool exponent = false;
  if (!decimal_number_text(v, &exponent) || !absl::SimpleAtod(v, &d) || !std::isfinite(d))
    return absl::InvalidArgumentError(
        absl::StrCat("--", f.name, " ", v, ": expected a finite number in ", range_text(f),
                     " (decimal, e.g. 0.5 or 3e-4)"));
  if (d < f.lo || d > f.hi)
    return absl::InvalidArgumentError(
        absl::StrCat("--", f.name, " ", v, ": out of range, expected a number in ", range_text(f)));
  return d;
}

// Integers: decimal digits with an optional '-', or a whole number in exponent form (2e9,
// 1.5e6) for large counts. Not "0x2", " 2", "+2" or "2.0".
absl::StatusOr<int64_t> parse_integer(const FlagSpec& f, const std::string& v) {
  int64_t i = 0;
  bool exponent = false;
  bool ok = false;
  if (decimal_integer_text(v)) {
    ok = absl::SimpleAtoi(v, &i);
  } else if (decimal_number_text(v, &exponent) && exponent) {
    double d = 0;
    ok = absl::SimpleAtod(v, &d) && std::isfinite(d) && d == std::floor(d) && std::fabs(d) <= 9e18;
    if (ok) i = static_cast<int64_t>(d);
  }
  if (!ok)
    return absl::InvalidArgumentError(
        absl::StrCat("--", f.name, " ", v, ": expected an integer in ", range_text(f),
                     " (decimal digits, or a whole number like 2e9)"));
  if (static_cast<double>(i) < f.lo || static_cast<double>(i) > f.hi)
    return absl::InvalidArgumentError(
        absl::StrCat("--", f.name, " ", v, ": out of range, expected an integer in ", range_text(f)));
  return i;
}

absl::Status check_value(const FlagSpec& f, const std::string& v) {
  switch (f.type) {
    case FlagType::kInt:
      return parse_integer(f, v).status();
    case FlagType::kNumber:
      return parse_number(f, v).status();
    case FlagType::kChoice:
      for (const std::string& c : f.choices)
        if (c == v) return absl::OkStatus();
      return absl::InvalidArgumentError(absl::StrCat("--", f.name, " ", v, ": expected one of ",
                                                     absl::StrJoin(f.choices, ", ")));
    case FlagType::kText:
    case FlagType::kList:
      if (v.empty() && !f.allow_empty)
        return absl::InvalidArgumentError(absl::StrCat("--", f.name, " needs a non-empty value"));
      return absl::OkStatus();
    case FlagType::kBool:
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

// Words of `text` in lines of at most `width` columns, continuation lines indented by `indent`
// (the first line starts at column `indent` already).
std::string wrap(const std::string& text, size_t indent, size_t width) {
  std::string out;
  size_t col = indent, i = 0;
  while (i < text.size()) {
    size_t j = text.find(' ', i);
    if (j == std::string::npos) j = text.size();
    const std::string word = text.substr(i, j - i);
    if (col > indent && col + 1 + word.size() > width) {
      out += "\n" + std::string(indent, ' ');
      col = indent;
    } else if (col > indent) {
      out += ' ';
      ++col;
    }
    out += word;
    col += word.size();
    i = j + 1;
  }
  return out;
}

bool is_help(const std::string& a) { return a == "--help" || a == "-h"; }

}  // namespace

absl::Status check_flag_value(const FlagSpec& f, const std::string& value) {
  return check_value(f, value);
}

FlagSpec int_flag(const std::string& name, int64_t def, double lo, double hi, const std::string& help) {
  FlagSpec f{name, FlagType::kInt, absl::StrCat(def), lo, hi, {}, help};
  return f;
}
FlagSpec num_flag(const std::string& name, double def, double lo, double hi, const std::string& help) {
  FlagSpec f{name, FlagType::kNumber, absl::StrFormat("%g", def), lo, hi, {}, help};
  return f;
}
FlagSpec text_flag(const std::string& name, const std::string& def, const std::string& help) {
  return FlagSpec{name, FlagType::kText, def, 0, 0, {}, help};
}
FlagSpec choice_flag(const std::string& name, const std::string& def,
                     const std::vector<std::string>& choices, const std::string& help) {
  return FlagSpec{name, FlagType::kChoice, def, 0, 0, choices, help};
}
FlagSpec bool_flag(const std::string& name, const std::string& help) {
  return FlagSpec{name, FlagType::kBool, "", 0, 0, {}, help};
}
FlagSpec list_flag(const std::string& name, const std::string& help) {
  return FlagSpec{name, FlagType::kList, "", 0, 0, {}, help};
}
FlagSpec required(FlagSpec f) {
  f.required = true;
  return f;
}
FlagSpec flag_heading(const std::string& title) {
  FlagSpec f;
  f.name = "#" + title;
  return f;
}
FlagSpec no_default(FlagSpec f) {
  f.def.clear();
  return f;
}

absl::StatusOr<Flags> Flags::parse(const CommandSpec& spec, int argc, char** argv, int first) {
  std::vector<std::string> args;
  for (int i = first; i < argc; ++i) args.emplace_back(argv[i]);
  return parse(spec, args);
}

absl::StatusOr<Flags> Flags::parse(const CommandSpec& spec, const std::vector<std::string>& args) {
  Flags f;
  for (const FlagSpec& s : spec.flags)
    if (s.name.empty() || s.name[0] != '#') f.specs_[s.name] = s;
  for (const std::string& a : args)
    if (is_help(a)) {
      f.help_ = true;
      return f;
    }
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0 || arg == "--") {
      if (static_cast<int>(f.positional_.size()) >= spec.max_positional)
        return absl::InvalidArgumentError(absl::StrCat(
            "unexpected argument '", arg, "' (flags start with --; see ", spec.name, " --help)"));
      f.positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
      inline_value = true;
    }
    auto it = f.specs_.find(name);
    if (it == f.specs_.end())
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag --", name, " (see ", spec.name, " --help)"));
    const FlagSpec& s = it->second;
    if (f.values_.count(name) && s.type != FlagType::kList)  // lists may be given in parts
      return absl::InvalidArgumentError(absl::StrCat("--", name, " is given twice"));
    std::vector<std::string>& vals = f.values_[name];
    if (s.type == FlagType::kBool) {
      if (inline_value) return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value"));
      vals.push_back("1");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= args.size() || args[i + 1].rfind("--", 0) == 0)
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      value = args[++i];
    }
    VT_RETURN_IF_ERROR(check_value(s, value));
    vals.push_back(value);
    if (s.type == FlagType::kList)
      while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
        VT_RETURN_IF_ERROR(check_value(s, args[i + 1]));
        vals.push_back(args[++i]);
      }
  }
  for (const auto& [name, s] : f.specs_)
    if (s.required && !f.values_.count(name))
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " is required (see ", spec.name, " --help)"));
  return f;
}

const FlagSpec& Flags::spec_of(const std::string& name) const {
  auto it = specs_.find(name);
  VT_CHECK_MSG(it != specs_.end(), "flag --" << name << " is not declared by this command");
  return it->second;
}

bool Flags::has(const std::string& name) const {
  spec_of(name);
  return values_.count(name) > 0;
}

bool Flags::get_bool(const std::string& name) const {
  VT_CHECK(spec_of(name).type == FlagType::kBool);
  return values_.count(name) > 0;
}

int64_t Flags::get_int(const std::string& name) const {
  const FlagSpec& s = spec_of(name);
  VT_CHECK_MSG(s.type == FlagType::kInt, "--" << name << " is not an integer flag");
  auto it = values_.find(name);
  const std::string& v = it != values_.end() ? it->second[0] : s.def;
  absl::StatusOr<int64_t> r = parse_integer(s, v);
  VT_CHECK_MSG(r.ok(), "default of --" << name << ": " << r.status().message());
  return *r;
}

double Flags::get_double(const std::string& name) const {
  const FlagSpec& s = spec_of(name);
  VT_CHECK_MSG(s.type == FlagType::kNumber, "--" << name << " is not a number flag");
  auto it = values_.find(name);
  const std::string& v = it != values_.end() ? it->second[0] : s.def;
  absl::StatusOr<double> r = parse_number(s, v);
  VT_CHECK_MSG(r.ok(), "default of --" << name << ": " << r.status().message());
  return *r;
}

std::string Flags::get_string(const std::string& name) const {
  const FlagSpec& s = spec_of(name);
  auto it = values_.find(name);
  return it != values_.end() ? it->second[0] : s.def;
}

std::vector<std::string> Flags::get_list(const std::string& name) const {
  spec_of(name);
  auto it = values_.find(name);
  return it != values_.end() ? it->second : std::vector<std::string>{};
}

std::string usage(const CommandSpec& spec) {
  std::string out = absl::StrCat("usage: ", spec.synopsis, "\n");
  for (const FlagSpec& f : spec.flags) {
    if (!f.name.empty() && f.name[0] == '#') {
      absl::StrAppend(&out, "\n", f.name.substr(1), ":\n");
      continue;
    }
    std::string left = absl::StrCat("  --", f.name);
    switch (f.type) {
      case FlagType::kInt: absl::StrAppend(&left, " N"); break;
      case FlagType::kNumber: absl::StrAppend(&left, " X"); break;
      case FlagType::kText: absl::StrAppend(&left, " VALUE"); break;
      case FlagType::kList: absl::StrAppend(&left, " VALUE..."); break;
      case FlagType::kChoice: absl::StrAppend(&left, " ", absl::StrJoin(f.choices, "|")); break;
      case FlagType::kBool: break;
    }
    std::string right = f.help;
    if (f.type == FlagType::kInt || f.type == FlagType::kNumber)
      absl::StrAppend(&right, right.empty() ? "" : " ", "(", f.def.empty() ? "" : "default " + f.def + ", ",
                      "range ", range_text(f), ")");
    else if (!f.def.empty())
      absl::StrAppend(&right, right.empty() ? "" : " ", "(default ", f.def, ")");
    if (f.required) absl::StrAppend(&right, " [required]");
    if (left.size() < 30) left.resize(30, ' ');
    else left += "\n" + std::string(30, ' ');
    absl::StrAppend(&out, left, wrap(right, 30, 100), "\n");
  }
  if (!spec.epilog.empty()) absl::StrAppend(&out, "\n", spec.epilog);
  if (out.back() != '\n') out += "\n";
  return out;
}

bool wants_help(int argc, char** argv, int first) {
  for (int i = first; i < argc; ++i)
    if (is_help(argv[i])) return true;
  return false;
}

}  // namespace vt
