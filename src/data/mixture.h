// Data mixtures: several prepared data directories ("sources") blended by weight, and stages that
// change the weights at token counts (an annealing phase on higher-quality data).
//
//   --data web=data/fw:0.7,code=data/stack:0.2,books=data/kjv:0.1     (or a mixture .json file)
//   --data-stage 180e9:web=0.3,code=0.2,books=0.5                     (weights from that token on)
//
// Rows, not tokens, are blended: every row of T tokens comes whole from one source, chosen by
// smooth weighted round-robin over the global row sequence (each row: every source's credit grows
// by its weight, the source with the most credit, ties to the first, gives the row and pays 1).
// The choice depends on nothing but the row's index, the weights and the stage boundaries, so the
// rows, and each source's share of them, are the same on any layout and micro-batch split; a
// source's rows are consecutive pieces of its own stream (data/loader.h), read where that
// source's saved position says. A stage starts at the first row whose first token is at or past
// its boundary; the credits restart at zero there.
//
// Resuming (load_state_json) continues every source at its own position, whatever the layout or
// the weights now are: nothing is read twice or skipped. Sources are matched by name: a new one
// starts at its beginning, one no longer listed is dropped (resume_notes says so); changed
// weights restart the credits.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "data/batch_source.h"
#include "data/loader.h"

namespace vt::data {

struct MixtureSource {
  std::string name;
  std::string dir;
  double weight = 0;  // as given (a stage's weights are normalized to sum 1)
};

struct MixtureStage {
  int64_t start_tokens = 0;     // the stage applies from this many training tokens on
  std::vector<double> weights;  // per source, normalized to sum 1
};

struct MixtureSpec {
  std::vector<MixtureSource> sources;  // one source with no name: a plain data directory
  std::vector<MixtureStage> stages;    // stages[0] starts at 0 (the --data weights)
  bool is_mixture() const { return !sources.empty() && !sources[0].name.empty(); }
  std::vector<std::string> names() const;
  // "web 0.70, code 0.20, books 0.10" for stage i.
  std::string describe_stage(size_t i) const;
};

// --data: a data directory (no mixture), NAME=DIR:WEIGHT[,...], or a .json file
//   {"sources": [{"name": "web", "dir": "data/fw", "weight": 0.7}, ...],
//    "stages": [{"at_tokens": 180e9, "weights": {"web": 0.3, ...}}, ...]}
// (directories relative to the file's). `stages` are --data-stage items,
// TOKENS:NAME=WEIGHT[,NAME=WEIGHT...], sources not named weigh 0 there. Refused, naming the flag
// and the value: weights negative, not numbers or all zero; names empty, repeated or unknown;
// directories that do not exist; boundaries not increasing or not positive; stages without a
// mixture.
absl::StatusOr<MixtureSpec> parse_data_spec(const std::string& data,
                                            const std::vector<std::string>& stages);

// Every source has the first one's tokenizer (the same tokenizer file, byte for byte); else the
// source with another is named; a source that is not a prepared directory (no tokenizer.json) is
// named as such.
absl::Status check_same_tokenizer(const MixtureSpec& spec);

// The last stage boundary fits a run of `run_tokens` training tokens in rows of `row_tokens`:
// some row of the run starts at or after it (MixtureLoader picks a row's source by the tokens
// before the row), else the stage could never take effect and is refused.
absl::Status check_stages_fit(const MixtureSpec& spec, int64_t run_tokens, int64_t row_tokens = 1);

class MixtureLoader : public BatchSource {
 public:
  static absl::StatusOr<MixtureLoader> open(const MixtureSpec& spec, const std::string& split,
                                            const LoaderOptions& opts);

  absl::Status next_batch_into(int64_t global_rows, int64_t seq_len, int dp_rank, int dp_size,
                               int32_t* inputs, int32_t* targets) override;
  // {"mixture": 1, "tokens", "stage", "weights": {name: w}, "credits": {name: c},
  //  "sources": {name: {"tokens", "loader": DataLoader::state_json()}}}
  nlohmann::json state_json() const override;
  absl::Status load_state_json(const nlohmann::json& j) override;
  const std::vector<std::string>& shard_paths() const override { return paths_; }
  int64_t vocab_size() const override { return loaders_.front().vocab_size(); }
  int64_t tokens_per_epoch() const override;
  nlohmann::json tokens_by_source() const override;
  std::vector<std::string> resume_notes() const override { return notes_; }

  const MixtureSpec& spec() const { return spec_; }
  size_t stage() const { return stage_; }

 private:
  // The source of the next row (advancing the credits and, at a boundary, the stage).
  size_t pick(int64_t row_start_tokens);

  MixtureSpec spec_;
  std::vector<DataLoader> loaders_;
  std::vector<std::string> paths_;
  std::vector<double> credits_;
  std::vector<int64_t> source_tokens_;
  int64_t tokens_ = 0;  // training tokens read so far (rows x T)
  size_t stage_ = 0;
  std::vector<std::string> notes_;
  std::vector<int32_t> in_buf_, tg_buf_;
};

}  // namespace vt::data
