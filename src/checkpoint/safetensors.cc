// write_safetensors (safetensors.h).
#include "checkpoint/safetensors.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace vt {

int64_t safetensors_element_bytes(const std::string& dtype) {
  if (dtype == "F32" || dtype == "I32") return 4;
  if (dtype == "BF16" || dtype == "F16") return 2;
  if (dtype == "F64" || dtype == "I64") return 8;
  return 0;
}

absl::Status write_safetensors(const std::string& path, const std::vector<SafeTensor>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  int64_t at = 0;
  std::vector<int64_t> bytes;
  for (const SafeTensor& t : tensors) {
    const int64_t eb = safetensors_element_bytes(t.dtype);
    if (eb == 0) return absl::InvalidArgumentError(absl::StrCat("safetensors: dtype ", t.dtype, " of ", t.name));
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second)
      return absl::InvalidArgumentError(absl::StrCat("safetensors: tensor name '", t.name, "' is empty, reserved or repeated"));
    int64_t n = eb;
    for (int64_t d : t.shape) n *= d;
    header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + n}}};
    bytes.push_back(n);
    at += n;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h += ' ';
  const std::string tmp = path + ".tmp";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot write ", tmp, ": ", std::strerror(errno)));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(uint64_t(h.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, f) == 8 && std::fwrite(h.data(), 1, h.size(), f) == h.size();
  for (size_t i = 0; ok && i < tensors.size(); ++i)
    ok = std::fwrite(tensors[i].data, 1, bytes[i], f) == static_cast<size_t>(bytes[i]);
  ok = (std::fflush(f) == 0) && ok;
  ok = (std::fclose(f) == 0) && ok;
  std::error_code ec;
  if (ok) std::filesystem::rename(tmp, path, ec);
  if (!ok || ec) {
    std::filesystem::remove(tmp, ec);
    return absl::DataLossError(absl::StrCat("writing ", path, " failed (disk full?)"));
  }
  return absl::OkStatus();
}

}  // namespace vt
