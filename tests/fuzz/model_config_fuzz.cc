// Fuzz target: a model config as a checkpoint's "config" attribute (or a case file) holds it,
// parsed and validated by ModelConfig::from_json (model/config.h). Bad bytes or a bad field are
// an error status; a config that is accepted must lie in every declared range, stay under the
// parameter limit, and round-trip through to_json unchanged.
#include <string>
#include <utility>

#include "fuzz_util.h"
#include "model/config.h"
#include "nlohmann/json.hpp"

using namespace vt;

namespace {

std::string seed(int layers, const char* value_mode, const char* block) {
  ModelConfig cfg;
  cfg.n_layer = layers;
  cfg.n_embd = 64;
  cfg.n_head = 4;
  cfg.n_kv_head = 2;
  cfg.head_dim = 16;
  cfg.vocab_size = 300;
  cfg.seq_len = 64;
  if (auto m = parse_value_mode(value_mode); m.ok()) cfg.value_mode = *m;
  if (auto b = parse_block_shape(block); b.ok()) cfg.block = *b;
  if (!cfg.finalize().ok()) return "";  // a combination the model refuses: no seed
  return cfg.to_json().dump();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string dir = fuzz::seed_dir();
  if (!dir.empty()) {
    const std::pair<const char*, std::string> seeds[] = {
        {"baseline", seed(2, "baseline", "prenorm")}, {"bov", seed(3, "bov", "prenorm")},
        {"v1_parallel", seed(4, "v1", "parallel")}, {"neutreno_sas", seed(4, "neutreno", "sas")},
        {"value_embed", seed(6, "value-embed", "vskipinit")}};
    for (const auto& [name, text] : seeds)
      if (!text.empty()) fuzz::write_text(dir + "/" + name, text);
    std::exit(0);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const nlohmann::json j =
      nlohmann::json::parse(reinterpret_cast<const char*>(data), reinterpret_cast<const char*>(data) + size,
                            nullptr, false);
  if (j.is_discarded()) return 0;
  absl::StatusOr<ModelConfig> c = ModelConfig::from_json(j);
  if (!c.ok()) return 0;
  for (const ConfigFieldRange& r : config_field_ranges()) {
    const nlohmann::json v = c->to_json().at(r.field);
    if (!config_range_problem(r, v.get<double>()).empty()) std::abort();  // accepted outside its range
  }
  if (c->param_count() > kMaxModelParams) std::abort();
  absl::StatusOr<ModelConfig> again = ModelConfig::from_json(c->to_json());
  if (!again.ok() || again->to_json() != c->to_json()) std::abort();  // not a round trip
  return 0;
}
