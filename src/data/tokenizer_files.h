// Tokenizers from files: a .tiktoken ranks file, or a saved `tokenizer.json` (of any kind; the
// format is in tokenizer.h). Apart from tokenizer.h so the interface does not depend on the BPE
// encoder (bpe.h) that these build.
#pragma once
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "data/tokenizer.h"

namespace vt::data {

// Loads a .tiktoken ranks file. Every single byte must have a rank (else not every input could be
// encoded); duplicate tokens or ranks are errors naming the line.
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tiktoken(const std::string& ranks_path);

// Loads `tokenizer.json` from a data directory (or a path to the JSON file itself).
absl::StatusOr<std::unique_ptr<Tokenizer>> load_tokenizer(const std::string& datadir_or_file);

}  // namespace vt::data
