// TrainOptions as JSON (see options.h): the settings table's saved rows (train/settings.h) and the
// data sources.
#include "train/options.h"

#include <filesystem>

#include "train/settings.h"

namespace vt {

nlohmann::json TrainOptions::to_json() const {
  nlohmann::json j = saved_train_settings(*this);
  nlohmann::json sources = nlohmann::json::array();
  if (data.is_mixture())
    for (size_t k = 0; k < data.sources.size(); ++k)
      sources.push_back({{"name", data.sources[k].name}, {"dir", data.sources[k].dir},
                         {"weight", data.stages[0].weights[k]}});
  j["data_dir"] = data_dir;
  j["data_sources"] = sources;
  return j;
}

std::string TrainOptions::run_identity() const {
  namespace fs = std::filesystem;
  // Without --ckpt-dir: the directory of --resume PATH ("." for a bare file name). Chosen in one
  // expression: assigning "." to the string afterwards makes g++ 12 at -O3 warn -Wrestrict (a
  // false positive, GCC bug 105329).
  const bool resume_path = resume != "none" && resume != "auto";
  const std::string resume_dir = resume_path ? fs::path(resume).parent_path().string() : std::string();
  const std::string dir = !ckpt_dir.empty()                  ? ckpt_dir
                          : !resume_dir.empty() || !resume_path ? resume_dir
                                                               : std::string(".");
  if (dir.empty()) return "";
  std::error_code ec;
  const fs::path p = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  return ec ? dir : p.string();
}

}  // namespace vt
