// Shared pieces of the libFuzzer targets (tests/fuzz/*_fuzz.cc, built by scripts/fuzz.sh): a
// scratch directory per process for the file-based parsers, and seed writing. Each target feeds
// the fuzzer's bytes to a parser exactly as vtrain reads them from disk; a crash, a sanitizer
// report, an uncaught exception or a hang is a finding; an error status is the expected outcome
// for bad bytes. When VT_FUZZ_WRITE_SEEDS=DIR is set, a target writes valid inputs made by
// vtrain's own writers into DIR and exits (the starting corpus, always in step with the code).
#pragma once
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

namespace vt::fuzz {

// This process's scratch directory (made once; the fuzz script removes it).
inline const std::filesystem::path& scratch() {
  static const std::filesystem::path dir = [] {
    std::string tmpl = (std::filesystem::temp_directory_path() / "vtrain-fuzz-XXXXXX").string();
    const char* made = ::mkdtemp(tmpl.data());
    if (made == nullptr) std::abort();
    return std::filesystem::path(made);
  }();
  return dir;
}

inline void write_bytes(const std::filesystem::path& p, const uint8_t* data, size_t size) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

inline void write_text(const std::filesystem::path& p, const std::string& s) {
  write_bytes(p, reinterpret_cast<const uint8_t*>(s.data()), s.size());
}

// The seed directory when the fuzz script asks for seeds, else "".
inline std::string seed_dir() {
  const char* d = std::getenv("VT_FUZZ_WRITE_SEEDS");
  return d ? d : "";
}

}  // namespace vt::fuzz
