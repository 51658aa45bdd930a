// Diagnosis of non-finite values and the fault injection of the tests (see nonfinite.h).
#include "train/nonfinite.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace vt {

absl::StatusOr<FaultInjection> FaultInjection::from_env() {
  FaultInjection f;
  const char* env = std::getenv("VTRAIN_INJECT_NONFINITE");
  if (env == nullptr || *env == '\0') return f;
  const std::string spec = env;
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "VTRAIN_INJECT_NONFINITE=", spec, ": ", why,
        " (expected weight|activation|gradient:TARGET:nan|inf@STEP)"));
  };
  const std::vector<std::string> at = absl::StrSplit(spec, '@');
  if (at.size() != 2) return bad("no @STEP");
  const std::vector<std::string> range = absl::StrSplit(at[1], '-');
  if (range.size() > 2 || !absl::SimpleAtoi(range[0], &f.step) || f.step < 1) return bad("bad STEP");
  f.last_step = f.step;
  if (range.size() == 2 && (!absl::SimpleAtoi(range[1], &f.last_step) || f.last_step < f.step))
    return bad("bad step range");
  const std::vector<std::string> parts = absl::StrSplit(at[0], ':');
  if (parts.size() != 3) return bad("not three ':'-separated parts");
  if (parts[0] == "weight") f.where = Where::kWeight;
  else if (parts[0] == "activation") f.where = Where::kActivation;
  else if (parts[0] == "gradient") f.where = Where::kGradient;
  else return bad("unknown place '" + parts[0] + "'");
  if (f.where == Where::kActivation) {
    if (!absl::SimpleAtoi(parts[1], &f.layer) || f.layer < -1) return bad("the layer is not an index");
  } else {
    f.param = parts[1];
  }
  if (parts[2] == "nan") f.value = std::numeric_limits<float>::quiet_NaN();
  else if (parts[2] == "inf") f.value = std::numeric_limits<float>::infinity();
  else return bad("the value is not nan or inf");
  return f;
}

int64_t count_nonfinite(const Tensor& t) {
  int64_t n = 0;
  for (float v : t.to_host_f32()) n += !std::isfinite(v);
  return n;
}

namespace {

// Per parameter of the whole model (registration order), the non-finite elements of the
// parameter or of its gradient, summed over the ranks that hold distinct pieces of it (TP
// shards; DP replicas and pipeline-replicated copies count once).
std::vector<double> count_per_param(const GPT& model, const ParamStore& store,
                                    const ProcessGrid& grid, const std::vector<std::string>& names,
                                    bool grads) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < names.size(); ++i) index[names[i]] = static_cast<int>(i);
  std::vector<double> counts(names.size(), 0.0);
  const bool first_replica = grid.coords().dp == 0;
  for (int i = 0; i < store.size(); ++i) {
    const ParamInfo& info = store.info(i);
    const bool pp_copy = info.pp_replicated && grid.coords().pp != 0;
    if (!first_replica || pp_copy) continue;
    counts[index.at(info.name)] = static_cast<double>(count_nonfinite(grads ? store.grad(i) : store.param(i)));
  }
  grid.world()->all_reduce_sum(counts.data(), static_cast<int64_t>(counts.size()));
  return counts;
}

std::string list_found(const std::vector<std::string>& names, const std::vector<double>& counts,
                       const char* what) {
  std::vector<std::string> found;
  int64_t n = 0;
  for (size_t i = 0; i < names.size(); ++i)
    if (counts[i] > 0) {
      ++n;
      if (found.size() < 4)
        found.push_back(absl::StrCat(names[i], " (", static_cast<int64_t>(counts[i]), ")"));
    }
  if (n == 0) return absl::StrCat("every ", what, " is finite");
  return absl::StrCat(what, "s with non-finite values: ", n, " of ", names.size(), ", first ",
                      absl::StrJoin(found, ", "), n > 4 ? ", ..." : "");
}

}  // namespace

std::string diagnose_nonfinite(const GPT& model, const ParamStore& store, const ProcessGrid& grid,
                               const std::function<void(const BlockOutputHook&)>& rerun_forward) {
  ParamStore whole;  // registration only: the whole model's names in order
  GPT(model.config()).register_params(whole);
  std::vector<std::string> names;
  for (const ParamInfo& p : whole.infos()) names.push_back(p.name);
  std::vector<std::string> lines;
  lines.push_back(list_found(names, count_per_param(model, store, grid, names, false), "parameter"));
  lines.push_back(list_found(names, count_per_param(model, store, grid, names, true), "gradient"));
  if (rerun_forward) {
    // The first layer (in model order; -1 the embedding) whose output is not finite, over all
    // ranks: the all-reduce of -layer finds the minimum.
    float first = -std::numeric_limits<float>::infinity();  // -(first bad layer), or -inf: none
    rerun_forward([&](int layer, const Tensor& x) {
      if (-static_cast<float>(layer) > first && count_nonfinite(x) > 0) first = -static_cast<float>(layer);
    });
    grid.world()->all_reduce_max(&first, 1);
    if (std::isinf(first)) {
      lines.push_back("replaying the step's forward passes: every block output is finite");
    } else {
      const int layer = static_cast<int>(-first);
      lines.push_back(layer < 0 ? "replaying the step's forward passes: the embedding output is "
                                  "already non-finite"
                                : absl::StrCat("replaying the step's forward passes: the first "
                                               "non-finite block output is layer ",
                                               layer, "'s", layer > 0 ? " (the layers before it are finite)" : ""));
    }
  }
  return absl::StrJoin(lines, "; ");
}

}  // namespace vt
