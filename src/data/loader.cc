// DataLoader implementation: shard discovery, the per-epoch shard order, mapping stream positions
// to (shard, offset), reading with vocabulary checks, DP slicing, and state (de)serialization.
#include "data/loader.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/file_safety.h"
#include "core/json_integer.h"
#include "core/rng.h"
#include "data/prepare.h"

namespace vt::data {
namespace fs = std::filesystem;

namespace {

// The shard names of meta.json (docs/design.md "Data"): each names a file inside the data
// directory (file_safety.h path_inside), none twice in a split, and none in both splits (a
// validation shard trained on would make the validation loss meaningless). Checked for `split`
// against every split.
absl::Status check_shard_names(const std::string& dir, const std::string& meta_path,
                               const nlohmann::json& meta, const std::string& split) {
  std::map<std::string, std::string> seen;  // resolved path -> "split" where listed first
  for (const char* s : {"train", "val"}) {
    if (!meta.contains(s) || !meta[s].is_object() || !meta[s].contains("shards") ||
        !meta[s]["shards"].is_array())
      continue;
    const std::string field = absl::StrCat(s, ".shards");
    for (const auto& n : meta[s]["shards"]) {
      if (!n.is_string())
        return absl::DataLossError(absl::StrCat(meta_path, ": ", field, " holds ", n.dump(),
                                                ", not a file name"));
      const std::string name = n.get<std::string>();
      absl::StatusOr<std::string> path = path_inside(dir, name, meta_path, field);
      if (!path.ok()) {
        if (s != split) continue;  // the other split refuses it when it is read
        return path.status();
      }
      std::error_code ec;
      fs::path key = fs::weakly_canonical(*path, ec);
      if (ec) key = fs::path(*path).lexically_normal();
      auto [it, fresh] = seen.emplace(key.string(), s);
      if (!fresh && (s == split || it->second == split))
        return absl::DataLossError(absl::StrCat(
            meta_path, ": shard ", name, " is listed ",
            it->second == s ? absl::StrCat("twice in ", field)
                            : absl::StrCat("in both train.shards and val.shards"),
            "; a data directory lists each shard once (a validation shard must never be trained "
            "on): re-run vtrain prepare"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DataLoader> DataLoader::open(const std::string& data_dir, const std::string& split,
                                            const LoaderOptions& opts) {
  DataLoader dl;
  dl.dir_ = data_dir;
  dl.split_ = split;
  std::error_code ec;
  if (!fs::is_directory(data_dir, ec)) {
    return absl::NotFoundError(absl::StrCat("data directory ", data_dir,
                                            " does not exist; create it with `vtrain prepare`"));
  }
  const fs::path meta_path = fs::path(data_dir) / kMetaFile;
  std::vector<std::string> names;
  int64_t meta_vocab = 0;
  if (fs::exists(meta_path)) {
    std::ifstream f(meta_path);
    nlohmann::json meta = nlohmann::json::parse(f, nullptr, false);
    if (meta.is_discarded() || !meta.is_object() || !meta.contains("tokenizer") ||
        !meta.contains(split)) {
      return absl::DataLossError(absl::StrCat(meta_path.string(), " is not valid vtrain data metadata ",
                                              "(needs \"tokenizer\" and \"", split, "\"); re-run prepare"));
    }
    try {
      meta_vocab = json_integer<int64_t>(meta.at("tokenizer").at("vocab_size"));
      for (const auto& n : meta.at(split).at("shards")) names.push_back(n.get<std::string>());
    } catch (const nlohmann::json::exception& e) {
      return absl::DataLossError(absl::StrCat(meta_path.string(), ": ", e.what()));
    }
    VT_RETURN_IF_ERROR(check_shard_names(data_dir, meta_path.string(), meta, split));
  } else {
    for (const auto& e : fs::directory_iterator(data_dir, ec)) {
      const std::string name = e.path().filename().string();
      if (!e.is_regular_file() || !name.ends_with(".bin")) continue;
      for (absl::string_view part : absl::StrSplit(name.substr(0, name.size() - 4), '_')) {
        if (part == split) {
          names.push_back(name);
          break;
        }
      }
    }
    std::sort(names.begin(), names.end());
  }
  dl.vocab_size_ = opts.vocab_size > 0 ? opts.vocab_size : meta_vocab;
  if (dl.vocab_size_ <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        data_dir, " has no meta.json to give the vocabulary size; pass it explicitly (LoaderOptions)"));
  }
  if (opts.vocab_size > 0 && meta_vocab > 0 && opts.vocab_size != meta_vocab) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the model's vocabulary (%d) differs from the data's (%d in %s); use matching data or model",
        opts.vocab_size, meta_vocab, meta_path.string()));
  }
  if (names.empty()) {
    return absl::NotFoundError(absl::StrCat(
        data_dir, " has no ", split, " shards",
        split == "val" ? " (prepare with --val-fraction > 0 to make a validation split)" : ""));
  }
  for (const std::string& n : names) {
    // Listed or found in the directory: either way a file inside it (a link out is refused).
    VT_ASSIGN_OR_RETURN(const std::string path,
                        path_inside(data_dir, n, fs::exists(meta_path) ? meta_path.string() : data_dir,
                                    absl::StrCat(split, ".shards")));
    VT_ASSIGN_OR_RETURN(ShardReader r, ShardReader::open(path));
    dl.total_tokens_ += r.num_tokens();
    dl.paths_.push_back(path);
    dl.shards_.push_back(std::move(r));
  }
  if (dl.total_tokens_ < 2) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the %s split of %s holds %d token(s); at least 2 are needed for one (input, target) pair",
        split, data_dir, dl.total_tokens_));
  }
  dl.state_.shuffle = opts.shuffle_shards;
  dl.state_.seed = opts.seed;
  dl.state_ = dl.locate(0, 0);  // skips leading empty shards
  return dl;
}

int64_t DataLoader::shard_at(int64_t epoch, int64_t k) const {
  if (!state_.shuffle) return k;
  if (perm_epoch_ != epoch) {
    const int64_t n = num_shards();
    perm_.resize(n);
    for (int64_t i = 0; i < n; ++i) perm_[i] = i;
    Rng rng = Rng::for_name(state_.seed, absl::StrCat("data-shard-order-epoch-", epoch));
    for (int64_t i = n - 1; i > 0; --i) {
      const int64_t j = static_cast<int64_t>(rng.next_u64() % static_cast<uint64_t>(i + 1));
      std::swap(perm_[i], perm_[j]);
    }
    perm_epoch_ = epoch;
  }
  return perm_[k];
}

int64_t DataLoader::epoch_position(const LoaderState& s) const {
  int64_t pos = s.offset;
  for (int64_t k = 0; k < s.shard; ++k) pos += shards_[shard_at(s.epoch, k)].num_tokens();
  return pos;
}

LoaderState DataLoader::locate(int64_t epoch, int64_t pos) const {
  LoaderState s = state_;
  s.epoch = epoch + pos / total_tokens_;
  pos %= total_tokens_;
  for (int64_t k = 0; k < num_shards(); ++k) {
    const int64_t n = shards_[shard_at(s.epoch, k)].num_tokens();
    if (pos < n) {
      s.shard = k;
      s.offset = pos;
      return s;
    }
    pos -= n;
  }
  VT_CHECK_MSG(false, "position beyond the epoch");
  return s;
}

absl::Status DataLoader::read(LoaderState p, int64_t count, int32_t* out) const {
  while (count > 0) {
    const ShardReader& r = shards_[shard_at(p.epoch, p.shard)];
    const int64_t take = std::min(count, r.num_tokens() - p.offset);
    r.read(p.offset, take, out);
    for (int64_t i = 0; i < take; ++i) {
      if (out[i] < 0 || out[i] >= vocab_size_) {
        return absl::DataLossError(absl::StrFormat(
            "shard %s: token id %d at offset %d is outside the vocabulary [0, %d); the shard was "
            "made with another tokenizer or is corrupt; re-run vtrain prepare",
            r.path(), static_cast<uint32_t>(out[i]), p.offset + i, vocab_size_));
      }
    }
    out += take;
    count -= take;
    p = locate(p.epoch, epoch_position(p) + take);
  }
  return absl::OkStatus();
}

absl::Status DataLoader::next_batch_into(int64_t global_rows, int64_t seq_len, int dp_rank,
                                         int dp_size, int32_t* inputs, int32_t* targets) {
  if (global_rows <= 0 || seq_len <= 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "batch shape must be positive: global rows %d, sequence length %d", global_rows, seq_len));
  }
  if (dp_size <= 0 || dp_rank < 0 || dp_rank >= dp_size) {
    return absl::InvalidArgumentError(absl::StrFormat("bad data-parallel rank %d of %d", dp_rank, dp_size));
  }
  if (global_rows % dp_size != 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "the global batch of %d rows does not split evenly over %d data-parallel ranks; pick a "
        "global batch that is a multiple of dp * micro-batch",
        global_rows, dp_size));
  }
  const int64_t local_rows = global_rows / dp_size;
  const int64_t n = local_rows * seq_len;
  std::vector<int32_t> buf(n + 1);
  const LoaderState start = locate(state_.epoch, epoch_position(state_) + dp_rank * n);
  VT_RETURN_IF_ERROR(read(start, n + 1, buf.data()));
  for (int64_t r = 0; r < local_rows; ++r) {
    std::copy_n(buf.data() + r * seq_len, seq_len, inputs + r * seq_len);
    std::copy_n(buf.data() + r * seq_len + 1, seq_len, targets + r * seq_len);
  }
  state_ = locate(state_.epoch, epoch_position(state_) + global_rows * seq_len);
  return absl::OkStatus();
}

absl::StatusOr<Batch> DataLoader::next_batch(int64_t global_rows, int64_t seq_len, int dp_rank,
                                             int dp_size) {
  const int64_t local_rows = dp_size > 0 ? global_rows / dp_size : 0;
  Batch b;
  b.inputs = Tensor::zeros({std::max<int64_t>(local_rows, 1), std::max<int64_t>(seq_len, 1)}, DType::kI32);
  b.targets = Tensor::zeros({std::max<int64_t>(local_rows, 1), std::max<int64_t>(seq_len, 1)}, DType::kI32);
  VT_RETURN_IF_ERROR(next_batch_into(global_rows, seq_len, dp_rank, dp_size, b.inputs.i32(), b.targets.i32()));
  return b;
}

absl::Status DataLoader::set_state(const LoaderState& s) {
  if (s.epoch < 0 || s.shard < 0 || s.shard >= num_shards() || s.offset < 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "loader state (epoch %d, shard %d, offset %d) is out of range for the %d %s shards of %s",
        s.epoch, s.shard, s.offset, num_shards(), split_, dir_));
  }
  const LoaderState old = state_;
  state_.shuffle = s.shuffle;
  state_.seed = s.seed;
  perm_epoch_ = -1;
  const int64_t n = shards_[shard_at(s.epoch, s.shard)].num_tokens();
  if (s.offset >= n) {
    state_ = old;
    perm_epoch_ = -1;
    return absl::InvalidArgumentError(absl::StrFormat(
        "loader state offset %d is past the end of shard position %d (%d tokens) in %s; the data "
        "directory changed since the state was saved",
        s.offset, s.shard, n, dir_));
  }
  state_ = s;
  return absl::OkStatus();
}

nlohmann::json DataLoader::state_json() const {
  return {{"split", split_},         {"epoch", state_.epoch},
          {"shard", state_.shard},   {"offset", state_.offset},
          {"shuffle", state_.shuffle}, {"seed", state_.seed},
          {"num_shards", num_shards()}, {"tokens_per_epoch", total_tokens_}};
}

absl::Status DataLoader::load_state_json(const nlohmann::json& j) {
  if (j.is_object() && j.contains("mixture") && j.contains("sources") && j["sources"].is_object()) {
    std::string names;
    for (const auto& [name, _] : j["sources"].items()) names += (names.empty() ? "" : ", ") + name;
    return absl::InvalidArgumentError(absl::StrCat(
        "the checkpoint's loader state is a mixture's (sources ", names, "), and --data is one "
        "directory: resume it with a mixture --data naming its sources (a single one as "
        "NAME=DIR:1 continues where that source stopped), or start from scratch"));
  }
  LoaderState s;
  int64_t nshards = 0, tokens = 0;
  std::string split;
  try {
    split = j.at("split").get<std::string>();
    s.epoch = json_integer<int64_t>(j.at("epoch"));
    s.shard = json_integer<int64_t>(j.at("shard"));
    s.offset = json_integer<int64_t>(j.at("offset"));
    s.shuffle = j.at("shuffle").get<bool>();
    s.seed = json_integer<uint64_t>(j.at("seed"));
    nshards = json_integer<int64_t>(j.at("num_shards"));
    tokens = json_integer<int64_t>(j.at("tokens_per_epoch"));
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("malformed loader state ", j.dump(), ": ", e.what()));
  }
  if (split != split_) {
    return absl::InvalidArgumentError(absl::StrCat("loader state is for the '", split,
                                                   "' split, this loader reads '", split_, "'"));
  }
  if (nshards != num_shards() || tokens != total_tokens_) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "loader state was saved over %d %s shards with %d tokens, but %s now has %d shards with %d "
        "tokens; resume with the same data directory",
        nshards, split_, tokens, dir_, num_shards(), total_tokens_));
  }
  return set_state(s);
}

}  // namespace vt::data
