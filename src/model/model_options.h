// The model options as one list: those each registered value mode and block shape declares
// (value_path.h / block_shape.h options()) and those every mode or shape shares (--detach-v1,
// --qk-norm, DenseFormer's), gathered for the flag tables (cli/model_flags.cc,
// tools/export_case.cc) and applied to a ModelConfig in one place.
#pragma once
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/flags.h"
#include "model/model_option.h"

namespace vt {

struct ModelConfig;

// An option and the modes or shapes declaring it, by name (empty: shared by all).
struct DeclaredOption {
  ModelOption option;
  std::vector<std::string> owners;
};

// Options of the value modes / block shapes in registry order, each flag once.
std::vector<DeclaredOption> value_mode_options();
std::vector<DeclaredOption> block_shape_options();
// Options every value mode reads (--detach-v1), every block shape (--qk-norm), and DenseFormer.
std::vector<ModelOption> shared_value_options();
std::vector<ModelOption> shared_block_options();
std::vector<ModelOption> dense_options();

// Sets cfg from every option above; cfg.value_mode must be set. Refuses a value mode's option
// given with another --value ("--neutreno-lambda applies only to --value neutreno") and
// DenseFormer's spacing without --dense; combinations of block options are the block shape's
// validate (ModelConfig::finalize).
absl::Status apply_model_options(const Flags& f, ModelConfig& cfg);

}  // namespace vt
