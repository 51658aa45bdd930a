// TrainOptions' run identity (see options.h). Its JSON (to_json) is the settings table's, in
// train/settings.cc.
#include "train/options.h"

#include <filesystem>

namespace vt {

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
