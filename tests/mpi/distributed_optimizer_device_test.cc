// DistributedOptimizer and all_reduce_grads on a device store under MPI, through the device
// emulator: on every (tp, pp) layout that fits the world, each rank runs the same steps on a CPU
// store and on a device store holding identical TP-sliced, PP-partitioned values and gradients.
// Gradient sync, grad norms, clip scales, AdamW parameters and every optimizer state must be
// bitwise equal (same kernels, same collectives), Muon parameters included (see muon.h). The
// device run goes through
// the communicators' Tensor calls (TP gathers, stage broadcasts, ZeRO-1 gathers) and never
// touches device memory from the host (the emulator would fail the run).
// vtrain-mpi-ranks: 2 4
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/rng.h"
#include "optim/distributed_optimizer.h"
#include "optim/grad_sync.h"
#include "parallel/mpi_communicator.h"
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
constexpr int kLayers = 2;
constexpr int kSteps = 4;
constexpr double kMuonTol = 0.0;  // bitwise
constexpr int kFirst = -1, kLast = -2, kShared = -3;  // kShared: every stage with a layer >= 1

struct Spec {
  std::string name;
  Shape shape;  // global
  ParamGroup group;
  int axis;     // TP split axis (-1 replicated)
  int where;
};

std::vector<Spec> specs() {
  std::vector<Spec> s;
  s.push_back({"wte", {24, 16}, ParamGroup::kEmbedding, 0, kFirst});
  for (int i = 0; i < kLayers; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    s.push_back({b + "attn.wq", {16, 16}, ParamGroup::kMatrix, 1, i});
    s.push_back({b + "attn.wo", {16, 16}, ParamGroup::kMatrix, 0, i});
    s.push_back({b + "mlp.fc", {16, 32}, ParamGroup::kMatrix, 1, i});
    s.push_back({b + "mlp.proj", {32, 16}, ParamGroup::kMatrix, 0, i});
    if (i == 0) {
      s.push_back({b + "value.gate_w", {12, 2}, ParamGroup::kMatrix, 1, i});
      s.push_back({b + "value.mix", {5, 4}, ParamGroup::kMatrix, -1, i});  // replicated over TP
    }
    if (i == 1) {
      s.push_back({b + "attn.wv", {9, 6}, ParamGroup::kMatrix, 1, i});  // odd rows, tall
      s.push_back({b + "value.table", {26, 7}, ParamGroup::kValueTable, 0, i});
      s.push_back({b + "value.lambda2", {1}, ParamGroup::kScalar, -1, i});
      s.push_back({"value_plus.logits", {5}, ParamGroup::kScalar, -1, kShared});
    }
  }
  s.push_back({"lm_head", {16, 1030}, ParamGroup::kLmHead, 1, kLast});
  return s;
}

// Registration metadata: the owning layer, and whether every holding stage keeps a replica.
ParamMeta meta(const Spec& s) {
  ParamMeta m;
  m.layer = s.where >= 0 ? s.where : -1;
  m.pp_replicated = s.where == kShared;
  return m;
}

bool on_stage(const Spec& s, int pp, int stage) {
  const auto [begin, end] = stage_layers(kLayers, pp, stage);
  switch (s.where) {
    case kFirst: return stage == 0;
    case kLast: return stage == pp - 1;
    case kShared: return end > 1;
    default: return s.where >= begin && s.where < end;
  }
}

std::vector<float> draw(uint64_t seed, const Spec& s, double stddev) {
  Rng r = Rng::for_name(seed, s.name);
  std::vector<float> x(shape_numel(s.shape));
  for (auto& v : x) v = static_cast<float>(r.normal(0.0, stddev));
  return x;
}

std::vector<float> tp_slice(const std::vector<float>& g, const Shape& shape, int axis, int T,
                            int r) {
  if (axis < 0 || T == 1) return g;
  const int64_t rows = shape[0], cols = shape[1];
  std::vector<float> out;
  if (axis == 0) {
    const int64_t lr = rows / T;
    out.assign(g.begin() + r * lr * cols, g.begin() + (r + 1) * lr * cols);
  } else {
    const int64_t lc = cols / T;
    for (int64_t i = 0; i < rows; ++i)
      out.insert(out.end(), g.begin() + i * cols + r * lc, g.begin() + i * cols + (r + 1) * lc);
  }
  return out;
}

void set(const Tensor& dst, std::vector<float> v) {
  ASSERT_EQ(dst.numel(), static_cast<int64_t>(v.size()));
  dst.copy_from(Tensor::view(v.data(), dst.shape()));
}

std::vector<float> host(const Tensor& t) { return t.to_host_f32(); }

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * 4) == 0);
}

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
}

class DistributedOptimizerDeviceTest : public ::testing::Test {
 protected:
  DistributedOptimizerDeviceTest() : world_(MPI_COMM_WORLD) {}
  MpiCommunicator world_;
};

TEST_F(DistributedOptimizerDeviceTest, DeviceStoreMatchesCpuStoreOnEveryLayout) {
  const int W = world_.size();
  OptimizerConfig cfg = OptimizerConfig::defaults(768);
  cfg.schedule.warmup_steps = 1;
  cfg.muon.ns = NsKind::kPolarExpress;
  cfg.muon.weight_decay = 0.1;
  cfg.max_grad_norm = 0.3;  // clipping active
  for (int tp : {1, 2}) {
    for (int pp : {1, 2}) {
      if (W % (tp * pp) != 0) continue;
      for (DType compute : {DType::kF32, DType::kBF16}) {
        const GridShape shape{tp, W / (tp * pp), pp};
        ProcessGrid grid(&world_, shape);
        const GridCoords c = grid.coords();
        SCOPED_TRACE("tp=" + std::to_string(tp) + " dp=" + std::to_string(shape.dp) +
                     " pp=" + std::to_string(pp) + (compute == DType::kBF16 ? " bf16" : " f32") +
                     " rank " + std::to_string(world_.rank()));

        std::vector<Spec> mine;
        ParamStore sc, sd;
        for (const Spec& s : specs()) {
          if (!on_stage(s, pp, c.pp)) continue;
          mine.push_back(s);
          Shape local = s.shape;
          ParamSplit split;
          if (s.axis >= 0 && tp > 1) {
            local[s.axis] /= tp;
            split = {s.axis, c.tp * local[s.axis]};
          }
          sc.add(s.name, local, s.group, s.shape, split, meta(s));
          sd.add(s.name, local, s.group, s.shape, split, meta(s));
        }
        sc.finalize(Device::kCPU, compute);
        sd.finalize(kDev, compute);
        for (const Spec& s : mine) {
          const auto v = tp_slice(draw(7, s, 0.5), s.shape, s.axis, tp, c.tp);
          set(sc.param(s.name), v);
          set(sd.param(s.name), v);
        }
        sc.refresh_compute_copy();
        sd.refresh_compute_copy();

        DistributedOptimizer oc(&sc, cfg, grid), od(&sd, cfg, grid);
        EXPECT_EQ(od.adamw_state_numel(), oc.adamw_state_numel());
        const float inv_dp = 1.0f / static_cast<float>(shape.dp);
        for (int step = 0; step < kSteps; ++step) {
          SCOPED_TRACE("step " + std::to_string(step));
          sc.zero_grads();
          sd.zero_grads();
          for (const Spec& s : mine) {
            auto g = tp_slice(draw(100 + step, s, 0.05), s.shape, s.axis, tp, c.tp);
            // Rank-dependent grads so the DP sum matters.
            for (size_t k = 0; k < g.size(); ++k) g[k] = g[k] * inv_dp * (1.0f + 0.25f * c.dp);
            set(sc.grad(s.name), g);
            set(sd.grad(s.name), g);
          }
          all_reduce_grads(sc, grid.dp(), /*bucket_elems=*/1000);
          all_reduce_grads(sd, grid.dp(), /*bucket_elems=*/1000);
          EXPECT_TRUE(same_bits(host(sd.grads_tensor()), host(sc.grads_tensor())));

          const StepStats stc = oc.step(step, kSteps), std_ = od.step(step, kSteps);
          EXPECT_EQ(std_.grad_norm, stc.grad_norm);
          EXPECT_EQ(std_.clip_scale, stc.clip_scale);
          if (step == 0) EXPECT_LT(stc.clip_scale, 1.0);
          for (const Spec& s : mine) {
            const auto got = host(sd.param(s.name)), want = host(sc.param(s.name));
            if (s.group == ParamGroup::kMatrix) {
              EXPECT_LE(rel_err(got, want), kMuonTol) << s.name;
            } else {
              EXPECT_TRUE(same_bits(got, want)) << s.name;
            }
            if (compute == DType::kBF16) {
              const int i = sd.find(s.name);
              const Tensor master = sd.param(i).to(Device::kCPU);
              EXPECT_TRUE(same_bits(host(sd.compute_param(i)),
                                    master.to(Device::kCPU, DType::kBF16).to_host_f32()))
                  << s.name;
            }
            for (const auto& kind : od.state_kinds(s.name)) {
              const Tensor td = od.gather_state(s.name, kind);
              const Tensor tc = oc.gather_state(s.name, kind);
              EXPECT_TRUE(td.on_host());
              EXPECT_EQ(td.shape(), sd.info(sd.find(s.name)).shape);
              EXPECT_TRUE(same_bits(host(td), host(tc))) << s.name << " " << kind;
            }
          }
        }
        // Scatter then gather is exact on the device store (a collective for AdamW states).
        for (const Spec& s : mine) {
          for (const auto& kind : od.state_kinds(s.name)) {
            Tensor t = oc.gather_state(s.name, kind);
            for (int64_t k = 0; k < t.numel(); ++k)
              t.f32()[k] = t.f32()[k] * 2.0f + static_cast<float>(k);
            od.scatter_state(s.name, kind, t);
            EXPECT_TRUE(same_bits(host(od.gather_state(s.name, kind)), host(t)))
                << s.name << " " << kind;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace vt::optim
