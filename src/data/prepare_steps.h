// The collective steps of `vtrain prepare` (prepare.h has the contract), shared by prepare.cc:
//   build_tokenizer   bytes / tiktoken:FILE, or bpe:N trained on the sample (prepare_tokenize.cc)
//   tokenize_units    each rank encodes its units into the scratch directory (prepare_tokenize.cc)
//   write_shards      each rank writes its slice of the output stream into the shards
//                     (prepare_assemble.cc)
// Scratch per unit u: units/uNNNNNNN.tok (its documents' tokens back to back, without <|bos|>,
// in the shards' token width) and units/uNNNNNNN.idx (int64 end offset of each document, in tokens).
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/corpus.h"
#include "data/prepare_options.h"
#include "data/prepare_group.h"
#include "data/tokenizer.h"

namespace vt::data {

struct PrepareContext {
  const PrepareOptions* opts = nullptr;
  PrepareGroup* group = nullptr;
  std::vector<InputFile> files;
  std::vector<Unit> units;
  std::vector<int> mine;  // this rank's units
  std::filesystem::path tmp;
  bool rank0() const { return group->rank() == 0; }
  bool verbose() const { return opts->verbose && rank0(); }
  DocumentReaderOptions reader_options(int file) const;
  std::filesystem::path unit_path(int unit, const char* ext) const;
};

struct UnitStats {
  int64_t docs = 0, tokens = 0, skipped = 0, text_bytes = 0;  // tokens without <|bos|>
  int64_t dropped_files = 0;  // 1 when a damaged stream made the whole unit's file left out
};

absl::StatusOr<std::unique_ptr<Tokenizer>> build_tokenizer(const PrepareContext& ctx);
// Returns the stats of every unit (gathered from the ranks that made them).
absl::StatusOr<std::vector<UnitStats>> tokenize_units(const PrepareContext& ctx, const Tokenizer& tok);

struct SplitPlan {
  int64_t n_train = 0, n_val = 0;
  std::vector<std::string> train_shards, val_shards;
};
absl::Status write_shards(const PrepareContext& ctx, const std::vector<UnitStats>& stats,
                          const Tokenizer& tok, const SplitPlan& plan);

}  // namespace vt::data
