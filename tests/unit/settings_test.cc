// The settings table of `vtrain train` (train/settings.h): the saved options JSON keeps its keys
// and spellings, enumerated options parse from and save to the flag's strings, and a resume
// notes exactly the rows marked so.
#include "train/settings.h"

#include <set>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace vt {
namespace {

CommandSpec settings_command() {
  CommandSpec c;
  c.name = "settings";
  for (const TrainSetting& s : train_settings()) c.flags.push_back(s.flag);
  return c;
}

TrainOptions parse(const std::vector<std::string>& args) {
  absl::StatusOr<Flags> f = Flags::parse(settings_command(), args);
  EXPECT_TRUE(f.ok()) << f.status();
  TrainOptions o;
  read_train_settings(*f, o);
  return o;
}

// The keys checkpoints have saved since before the table (the literal to_json it replaced).
TEST(Settings, SavedOptionsKeepTheirKeys) {
  const std::set<std::string> before = {
      "data_dir", "data_sources", "tp", "pp", "vpp", "micro_batch", "global_batch", "steps",
      "eval_every", "eval_tokens", "final_eval_tokens", "seed", "matrix_lr", "scalar_lr",
      "gain_lr", "lr_scale", "warmup_steps", "warmdown_frac", "max_grad_norm", "final_lr_frac",
      "optimizer", "adamw_lr", "weight_decay", "polar_express", "device", "muon_wd",
      "muon_wd_style", "muon_wd_scale", "muon_momentum", "lr_batch_scale", "coef_optim",
      "act_dtype", "device_comm", "recompute", "fp8", "table_offload", "grad_sync", "zero",
      "cuda_graphs", "muon_ns_dtype", "core_every", "core_dir"};
  const nlohmann::json saved = TrainOptions{}.to_json();
  std::set<std::string> now;
  for (const auto& [k, v] : saved.items()) now.insert(k);
  EXPECT_EQ(now, before);
}

TEST(Settings, DefaultsSaveAsBefore) {
  const nlohmann::json j = parse({}).to_json();
  EXPECT_EQ(j["optimizer"], "muon");
  EXPECT_EQ(j["grad_sync"], "fp32");
  EXPECT_EQ(j["muon_wd_style"], "decoupled");
  EXPECT_EQ(j["muon_wd_scale"], "none");
  EXPECT_EQ(j["muon_momentum"], "warmup");
  EXPECT_EQ(j["lr_batch_scale"], "none");
  EXPECT_EQ(j["coef_optim"], "paper");
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["device_comm"], "auto");
  EXPECT_EQ(j["recompute"], "off");
  EXPECT_EQ(j["fp8"], "off");
  EXPECT_EQ(j["cuda_graphs"], "off");
  EXPECT_EQ(j["steps"], 100);
  EXPECT_EQ(j["seed"], 1337);
  EXPECT_EQ(j["warmup_steps"], 40);
  EXPECT_EQ(j["zero"], 1);
}

TEST(Settings, EnumeratedOptionsParseFromAndSaveToTheFlagsStrings) {
  const TrainOptions o = parse({"--optimizer", "adamw", "--grad-sync", "bf16", "--device",
                                "emulated", "--on-nonfinite", "skip-step", "--muon-wd-style",
                                "nanochat", "--muon-wd-scale", "nanochat", "--muon-momentum",
                                "nanochat", "--lr-batch-scale", "nanochat", "--coef-optim",
                                "vtrain", "--device-comm", "mpi", "--act-dtype", "bf16",
                                "--muon-ns-dtype", "bf16", "--recompute", "block"});
  EXPECT_EQ(o.optimizer, OptimizerKind::kAdamW);
  EXPECT_EQ(o.grad_sync, DType::kBF16);
  EXPECT_EQ(o.device, RunDevice::kEmulated);
  EXPECT_EQ(o.on_nonfinite, OnNonfinite::kSkipStep);
  EXPECT_EQ(o.muon_wd_style, optim::MuonWdStyle::kNanochat);
  EXPECT_EQ(o.muon_wd_scale, NanochatScale::kNanochat);
  EXPECT_EQ(o.muon_momentum, optim::MomentumSchedule::kNanochat);
  EXPECT_EQ(o.lr_batch_scale, NanochatScale::kNanochat);
  EXPECT_EQ(o.coef_optim, CoefOptim::kVtrain);
  EXPECT_EQ(o.device_comm, DeviceComm::kMpi);
  EXPECT_EQ(o.act_dtype, DType::kBF16);
  EXPECT_EQ(o.muon_ns_dtype, DType::kBF16);
  EXPECT_EQ(o.recompute, Recompute::kBlock);
  const nlohmann::json j = o.to_json();
  EXPECT_EQ(j["optimizer"], "adamw");
  EXPECT_EQ(j["grad_sync"], "bf16");
  EXPECT_EQ(j["device"], "emulated");
  EXPECT_EQ(j["muon_wd_style"], "nanochat");
  EXPECT_EQ(j["coef_optim"], "vtrain");
  EXPECT_EQ(j["device_comm"], "mpi");
  EXPECT_EQ(j["act_dtype"], "bf16");
  EXPECT_EQ(j["recompute"], "block");
}

TEST(Settings, FlagsWithoutADefaultKeepTheFieldUnlessGiven) {
  EXPECT_EQ(parse({}).adamw_lr, TrainOptions{}.adamw_lr);
  EXPECT_EQ(parse({"--adamw-lr", "0.004"}).adamw_lr, 0.004);
  EXPECT_FALSE(parse({"--no-overlap-grad-sync"}).overlap_grad_sync);
  EXPECT_TRUE(parse({}).overlap_grad_sync);
}

TEST(Settings, ResumeNotesTheMarkedRowsOnly) {
  TrainOptions a = parse({"--seed", "7", "--steps", "10"});
  TrainOptions b = parse({"--seed", "8", "--steps", "20", "--lr-scale", "0.5", "--grad-sync",
                          "bf16"});
  const std::string changed = changed_on_resume(a.to_json(), b.to_json());
  EXPECT_NE(changed.find("seed 7 -> 8"), std::string::npos) << changed;
  EXPECT_NE(changed.find("lr_scale 1.0 -> 0.5"), std::string::npos) << changed;
  EXPECT_NE(changed.find("grad_sync \"fp32\" -> \"bf16\""), std::string::npos) << changed;
  EXPECT_EQ(changed.find("steps"), std::string::npos) << changed;  // a longer run: no change
  EXPECT_EQ(changed_on_resume(a.to_json(), a.to_json()), "");
}

TEST(Settings, EveryNotedRowIsSavedAndEverySavedRowWrites) {
  for (const TrainSetting& s : train_settings()) {
    if (s.noted_on_resume) EXPECT_FALSE(s.saved_as.empty()) << s.flag.name;
    if (!s.saved_as.empty()) EXPECT_TRUE(s.save != nullptr) << s.flag.name;
    if (s.flag.name[0] != '#' && s.flag.name != "warmup-frac")
      EXPECT_TRUE(s.read != nullptr) << s.flag.name;
  }
}

}  // namespace
}  // namespace vt
