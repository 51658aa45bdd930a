// The planner's step-time terms (see step_time.h).
#include "plan/step_time.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/file_safety.h"
#include "nlohmann/json.hpp"

namespace vt::plan {

absl::Status check_range(const ValueRange& r, double v, const std::string& where) {
  if (v >= r.lo && v <= r.hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: %s %g is outside [%g, %g]", where, r.what, v, r.lo, r.hi));
}

double GemmCurve::at(double t) const {
  if (tokens.empty()) return 1.0;
  double e = efficiency.back();
  if (t <= tokens.front()) {
    e = efficiency.front() * std::max(t, 0.0) / tokens.front();
  } else {
    for (size_t i = 1; i < tokens.size(); ++i)
      if (t <= tokens[i]) {
        const double f = (t - tokens[i - 1]) / (tokens[i] - tokens[i - 1]);
        e = efficiency[i - 1] + f * (efficiency[i] - efficiency[i - 1]);
        break;
      }
  }
  return std::max(e, kGemmEfficiencyRange.lo);
}

GemmCurve default_gemm_curve() {
  GemmCurve c;
  c.tokens = {256, 512, 1024, 2048};
  c.efficiency = {201.34 / 293.65, 212.23 / 293.65, 289.16 / 293.65, 1.0};
  c.source = "H100 bf16 GEMM, N 12288 K 2048, vLLM PR 53446";
  return c;
}

absl::StatusOr<GemmCurve> read_gemm_curve(const std::string& path) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("--gemm-curve ", path, ": ", why));
  };
  absl::StatusOr<std::string> text = read_regular_file(path, kMaxGemmCurveBytes, "--gemm-curve");
  if (!text.ok()) return text.status();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("tokens") || !j.contains("efficiency") ||
      !j["tokens"].is_array() || !j["efficiency"].is_array())
    return bad("expected a JSON object {\"tokens\": [...], \"efficiency\": [...]}");
  GemmCurve c;
  for (const auto& v : j["tokens"]) {
    if (!v.is_number()) return bad("\"tokens\" holds a value that is not a number");
    c.tokens.push_back(v.get<double>());
  }
  for (const auto& v : j["efficiency"]) {
    if (!v.is_number()) return bad("\"efficiency\" holds a value that is not a number");
    c.efficiency.push_back(v.get<double>());
  }
  if (c.tokens.empty() || c.tokens.size() != c.efficiency.size())
    return bad("\"tokens\" and \"efficiency\" need the same number of points, at least one");
  const std::string where = absl::StrCat("--gemm-curve ", path);
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    if (absl::Status st = check_range(kGemmTokensRange, c.tokens[i], where); !st.ok()) return st;
    if (i > 0 && !(c.tokens[i] > c.tokens[i - 1])) return bad("\"tokens\" must be increasing");
    if (absl::Status st = check_range(kGemmEfficiencyRange, c.efficiency[i], where); !st.ok()) return st;
  }
  c.source = path;
  return c;
}

double exposed_grad_sum_s(double allreduce_s, double layer_share, int layers, double window_s,
                          bool overlap) {
  if (!overlap) return allreduce_s;
  const double layers_s = allreduce_s * layer_share;
  const double last_layer_s = layers > 0 ? layers_s / layers : 0.0;
  return std::max(layers_s - window_s, last_layer_s) + allreduce_s * (1.0 - layer_share);
}

}  // namespace vt::plan
