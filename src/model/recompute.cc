// The names of the recomputation modes (see recompute.h).
#include "model/recompute.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace vt {

const char* recompute_name(Recompute r) {
  switch (r) {
    case Recompute::kOff: return "off";
    case Recompute::kAttn: return "attn";
    case Recompute::kMlp: return "mlp";
    case Recompute::kBlock: return "block";
  }
  return "?";
}

const std::vector<std::string>& recompute_names() {
  static const std::vector<std::string> names = {"off", "attn", "mlp", "block"};
  return names;
}

absl::StatusOr<Recompute> parse_recompute(std::string_view name) {
  for (Recompute r : {Recompute::kOff, Recompute::kAttn, Recompute::kMlp, Recompute::kBlock})
    if (name == recompute_name(r)) return r;
  return absl::InvalidArgumentError(absl::StrCat("--recompute '", std::string(name), "' is not a mode: choose ",
                                                 absl::StrJoin(recompute_names(), ", ")));
}

}  // namespace vt
