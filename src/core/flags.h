// Command-line flags: `--name value`, `--name=value` and boolean `--name`. The caller declares
// which names it accepts; anything else is an error naming the flag, so typos never pass
// silently. Typed getters return absl::Status errors for malformed values.
#pragma once
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace vt {

class Flags {
 public:
  // `value_flags` take a value, `bool_flags` do not.
  static absl::StatusOr<Flags> parse(int argc, char** argv, int first,
                                     const std::set<std::string>& value_flags,
                                     const std::set<std::string>& bool_flags);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool get_bool(const std::string& name) const { return has(name); }
  std::string get_string(const std::string& name, const std::string& def = "") const;
  absl::StatusOr<int64_t> get_int(const std::string& name, int64_t def) const;
  absl::StatusOr<double> get_double(const std::string& name, double def) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

}  // namespace vt
