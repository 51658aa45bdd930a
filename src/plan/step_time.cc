// The planner's step-time terms (see step_time.h).
#include "plan/step_time.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vt::plan {

double GemmCurve::at(double t) const {
  if (tokens.empty()) return 1.0;
  if (t <= tokens.front()) return efficiency.front() * std::max(t, 0.0) / tokens.front();
  for (size_t i = 1; i < tokens.size(); ++i)
    if (t <= tokens[i]) {
      const double f = (t - tokens[i - 1]) / (tokens[i] - tokens[i - 1]);
      return efficiency[i - 1] + f * (efficiency[i] - efficiency[i - 1]);
    }
  return efficiency.back();
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
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--gemm-curve ", path, ": cannot read it"));
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
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
  for (size_t i = 0; i < c.tokens.size(); ++i) {
    if (!(c.tokens[i] > 0) || (i > 0 && !(c.tokens[i] > c.tokens[i - 1])))
      return bad("\"tokens\" must be > 0 and increasing");
    if (!(c.efficiency[i] > 0 && c.efficiency[i] <= 1))
      return bad(absl::StrCat("efficiency ", c.efficiency[i], " is outside (0, 1]"));
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
