// A checkpoint's model loaded onto this rank's part of a dp x tp x pp layout, for the commands
// that run a trained model under mpirun (`vtrain eval`, `vtrain diagnose`): the layout and device
// flags they share, and the loading (config and metadata, the grid, the tokenizer checked against
// the model's vocabulary, the device, this stage's parameters, the pipeline engine, the banner).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "checkpoint/checkpoint.h"
#include "core/flags.h"
#include "data/tokenizer.h"
#include "model/gpt.h"
#include "core/communicator.h"
#include "parallel/process_grid.h"
#include "pipeline/pipeline.h"
#include "train/device_setup.h"

namespace vt::cli {

// --tp, --pp, --vpp, --device, --act-dtype, --device-comm under a "layout and device" heading.
std::vector<FlagSpec> layout_flag_specs();

struct ModelOnLayout {
  ModelConfig cfg;
  CheckpointMeta meta;
  std::unique_ptr<data::Tokenizer> tok;
  DevicePlan device;
  std::unique_ptr<ProcessGrid> grid;
  std::string comm_desc;
  ParamStore store;
  std::unique_ptr<GPT> model;
  std::unique_ptr<PipelineEngine> engine;
};

// Collective over `world`; errors are agreed (every rank returns the same one). Reads --ckpt,
// --data (the tokenizer's directory, else the checkpoint's) and the layout flags; rank 0 prints
// "WHAT: CKPT (step N) | layout ... | device | communication".
absl::StatusOr<std::unique_ptr<ModelOnLayout>> load_model_on_layout(const Flags& f,
                                                                    Communicator* world,
                                                                    const std::string& what);

}  // namespace vt::cli
