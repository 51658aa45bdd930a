// ModelOption: a flag that a value mode (values/*.cc) or a block shape (blocks/*.cc) declares
// for itself, next to the code that reads it: its entry in the model flag table of `vtrain
// train` and `vtrain plan` (cli/model_flags.cc gathers them from the registries) and how its
// value sets the ModelConfig. Options every mode or shape shares (--detach-v1, --qk-norm,
// DenseFormer) are declared once in model_options.cc.
#pragma once
#include "core/flags.h"

namespace vt {

struct ModelConfig;

struct ModelOption {
  FlagSpec flag;
  // Sets the config from the parsed flags; called for every declared option, given or not
  // (an option read only when given checks f.has itself).
  void (*apply)(const Flags& f, ModelConfig& cfg) = nullptr;
  // Whether a config (from flags or JSON) sets the option, so that ModelConfig::finalize refuses
  // it with a mode or shape that does not declare it; null: not checked there.
  bool (*set_in)(const ModelConfig& cfg) = nullptr;
};

}  // namespace vt
