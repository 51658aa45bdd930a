// optim_case: runs the optimizer (DistributedOptimizer on a 1-rank ProcessGrid over
// self_communicator(), as one process trains) for a few steps on a small ParamStore holding
// parameters of every group (square, wide and tall matrices for Muon; embedding, lm_head, value
// table and scalars for AdamW) with deterministic random params and grads, and writes everything to one
// HDF5 file for the independent numpy check (tests/optim/test_optim_numpy.py):
//   attribute "config" on /      JSON: optimizer hyperparameters (as used) + case settings
//   /params_before/<name>        f32, attribute "group"
//   /step_<k>/grads/<name>       f32, the gradients given at step k (before any clipping)
//   /step_<k>/params/<name>      f32, the parameters after step k
//   /stats/<field>               f64 (steps,): lr_multiplier, matrix_lr, momentum, grad_norm,
//                                clip_scale, muon_weight_decay
//   /final_state/<name>/<kind>   f32, optimizer states after the last step
// Usage: optim_case --out FILE [--ns standard|polar_express] [--steps 5] [--total-steps N]
//        [--step-offset K] [--seed S] [--d-model D] [--warmup W] [--max-grad-norm X]
//        [--muon-wd X] [--aspect fan_out_over_fan_in|rows_over_cols]
//        [--muon-wd-style decoupled|nanochat] [--muon-momentum warmup|nanochat]
#include <hdf5.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/check.h"
#include "core/communicator.h"
#include "core/rng.h"
#include "optim/distributed_optimizer.h"
#include "parallel/process_grid.h"

namespace {

using vt::ParamGroup;
using vt::ParamStore;

struct Args {
  std::string out;
  std::string ns = "standard";
  std::string aspect = "fan_out_over_fan_in";
  int64_t steps = 5;
  int64_t total_steps = -1;  // default: steps + step_offset
  int64_t step_offset = 0;
  uint64_t seed = 1234;
  int64_t d_model = 64;
  int64_t warmup = 2;
  double max_grad_norm = 0.0;
  double muon_wd = 0.0;
  std::string muon_wd_style = "decoupled";
  std::string muon_momentum = "warmup";
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "optim_case: %s\n", why.c_str());
  std::fprintf(stderr,
               "usage: optim_case --out FILE [--ns standard|polar_express] [--steps N] "
               "[--total-steps N] [--step-offset K] [--seed S] [--d-model D] [--warmup W] "
               "[--max-grad-norm X] [--muon-wd X] [--aspect fan_out_over_fan_in|rows_over_cols] "
               "[--muon-wd-style decoupled|nanochat] [--muon-momentum warmup|nanochat]\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage("missing value after " + k);
    const std::string v = argv[++i];
    if (k == "--out") a.out = v;
    else if (k == "--ns") a.ns = v;
    else if (k == "--aspect") a.aspect = v;
    else if (k == "--steps") a.steps = std::stoll(v);
    else if (k == "--total-steps") a.total_steps = std::stoll(v);
    else if (k == "--step-offset") a.step_offset = std::stoll(v);
    else if (k == "--seed") a.seed = std::stoull(v);
    else if (k == "--d-model") a.d_model = std::stoll(v);
    else if (k == "--warmup") a.warmup = std::stoll(v);
    else if (k == "--max-grad-norm") a.max_grad_norm = std::stod(v);
    else if (k == "--muon-wd") a.muon_wd = std::stod(v);
    else if (k == "--muon-wd-style") a.muon_wd_style = v;
    else if (k == "--muon-momentum") a.muon_momentum = v;
    else usage("unknown flag " + k);
  }
  if (a.out.empty()) usage("--out is required");
  if (a.ns != "standard" && a.ns != "polar_express") usage("--ns must be standard or polar_express");
  if (a.aspect != "fan_out_over_fan_in" && a.aspect != "rows_over_cols") usage("bad --aspect");
  if (a.muon_wd_style != "decoupled" && a.muon_wd_style != "nanochat") usage("bad --muon-wd-style");
  if (a.muon_momentum != "warmup" && a.muon_momentum != "nanochat") usage("bad --muon-momentum");
  if (a.steps < 1 || a.d_model < 16) usage("need --steps >= 1 and --d-model >= 16");
  if (a.total_steps < 0) a.total_steps = a.steps + a.step_offset;
  return a;
}

// ---- HDF5 helpers (C API) -------------------------------------------------------------------

hid_t lcpl() {
  static hid_t p = [] {
    hid_t q = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(q, 1);
    return q;
  }();
  return p;
}

void write_string_attr(hid_t obj, const char* name, const std::string& value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, H5T_VARIABLE);
  H5Tset_cset(type, H5T_CSET_UTF8);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  VT_CHECK_MSG(attr >= 0, "cannot create attribute " << name);
  const char* s = value.c_str();
  VT_CHECK(H5Awrite(attr, type, &s) >= 0);
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

hid_t write_dataset(hid_t file, const std::string& path, hid_t mem_type, hid_t file_type,
                    const void* data, const vt::Shape& shape) {
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t ds = H5Dcreate2(file, path.c_str(), file_type, space, lcpl(), H5P_DEFAULT, H5P_DEFAULT);
  VT_CHECK_MSG(ds >= 0, "cannot create dataset " << path);
  VT_CHECK(H5Dwrite(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0);
  H5Sclose(space);
  return ds;
}

void write_f32(hid_t file, const std::string& path, const vt::Tensor& t,
               const char* group = nullptr) {
  hid_t ds = write_dataset(file, path, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE, t.f32(), t.shape());
  if (group) write_string_attr(ds, "group", group);
  H5Dclose(ds);
}

void write_f64(hid_t file, const std::string& path, const std::vector<double>& v) {
  H5Dclose(write_dataset(file, path, H5T_NATIVE_DOUBLE, H5T_IEEE_F64LE, v.data(),
                         {static_cast<int64_t>(v.size())}));
}

// ---- the case -----------------------------------------------------------------------------

void build_store(ParamStore& s, int64_t d) {
  const int64_t vp = 128;
  s.add("wte", {vp, d}, ParamGroup::kEmbedding);
  s.add("blocks.0.attn.wq", {d, d}, ParamGroup::kMatrix);        // square
  s.add("blocks.0.mlp.fc", {d, 4 * d}, ParamGroup::kMatrix);     // wide
  s.add("blocks.0.mlp.proj", {4 * d, d}, ParamGroup::kMatrix);   // tall
  s.add("blocks.1.attn.wv", {d, d / 2}, ParamGroup::kMatrix);    // GQA-like, tall
  s.add("blocks.1.value.gate_w", {12, 2}, ParamGroup::kMatrix);  // small tall
  s.add("blocks.1.value.table", {vp, d / 2}, ParamGroup::kValueTable);
  s.add("blocks.1.value.gain", {1}, ParamGroup::kScalar);
  s.add("blocks.1.value.dense", {3}, ParamGroup::kScalar);
  s.add("value_plus.logits", {5}, ParamGroup::kScalar);
  s.add("blocks.1.attn.alpha", {4}, ParamGroup::kGain);
  s.add("blocks.1.mlp_gain", {1}, ParamGroup::kGain);
  s.add("smear.gate_w", {24, 1}, ParamGroup::kSmear);
  s.add("smear.lambda", {1}, ParamGroup::kSmear);
  s.add("lm_head", {d, vp}, ParamGroup::kLmHead);
  s.finalize();
}

// Deterministic fill: per parameter stream keyed by (seed, tag/name); a per-parameter scale
// varies magnitudes across parameters so the groups see different regimes.
void fill(ParamStore& s, uint64_t seed, const std::string& tag, bool grads) {
  for (int i = 0; i < s.size(); ++i) {
    const vt::ParamInfo& info = s.info(i);
    vt::Rng r = vt::Rng::for_name(seed, tag + "/" + info.name);
    const double scale = 0.25 + 0.5 * r.uniform();
    float* x = grads ? s.grad(i).f32() : s.param(i).f32();
    for (int64_t k = 0; k < info.numel(); ++k) x[k] = static_cast<float>(scale * r.normal());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  ParamStore store;
  build_store(store, a.d_model);

  vt::optim::OptimizerConfig cfg = vt::optim::OptimizerConfig::defaults(a.d_model);
  cfg.muon.ns = a.ns == "polar_express" ? vt::optim::NsKind::kPolarExpress
                                        : vt::optim::NsKind::kStandard;
  cfg.muon.aspect = a.aspect == "rows_over_cols" ? vt::optim::MuonAspect::kRowsOverCols
                                                 : vt::optim::MuonAspect::kFanOutOverFanIn;
  cfg.muon.weight_decay = a.muon_wd;
  if (a.muon_wd_style == "nanochat") cfg.muon.wd_style = vt::optim::MuonWdStyle::kNanochat;
  if (a.muon_momentum == "nanochat")
    cfg.schedule.momentum_schedule = vt::optim::MomentumSchedule::kNanochat;
  cfg.schedule.warmup_steps = a.warmup;
  cfg.max_grad_norm = a.max_grad_norm;
  vt::ProcessGrid grid(vt::self_communicator(), vt::GridShape{});
  vt::optim::DistributedOptimizer opt(&store, cfg, grid);

  hid_t file = H5Fcreate(a.out.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) {
    std::fprintf(stderr, "optim_case: cannot create %s\n", a.out.c_str());
    return 1;
  }
  nlohmann::json j = cfg.to_json();
  j["case"] = {{"steps", a.steps},       {"total_steps", a.total_steps},
               {"step_offset", a.step_offset}, {"seed", a.seed},
               {"d_model", a.d_model}};
  write_string_attr(file, "config", j.dump());

  fill(store, a.seed, "param", false);
  for (int i = 0; i < store.size(); ++i) {
    const vt::ParamInfo& info = store.info(i);
    write_f32(file, "/params_before/" + info.name, store.param(i),
              vt::param_group_name(info.group));
  }

  std::map<std::string, std::vector<double>> stats;
  for (int64_t k = 0; k < a.steps; ++k) {
    store.zero_grads();
    fill(store, a.seed, "grad" + std::to_string(k), true);
    const std::string step = "/step_" + std::to_string(k);
    for (int i = 0; i < store.size(); ++i)
      write_f32(file, step + "/grads/" + store.info(i).name, store.grad(i));
    const vt::optim::StepStats st = opt.step(a.step_offset + k, a.total_steps);
    stats["lr_multiplier"].push_back(st.lr_multiplier);
    stats["matrix_lr"].push_back(st.matrix_lr);
    stats["momentum"].push_back(st.momentum);
    stats["grad_norm"].push_back(st.grad_norm);
    stats["clip_scale"].push_back(st.clip_scale);
    stats["muon_weight_decay"].push_back(st.muon_weight_decay);
    for (int i = 0; i < store.size(); ++i)
      write_f32(file, step + "/params/" + store.info(i).name, store.param(i));
  }
  for (const auto& [name, v] : stats) write_f64(file, "/stats/" + name, v);
  for (int i = 0; i < store.size(); ++i) {
    const std::string& name = store.info(i).name;
    for (const std::string& kind : opt.state_kinds(name))
      write_f32(file, "/final_state/" + name + "/" + kind, opt.gather_state(name, kind));
  }
  H5Fclose(file);
  std::printf("optim_case: wrote %s (%lld steps, ns=%s)\n", a.out.c_str(),
              static_cast<long long>(a.steps), a.ns.c_str());
  return 0;
}
