// The optimizer (DistributedOptimizer, on a 1-rank grid) on a device store, through the device
// emulator (Device::kCUDA tensors in host memory that host code may not touch, every op computed
// by the CPU kernels): the same run on a CPU store and on a device store with identical values
// and gradients must give bitwise equal AdamW parameters, optimizer states, grad norms and clip
// scales (same kernels), bitwise equal Muon parameters (the op-level Newton-Schulz is the host
// one step for step, see muon.h), a refreshed bf16 compute copy after every step, and host
// tensors from gather_state. Any host access to device memory fails the run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/ops.h"
#include "core/rng.h"
#include "optim/clip.h"
#include "optim/distributed_optimizer.h"
#include "optim/grad_sync.h"
#include "optim/muon.h"
#include "optim/optimizer.h"
#include "core/communicator.h"
#include "parallel/process_grid.h"

namespace vt::optim {
namespace {

class EmulatorEnv : public ::testing::Environment {
 public:
  void SetUp() override { set_device_backend(make_device_emulator()); }
  void TearDown() override { set_device_backend(nullptr); }
};
const ::testing::Environment* const kEnv =
    ::testing::AddGlobalTestEnvironment(new EmulatorEnv);

constexpr Device kDev = Device::kCUDA;
constexpr int kSteps = 5;
constexpr double kMuonTol = 0.0;  // Muon parameters device vs CPU: bitwise

struct Spec {
  std::string name;
  Shape shape;
  ParamGroup group;
};

std::vector<Spec> specs() {
  return {
      {"wte", {2100, 16}, ParamGroup::kEmbedding},  // > 32768 elements: several norm chunks
      {"blocks.0.attn.wq", {16, 16}, ParamGroup::kMatrix},
      {"blocks.0.mlp.fc", {16, 32}, ParamGroup::kMatrix},     // wide
      {"blocks.0.mlp.proj", {32, 16}, ParamGroup::kMatrix},   // tall: transposed NS
      {"blocks.0.value.gate_w", {12, 2}, ParamGroup::kMatrix},
      {"blocks.0.value.table", {26, 7}, ParamGroup::kValueTable},
      {"blocks.0.value.gain", {1}, ParamGroup::kScalar},
      {"value_plus.logits", {5}, ParamGroup::kScalar},
      {"blocks.1.attn.wv", {9, 6}, ParamGroup::kMatrix},      // odd rows, tall
      {"lm_head", {16, 24}, ParamGroup::kLmHead},
  };
}

std::vector<float> draw(uint64_t seed, const std::string& name, int64_t n, double stddev) {
  Rng r = Rng::for_name(seed, name);
  std::vector<float> x(n);
  for (auto& v : x) v = static_cast<float>(r.normal(0.0, stddev));
  return x;
}

void set(const Tensor& dst, std::vector<float> v) {
  ASSERT_EQ(dst.numel(), static_cast<int64_t>(v.size()));
  dst.copy_from(Tensor::view(v.data(), dst.shape()));  // host -> store's device
}

std::unique_ptr<ParamStore> make_store(Device device, DType compute) {
  auto s = std::make_unique<ParamStore>();
  for (const Spec& p : specs()) s->add(p.name, p.shape, p.group);
  s->finalize(device, compute);
  for (int i = 0; i < s->size(); ++i) {
    const ParamInfo& info = s->info(i);
    set(s->param(i), draw(7, info.name, info.numel(), 0.5));
  }
  s->refresh_compute_copy();
  return s;
}

void set_grads(ParamStore& s, int step) {
  s.zero_grads();
  for (int i = 0; i < s.size(); ++i) {
    const ParamInfo& info = s.info(i);
    set(s.grad(i), draw(100 + step, info.name, info.numel(), 0.05));
  }
}

std::vector<float> host(const Tensor& t) { return t.to_host_f32(); }

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

// Bitwise equality of two float vectors (NaNs compare by bits too).
bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() &&
         std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           uint32_t bx, by;
           std::memcpy(&bx, &x, 4);
           std::memcpy(&by, &y, 4);
           return bx == by;
         });
}

// The bf16 compute copy must be the rounding of the master weights (refreshed after the step).
void expect_compute_copy_fresh(const ParamStore& s) {
  if (s.compute_dtype() != DType::kBF16) return;
  for (int i = 0; i < s.size(); ++i) {
    const Tensor master = s.param(i).to(Device::kCPU);
    const std::vector<float> want = master.to(Device::kCPU, DType::kBF16).to_host_f32();
    EXPECT_TRUE(same_bits(host(s.compute_param(i)), want)) << s.info(i).name;
  }
}

struct Scenario {
  std::string label;
  OptimizerConfig cfg;
};

std::vector<Scenario> scenarios() {
  Scenario a{"standard", OptimizerConfig::defaults(768)};
  a.cfg.schedule.warmup_steps = 2;
  Scenario b{"polar+wd+clip", OptimizerConfig::defaults(768)};
  b.cfg.schedule.warmup_steps = 1;
  b.cfg.muon.ns = NsKind::kPolarExpress;
  b.cfg.muon.weight_decay = 0.1;
  b.cfg.muon.aspect = MuonAspect::kRowsOverCols;
  b.cfg.max_grad_norm = 0.3;
  return {a, b};
}

// Parameters after a step: AdamW groups bitwise, Muon groups to round-off.
void expect_params_match(const ParamStore& dev, const ParamStore& cpu) {
  for (int i = 0; i < cpu.size(); ++i) {
    const ParamInfo& info = cpu.info(i);
    const auto got = host(dev.param(i)), want = host(cpu.param(i));
    if (muon_handles(info.group)) {
      EXPECT_LE(rel_err(got, want), kMuonTol) << info.name;
    } else {
      EXPECT_TRUE(same_bits(got, want)) << info.name;
    }
  }
}

TEST(OptimDevice, StoreAndStatesLiveOnTheDevice) {
  auto s = make_store(kDev, DType::kF32);
  EXPECT_EQ(s->params_tensor().device(), kDev);
  // Host access to the device store fails (the emulator is a real device for host code).
  EXPECT_DEATH_IF_SUPPORTED(s->param(0).f32(), "host access");
}

TEST(OptimDevice, GradNormAndClippingMatchTheCpu) {
  auto d = make_store(kDev, DType::kF32), c = make_store(Device::kCPU, DType::kF32);
  set_grads(*d, 0);
  set_grads(*c, 0);
  EXPECT_EQ(grad_sum_squares(*d), grad_sum_squares(*c));
  EXPECT_EQ(grad_norm(*d), grad_norm(*c));
  ProcessGrid grid(self_communicator(), GridShape{1, 1, 1});
  const auto mask = grad_norm_mask(*c, grid);
  EXPECT_EQ(global_grad_norm(*d, grid, mask), global_grad_norm(*c, grid, mask));
  double sd = 0, sc = 0;
  EXPECT_EQ(clip_grad_norm(*d, 0.1, &sd), clip_grad_norm(*c, 0.1, &sc));
  EXPECT_EQ(sd, sc);
  EXPECT_LT(sd, 1.0);
  all_reduce_grads(*d, grid.dp());  // size 1: nothing, but no host access either
  EXPECT_TRUE(same_bits(host(d->grads_tensor()), host(c->grads_tensor())));
}

TEST(OptimDevice, NewtonSchulzOnTensors) {
  for (const NsCoefficients& co : {NsCoefficients::standard(), NsCoefficients::polar_express()}) {
    for (const auto& [rows, cols] : std::vector<std::pair<int, int>>{{16, 32}, {32, 16}, {9, 6},
                                                                     {12, 12}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(cols));
      std::vector<float> g = draw(3, "ns", int64_t{rows} * cols, 1.0);
      std::vector<float> ref(g.size());
      newton_schulz(g.data(), rows, cols, ref.data(), 5, co);

      // CPU tensors: the host function, bitwise.
      const Tensor gc = Tensor::from_host(g.data(), {rows, cols}, Device::kCPU);
      const Tensor oc = Tensor::zeros({rows, cols});
      newton_schulz(gc, rows, cols, oc, 5, co);
      EXPECT_TRUE(same_bits(host(oc), ref));

      // Device tensors: the op-level algorithm, bitwise what it gives on CPU tensors, and the
      // host result to float round-off.
      const Tensor gd = Tensor::from_host(g.data(), {rows * cols}, kDev);
      const Tensor od = Tensor::zeros({rows * cols}, DType::kF32, kDev);
      newton_schulz(gd, rows, cols, od, 5, co);
      const Tensor oo = Tensor::zeros({rows, cols});
      newton_schulz_ops(gc, rows, cols, oo, 5, co);
      EXPECT_TRUE(same_bits(host(od), host(oo)));
      EXPECT_LE(rel_err(host(od), ref), 1e-5);
      EXPECT_EQ(host(gd), g);  // input untouched

      // bf16 iterations (the GPU default): the device gives the CPU tensors' bits (the buffers
      // are not zero-filled and the GEMMs read their beta terms in place: the emulated device's
      // poisoned fresh memory would show any read of an unwritten element), on a device output
      // that starts as garbage.
      const Tensor ob = Tensor::from_host(std::vector<float>(g.size(), std::nanf("")).data(),
                                          {rows * cols}, kDev);
      newton_schulz(gd, rows, cols, ob, 5, co, DType::kBF16);
      const Tensor obc = Tensor::zeros({rows, cols});
      newton_schulz_ops(gc, rows, cols, obc, 5, co, DType::kBF16);
      EXPECT_TRUE(same_bits(host(ob), host(obc)));
      EXPECT_LE(rel_err(host(ob), ref), 0.05);

      // Transposed input gives the bitwise transpose on the device too.
      std::vector<float> gt(g.size());
      for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) gt[int64_t{c} * rows + r] = g[int64_t{r} * cols + c];
      const Tensor gtd = Tensor::from_host(gt.data(), {cols, rows}, kDev);
      const Tensor otd = Tensor::zeros({cols, rows}, DType::kF32, kDev);
      newton_schulz(gtd, cols, rows, otd, 5, co);
      const auto ot = host(otd), o = host(od);
      if (rows != cols) {
        bool transposed = true;
        for (int r = 0; r < rows; ++r)
          for (int c = 0; c < cols; ++c)
            transposed = transposed && ot[int64_t{c} * rows + r] == o[int64_t{r} * cols + c];
        EXPECT_TRUE(transposed);
      }
    }
  }
}

TEST(OptimDevice, DistributedOptimizerMatchesTheCpuStore) {
  ProcessGrid grid(self_communicator(), GridShape{1, 1, 1});
  for (const Scenario& sc : scenarios()) {
    for (DType compute : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE(sc.label + (compute == DType::kBF16 ? " bf16" : " f32"));
      auto d = make_store(kDev, compute), c = make_store(Device::kCPU, compute);
      auto od = std::make_unique<DistributedOptimizer>(d.get(), sc.cfg, grid);
      auto oc = std::make_unique<DistributedOptimizer>(c.get(), sc.cfg, grid);
      EXPECT_EQ(od->muon_state_numel(), oc->muon_state_numel());
      EXPECT_EQ(od->adamw_state_numel(), oc->adamw_state_numel());
      bool clipped = false;
      for (int step = 0; step < kSteps; ++step) {
        SCOPED_TRACE("step " + std::to_string(step));
        set_grads(*d, step);
        set_grads(*c, step);
        const StepStats sd = od->step(step, kSteps), scpu = oc->step(step, kSteps);
        EXPECT_EQ(sd.grad_norm, scpu.grad_norm);
        EXPECT_EQ(sd.clip_scale, scpu.clip_scale);
        EXPECT_EQ(sd.lr_multiplier, scpu.lr_multiplier);
        clipped = clipped || sd.clip_scale < 1.0;
        expect_params_match(*d, *c);
        expect_compute_copy_fresh(*d);
        expect_compute_copy_fresh(*c);
        // States: host tensors of the local shape, bitwise equal (momentum and AdamW moments
        // depend on the gradients only).
        for (const Spec& p : specs()) {
          for (const auto& kind : od->state_kinds(p.name)) {
            const Tensor td = od->gather_state(p.name, kind), tc = oc->gather_state(p.name, kind);
            EXPECT_TRUE(td.on_host()) << p.name << " " << kind;
            EXPECT_EQ(td.dtype(), DType::kF32);
            EXPECT_EQ(td.shape(), p.shape);
            EXPECT_TRUE(same_bits(host(td), host(tc))) << p.name << " " << kind;
          }
        }
        if (step == 2) {
          // Checkpoint round trip into a fresh optimizer on each store: from host tensors on
          // the device store, and from device tensors too.
          auto nd = std::make_unique<DistributedOptimizer>(d.get(), sc.cfg, grid);
          auto nc = std::make_unique<DistributedOptimizer>(c.get(), sc.cfg, grid);
          for (const Spec& p : specs()) {
            for (const auto& kind : od->state_kinds(p.name)) {
              const Tensor t = oc->gather_state(p.name, kind);
              if (p.group == ParamGroup::kScalar) {
                nd->scatter_state(p.name, kind, t.to(kDev));
              } else {
                nd->scatter_state(p.name, kind, t);
              }
              nc->scatter_state(p.name, kind, t);
              EXPECT_TRUE(same_bits(host(nd->gather_state(p.name, kind)), host(t)));
            }
          }
          nd->set_step_count(od->step_count());
          nc->set_step_count(oc->step_count());
          od = std::move(nd);
          oc = std::move(nc);
        }
      }
      if (sc.cfg.max_grad_norm > 0) EXPECT_TRUE(clipped) << "the clip scenario must clip";
      EXPECT_EQ(od->step_count(), kSteps);
    }
  }
}

}  // namespace
}  // namespace vt::optim
