// Run config files: reading a TOML file into a command's flags, and writing one (see
// config_file.h). The TOML parser is toml++ (Debian's libtomlplusplus-dev, header-only here).
#include "cli/config_file.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>

#include <toml++/toml.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"

namespace vt {

namespace {

struct FlagPlace {
  const FlagSpec* flag;
  std::string section;
};

std::map<std::string, FlagPlace> flags_by_name(const CommandSpec& spec) {
  std::map<std::string, FlagPlace> out;
  std::string section;
  for (const FlagSpec& f : spec.flags) {
    if (!f.name.empty() && f.name[0] == '#') {
      section = config_section(f.name.substr(1));
      continue;
    }
    out[f.name] = {&f, section};
  }
  return out;
}

std::vector<std::string> sections_of(const CommandSpec& spec) {
  std::vector<std::string> out;
  for (const FlagSpec& f : spec.flags)
    if (!f.name.empty() && f.name[0] == '#') out.push_back(config_section(f.name.substr(1)));
  return out;
}

uint64_t line_of(const toml::source_region& r) { return static_cast<uint64_t>(r.begin.line); }

const char* toml_type(const toml::node& v) {
  switch (v.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date or time";
  }
}

const char* wanted(FlagType t) {
  switch (t) {
    case FlagType::kBool: return "true or false";
    case FlagType::kInt: return "an integer";
    case FlagType::kNumber: return "a number";
    case FlagType::kText:
    case FlagType::kChoice: return "a string";
    case FlagType::kList: return "an array of strings";
  }
  return "a value";
}

// The shortest text that reads back as `d` (the flag parser takes decimal and exponent forms).
std::string number_text(double d) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof(buf), d);
  return std::string(buf, r.ptr);
}

// A key's value as flag text: `values` empty and `set` false for a switch set to false.
struct FlagValue {
  bool type_ok = true;
  bool set = true;
  std::vector<std::string> values;
};

FlagValue flag_value(const FlagSpec& f, const toml::node& v) {
  FlagValue out;
  switch (f.type) {
    case FlagType::kBool:
      if (const auto* b = v.as_boolean()) out.set = b->get();
      else out.type_ok = false;
      break;
    case FlagType::kInt:
      if (const auto* i = v.as_integer()) out.values = {absl::StrCat(i->get())};
      else out.type_ok = false;
      break;
    case FlagType::kNumber:
      if (const auto* i = v.as_integer()) out.values = {absl::StrCat(i->get())};
      else if (const auto* d = v.as_floating_point()) out.values = {number_text(d->get())};
      else out.type_ok = false;
      break;
    case FlagType::kText:
    case FlagType::kChoice:
      if (const auto* s = v.as_string()) out.values = {s->get()};
      else out.type_ok = false;
      break;
    case FlagType::kList:
      if (const auto* a = v.as_array(); a != nullptr && !a->empty()) {
        for (const toml::node& e : *a) {
          if (const auto* s = e.as_string()) out.values.push_back(s->get());
          else out.type_ok = false;
        }
      } else {
        out.type_ok = false;
      }
      break;
  }
  return out;
}

}  // namespace

std::string config_section(const std::string& heading_title) {
  std::string s = heading_title.substr(0, heading_title.find(" ("));
  for (char& c : s)
    if (c == ' ') c = '-';
  return s;
}

std::set<std::string> flags_given(const std::vector<std::string>& args) {
  std::set<std::string> out;
  for (const std::string& a : args)
    if (a.rfind("--", 0) == 0 && a.size() > 2) out.insert(a.substr(2, a.find('=') - 2));
  return out;
}

std::string config_path_in(const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config" && i + 1 < args.size()) return args[i + 1];
    if (args[i].rfind("--config=", 0) == 0) return args[i].substr(9);
  }
  return "";
}

absl::StatusOr<std::vector<std::string>> config_file_args(const CommandSpec& spec,
                                                          const std::string& path,
                                                          const std::set<std::string>& given) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    return absl::NotFoundError(absl::StrCat("--config ", path, ": no such file"));
  toml::table file;
  try {
    file = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ":", line_of(e.source()),
                                                   ": not a TOML file: ",
                                                   std::string(e.description())));
  }
  const std::map<std::string, FlagPlace> flags = flags_by_name(spec);
  std::vector<std::string> args;
  // One key: `section` is "" at the top of the file.
  auto take = [&](const std::string& section, const std::string& key,
                  const toml::node& v) -> absl::Status {
    const std::string where = absl::StrCat(path, ":", line_of(v.source()), ": key '", key, "'");
    const auto it = flags.find(key);
    if (it == flags.end() || key == "config")
      return absl::InvalidArgumentError(absl::StrCat(
          where, it == flags.end() ? " is not a flag of " : " cannot be set in a config file: ",
          it == flags.end() ? spec.name + " (keys are the flag names without --; see " + spec.name +
                                  " --help)"
                            : "it names the file"));
    const FlagSpec& f = *it->second.flag;
    if (!section.empty() && section != it->second.section)
      return absl::InvalidArgumentError(absl::StrCat(where, " is in [", section, "]; --", key,
                                                     " belongs in [", it->second.section,
                                                     "] (or at the top of the file)"));
    const FlagValue fv = flag_value(f, v);
    if (!fv.type_ok)
      return absl::InvalidArgumentError(absl::StrCat(where, " is ", toml_type(v), ", expected ",
                                                     wanted(f.type), " (the value of --", key,
                                                     ")"));
    for (const std::string& value : fv.values)
      if (absl::Status st = check_flag_value(f, value); !st.ok())
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", st.message()));
    if (given.count(key) || !fv.set) return absl::OkStatus();  // the command line wins
    args.push_back("--" + key);
    for (const std::string& value : fv.values) args.push_back(value);
    return absl::OkStatus();
  };
  const std::vector<std::string> sections = sections_of(spec);
  for (const auto& [k, v] : file) {
    const std::string key(k.str());
    if (const toml::table* t = v.as_table()) {
      if (std::find(sections.begin(), sections.end(), key) == sections.end())
        return absl::InvalidArgumentError(absl::StrCat(
            path, ":", line_of(k.source()), ": section [", key, "] is not one of ", spec.name,
            "'s: ", absl::StrJoin(sections, ", ")));
      for (const auto& [k2, v2] : *t) {
        if (v2.is_table())
          return absl::InvalidArgumentError(absl::StrCat(path, ":", line_of(v2.source()),
                                                         ": [", key, ".", std::string(k2.str()),
                                                         "]: sections do not nest"));
        VT_RETURN_IF_ERROR(take(key, std::string(k2.str()), v2));
      }
      continue;
    }
    VT_RETURN_IF_ERROR(take("", key, v));
  }
  return args;
}

std::string config_text(const CommandSpec& spec,
                        const std::vector<std::pair<std::string, nlohmann::json>>& values,
                        const std::string& header) {
  std::map<std::string, nlohmann::json> by_name(values.begin(), values.end());
  std::string out;
  for (size_t i = 0; i < header.size();) {
    size_t j = header.find('\n', i);
    if (j == std::string::npos) j = header.size();
    absl::StrAppend(&out, "# ", header.substr(i, j - i), "\n");
    i = j + 1;
  }
  std::string section, written_section = "\x01";
  for (const FlagSpec& f : spec.flags) {
    if (!f.name.empty() && f.name[0] == '#') {
      section = config_section(f.name.substr(1));
      continue;
    }
    const auto it = by_name.find(f.name);
    if (it == by_name.end()) continue;
    if (section != written_section) {
      if (!section.empty()) absl::StrAppend(&out, "\n[", section, "]\n");
      written_section = section;
    }
    std::string value;
    if (it->second.is_array()) {
      std::vector<std::string> items;
      for (const nlohmann::json& e : it->second) items.push_back(e.dump());
      value = absl::StrCat("[", absl::StrJoin(items, ", "), "]");
    } else {
      value = it->second.dump();
    }
    absl::StrAppend(&out, f.name, " = ", value, "\n");
  }
  return out;
}

}  // namespace vt
