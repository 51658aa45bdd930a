// Single-process HDF5 checkpoints.
#include "checkpoint/checkpoint.h"

#include <cstdio>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "checkpoint/h5_file.h"
#include "core/check.h"

namespace vt {

absl::Status save_checkpoint(const std::string& path, const ModelConfig& cfg,
                             const ParamStore& store, const CheckpointMeta& meta,
                             const std::vector<NamedTensor>& extra) {
  const std::string tmp = path + ".tmp";
  {
    VT_ASSIGN_OR_RETURN(h5::File f, h5::File::create(tmp));
    VT_RETURN_IF_ERROR(f.set_attr("format", "vtrain-checkpoint"));
    VT_RETURN_IF_ERROR(f.set_attr("format_version", std::to_string(kCheckpointFormatVersion)));
    VT_RETURN_IF_ERROR(f.set_attr("config", cfg.to_json().dump()));
    nlohmann::json m = {{"step", meta.step},
                        {"tokens", meta.tokens},
                        {"loader_state", meta.loader_state},
                        {"extra", meta.extra}};
    VT_RETURN_IF_ERROR(f.set_attr("meta", m.dump()));
    for (const ParamInfo& info : store.infos()) {
      if (info.shape != info.global_shape)
        return absl::UnimplementedError(
            absl::StrCat("parameter ", info.name, " is sharded; the single-process writer needs whole parameters"));
      VT_RETURN_IF_ERROR(f.write_f32("/model/" + info.name, info.global_shape,
                                     store.param(store.find(info.name)).f32()));
    }
    for (const NamedTensor& t : extra)
      VT_RETURN_IF_ERROR(f.write_f32(t.path, t.tensor.shape(), t.tensor.f32()));
    if (H5Fflush(f.id(), H5F_SCOPE_GLOBAL) < 0)
      return absl::InternalError(absl::StrCat("cannot flush ", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot rename ", tmp, " to ", path, ": ", ec.message()));
  return absl::OkStatus();
}

static absl::StatusOr<h5::File> open_checkpoint(const std::string& path) {
  VT_ASSIGN_OR_RETURN(h5::File f, h5::File::open_read(path));
  auto fmt = f.get_attr("format");
  if (!fmt.ok() || *fmt != "vtrain-checkpoint")
    return absl::InvalidArgumentError(absl::StrCat(path, " is an HDF5 file but not a vtrain checkpoint"));
  return f;
}

absl::StatusOr<ModelConfig> read_checkpoint_config(const std::string& path) {
  VT_ASSIGN_OR_RETURN(h5::File f, open_checkpoint(path));
  VT_ASSIGN_OR_RETURN(std::string js, f.get_attr("config"));
  nlohmann::json j = nlohmann::json::parse(js, nullptr, false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": config attribute is not JSON"));
  return ModelConfig::from_json(j);
}

absl::StatusOr<CheckpointMeta> read_checkpoint_meta(const std::string& path) {
  VT_ASSIGN_OR_RETURN(h5::File f, open_checkpoint(path));
  VT_ASSIGN_OR_RETURN(std::string js, f.get_attr("meta"));
  nlohmann::json j = nlohmann::json::parse(js, nullptr, false);
  if (j.is_discarded()) return absl::DataLossError(absl::StrCat(path, ": meta attribute is not JSON"));
  CheckpointMeta m;
  m.step = j.value("step", 0);
  m.tokens = j.value("tokens", 0);
  m.loader_state = j.value("loader_state", nlohmann::json());
  m.extra = j.value("extra", nlohmann::json());
  return m;
}

absl::Status load_checkpoint_params(const std::string& path, const ParamStore& store) {
  VT_ASSIGN_OR_RETURN(h5::File f, open_checkpoint(path));
  std::vector<std::string> problems;
  for (const ParamInfo& info : store.infos()) {
    const std::string ds = "/model/" + info.name;
    auto shape = f.shape_of(ds);
    if (!shape.ok()) {
      problems.push_back(absl::StrCat(info.name, " is missing"));
      continue;
    }
    if (*shape != info.global_shape) {
      problems.push_back(absl::StrCat(info.name, " has shape (", absl::StrJoin(*shape, ","),
                                      ") in the checkpoint, the model wants (",
                                      absl::StrJoin(info.global_shape, ","), ")"));
      continue;
    }
    VT_ASSIGN_OR_RETURN(std::vector<float> data, f.read_f32(ds));
    VT_CHECK(info.shape == info.global_shape);
    std::copy(data.begin(), data.end(), store.param(store.find(info.name)).f32());
  }
  if (!problems.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, " does not match the model: ",
                                                   absl::StrJoin(problems, "; ")));
  return absl::OkStatus();
}

absl::Status load_checkpoint_tensors(const std::string& path,
                                     const std::vector<NamedTensor>& extra) {
  VT_ASSIGN_OR_RETURN(h5::File f, open_checkpoint(path));
  for (const NamedTensor& t : extra) {
    auto shape = f.shape_of(t.path);
    if (!shape.ok() || *shape != t.tensor.shape())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ", t.path, " is missing or has another shape"));
    VT_ASSIGN_OR_RETURN(std::vector<float> data, f.read_f32(t.path));
    std::copy(data.begin(), data.end(), t.tensor.f32());
  }
  return absl::OkStatus();
}

}  // namespace vt
