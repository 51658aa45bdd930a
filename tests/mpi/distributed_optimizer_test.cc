// DistributedOptimizer and all_reduce_grads under MPI: for every (tp, pp) layout that fits the
// world, a few steps on TP-sliced, PP-partitioned, DP-replicated local stores must reproduce a
// one-process run on the global parameters (the same optimizer on a 1-rank grid over
// self_communicator(), itself checked against numpy by tests/optim/test_optim_numpy.py):
// parameters, grad norms, clipping and optimizer states; checkpoint gather/scatter must
// round-trip, and ZeRO-1 must shrink the AdamW state per rank. Both gradient sums run: ZeRO-1's
// all-reduce (all_reduce_grads) and ZeRO-2's reduce into the owners (reduce_grads, f32 wire;
// every other step started layer by layer first), whose grad norm comes from the owned parts. A control test shows that orthogonalizing TP
// shards separately would fail.
// vtrain-mpi-ranks: 1 2 4 8
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/bf16.h"
#include "core/communicator.h"
#include "core/rng.h"
#include "optim/distributed_optimizer.h"
#include "optim/grad_sync.h"
#include "optim/optimizer.h"
#include "parallel/mpi_communicator.h"
#include "parallel/process_grid.h"

namespace vt::optim {
namespace {

constexpr int kLayers = 4;
constexpr int kSteps = 4;
constexpr double kTol = 1e-5;
// Where a parameter lives along the pipeline: a layer index, or one of these.
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
    s.push_back({b + "attn.wk", {16, 8}, ParamGroup::kMatrix, 1, i});
    s.push_back({b + "attn.wo", {16, 16}, ParamGroup::kMatrix, 0, i});
    s.push_back({b + "mlp.fc", {16, 32}, ParamGroup::kMatrix, 1, i});
    s.push_back({b + "mlp.proj", {32, 16}, ParamGroup::kMatrix, 0, i});
    if (i == 0) s.push_back({b + "value.gate_w", {12, 2}, ParamGroup::kMatrix, 1, i});
    if (i == 1) {
      s.push_back({b + "value.table", {26, 7}, ParamGroup::kValueTable, 0, i});
      s.push_back({b + "value.lambda2", {1}, ParamGroup::kScalar, -1, i});
      s.push_back({"value_plus.logits", {5}, ParamGroup::kScalar, -1, kShared});
      s.push_back({"value.table", {26, 7}, ParamGroup::kValueTable, 0, kShared});
    }
    if (i == 2) {
      s.push_back({b + "value.dense", {3}, ParamGroup::kScalar, -1, i});
      s.push_back({b + "value.mix", {5, 4}, ParamGroup::kMatrix, -1, i});  // replicated over TP
    }
    if (i == 3) {
      s.push_back({b + "attn.wv", {9, 6}, ParamGroup::kMatrix, 1, i});  // odd rows, tall
      s.push_back({b + "value.gain", {1}, ParamGroup::kScalar, -1, i});
    }
  }
  s.push_back({"lm_head", {16, 24}, ParamGroup::kLmHead, 1, kLast});
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
    case kShared: return end > 1;  // holds a layer >= 1
    default: return s.where >= begin && s.where < end;
  }
}

std::vector<float> draw(uint64_t seed, const Spec& s, double stddev) {
  Rng r = Rng::for_name(seed, s.name);
  std::vector<float> x(shape_numel(s.shape));
  for (auto& v : x) v = static_cast<float>(r.normal(0.0, stddev));
  return x;
}
std::vector<float> values(const Spec& s) { return draw(7, s, 0.5); }
std::vector<float> grads(const Spec& s, int step) { return draw(100 + step, s, 0.05); }

// Slice of a global 2-D (or replicated) tensor held by TP rank r of T.
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

std::vector<float> to_vec(const Tensor& t) { return {t.f32(), t.f32() + t.numel()}; }

double rel_err(const std::vector<float>& got, const std::vector<float>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(static_cast<double>(want[i])));
  }
  return diff / std::max(scale, 1e-30);
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
  b.cfg.max_grad_norm = 0.3;  // the global norms are ~4: clipping is active
  // bf16 Newton-Schulz (the GPU default): the results travel over the stage as bf16.
  Scenario c{"bf16-ns", OptimizerConfig::defaults(768)};
  c.cfg.schedule.warmup_steps = 1;
  c.cfg.muon.ns_dtype = DType::kBF16;
  return {a, b, c};
}

// The one-process run on the global parameters (a 1-rank grid on every rank).
struct Reference {
  std::vector<StepStats> stats;
  std::map<std::string, std::vector<float>> params;                 // after kSteps
  std::map<std::pair<std::string, std::string>, std::vector<float>> states;  // after 2 steps
};

Reference run_reference(const OptimizerConfig& cfg) {
  ParamStore store;
  for (const Spec& s : specs()) store.add(s.name, s.shape, s.group);
  store.finalize();
  for (const Spec& s : specs()) {
    auto v = values(s);
    std::copy(v.begin(), v.end(), store.param(s.name).f32());
  }
  ProcessGrid self(self_communicator(), GridShape{});
  DistributedOptimizer opt(&store, cfg, self);
  Reference ref;
  for (int step = 0; step < kSteps; ++step) {
    for (const Spec& s : specs()) {
      auto g = grads(s, step);
      std::copy(g.begin(), g.end(), store.grad(s.name).f32());
    }
    ref.stats.push_back(opt.step(step, kSteps));
    if (step == 1) {
      for (const Spec& s : specs())
        for (const auto& kind : opt.state_kinds(s.name))
          ref.states[{s.name, kind}] = to_vec(opt.gather_state(s.name, kind));
    }
  }
  for (const Spec& s : specs()) ref.params[s.name] = to_vec(store.param(s.name));
  return ref;
}

class DistributedOptimizerTest : public ::testing::Test {
 protected:
  DistributedOptimizerTest() : world_(MPI_COMM_WORLD) {}
  MpiCommunicator world_;
};

TEST_F(DistributedOptimizerTest, MatchesSingleProcessOnEveryLayout) {
  const int W = world_.size();
  for (const Scenario& sc : scenarios()) {
    const Reference ref = run_reference(sc.cfg);
    if (sc.cfg.max_grad_norm > 0) {
      EXPECT_LT(ref.stats[0].clip_scale, 1.0) << "the clipping scenario must actually clip";
    }
    for (int zero : {1, 2})
    for (int tp : {1, 2}) {
      for (int pp : {1, 2, 4}) {
        if (W % (tp * pp) != 0) continue;
        const GridShape shape{tp, W / (tp * pp), pp};
        ProcessGrid grid(&world_, shape);
        const GridCoords c = grid.coords();
        const std::string layout = sc.label + " zero=" + std::to_string(zero) + " tp=" + std::to_string(tp) +
                                   " dp=" + std::to_string(shape.dp) +
                                   " pp=" + std::to_string(pp) + " rank " +
                                   std::to_string(world_.rank());
        SCOPED_TRACE(layout);

        // This rank's stage of the model, TP-sliced.
        std::vector<Spec> mine;
        ParamStore store;
        for (const Spec& s : specs()) {
          if (!on_stage(s, pp, c.pp)) continue;
          mine.push_back(s);
          Shape local = s.shape;
          ParamSplit split;
          if (s.axis >= 0 && tp > 1) {
            local[s.axis] /= tp;
            split = {s.axis, c.tp * local[s.axis]};
          }
          store.add(s.name, local, s.group, s.shape, split, meta(s));
        }
        // ZeRO-2 runs with a bf16 compute copy: the output head's weight returns in bf16 into
        // it, the rest in fp32 (the masters are the reference's either way).
        store.finalize(Device::kCPU, zero == 2 ? DType::kBF16 : DType::kF32);
        for (const Spec& s : mine) {
          auto v = tp_slice(values(s), s.shape, s.axis, tp, c.tp);
          std::copy(v.begin(), v.end(), store.param(s.name).f32());
        }

        auto opt = std::make_unique<DistributedOptimizer>(&store, sc.cfg, grid, zero);
        const float inv_dp = 1.0f / static_cast<float>(shape.dp);
        for (int step = 0; step < kSteps; ++step) {
          store.zero_grads();
          for (const Spec& s : mine) {
            auto g = tp_slice(grads(s, step), s.shape, s.axis, tp, c.tp);
            float* dst = store.grad(s.name).f32();
            for (size_t k = 0; k < g.size(); ++k) dst[k] = g[k] * inv_dp;
          }
          if (zero == 1)
            all_reduce_grads(store, grid.dp(), /*bucket_elems=*/1000);  // several buckets
          else {
            if (step % 2 == 1) {  // started during "backward", as the trainer's hooks do
              opt->head_grads_done(DType::kF32);
              for (int layer = kLayers - 1; layer >= 0; --layer)
                opt->layer_grads_done(layer, DType::kF32);
            }
            opt->reduce_grads(DType::kF32);
          }
          const StepStats st = opt->step(step, kSteps);
          if (zero == 2) {  // the next forward's waits, layer by layer, then the head
            opt->finish_param_gathers(-1);
            for (int layer = 0; layer < kLayers; ++layer) opt->finish_param_gathers(layer);
            opt->finish_param_gathers(DistributedOptimizer::kHeadLayer);
          }
          const StepStats& want = ref.stats[step];
          EXPECT_EQ(st.lr_multiplier, want.lr_multiplier);
          EXPECT_EQ(st.momentum, want.momentum);
          EXPECT_NEAR(st.grad_norm, want.grad_norm, kTol * want.grad_norm) << "step " << step;
          EXPECT_NEAR(st.clip_scale, want.clip_scale, kTol) << "step " << step;

          if (step == 1) {
            // Checkpoint round trip: the gathered states equal the reference's, and a fresh
            // optimizer loaded from them continues the run.
            auto next = std::make_unique<DistributedOptimizer>(&store, sc.cfg, grid, zero);
            for (const Spec& s : mine) {
              for (const auto& kind : opt->state_kinds(s.name)) {
                Tensor t = opt->gather_state(s.name, kind);
                EXPECT_EQ(t.shape(), store.info(store.find(s.name)).shape);
                const auto want_state =
                    tp_slice(ref.states.at({s.name, kind}), s.shape, s.axis, tp, c.tp);
                EXPECT_LE(rel_err(to_vec(t), want_state), kTol) << s.name << " " << kind;
                next->scatter_state(s.name, kind, t);
                // scatter then gather is exact on the old optimizer too.
                Tensor changed = t.clone();
                for (int64_t k = 0; k < changed.numel(); ++k)
                  changed.f32()[k] = changed.f32()[k] * 2.0f + static_cast<float>(k);
                opt->scatter_state(s.name, kind, changed);
                EXPECT_EQ(to_vec(opt->gather_state(s.name, kind)), to_vec(changed))
                    << s.name << " " << kind;
              }
            }
            next->set_step_count(opt->step_count());
            opt = std::move(next);
          }
        }
        // With dp <= 2 the summed gradients are the reference's bits (g / 2 + g / 2 = g), and
        // without clipping nothing else rounds differently: the parameters must be bitwise the
        // reference's, the stage's broadcasts included (bf16 ones must lose nothing).
        const bool exact = shape.dp <= 2 && sc.cfg.max_grad_norm <= 0;
        if (zero == 2) {
          // Every replica's compute copy is its cast of the owners' masters, bit for bit (the
          // bf16 return of lm_head included), before and after the masters are made whole.
          std::map<std::string, std::vector<uint16_t>> copies;
          for (const Spec& s : mine) {
            const Tensor copy = store.compute_copy_flat(store.find(s.name));
            copies[s.name].assign(copy.bf16(), copy.bf16() + copy.numel());
          }
          opt->sync_master_weights();
          for (const Spec& s : mine) {
            const Tensor p = store.param(s.name);
            std::vector<uint16_t> cast(static_cast<size_t>(p.numel()));
            for (int64_t k = 0; k < p.numel(); ++k) cast[k] = f32_to_bf16(p.f32()[k]);
            EXPECT_EQ(copies.at(s.name), cast) << s.name << " compute copy";
            EXPECT_EQ(opt->returns_bf16(s.name), s.name == "lm_head") << s.name;
          }
        }
        for (const Spec& s : mine) {
          const auto want = tp_slice(ref.params.at(s.name), s.shape, s.axis, tp, c.tp);
          EXPECT_LE(rel_err(to_vec(store.param(s.name)), want), kTol) << s.name;
          if (exact) EXPECT_EQ(to_vec(store.param(s.name)), want) << s.name << " (bitwise)";
        }
        EXPECT_EQ(opt->step_count(), kSteps);

        // ZeRO-1: the DP ranks' AdamW states partition the local shards exactly, each rank
        // holding at most ceil(n / dp) elements per parameter and state.
        int64_t adam_local = 0, adam_bound = 0;
        for (const ParamInfo& info : store.infos()) {
          if (info.group == ParamGroup::kMatrix) continue;
          adam_local += info.numel();
          adam_bound += (info.numel() + shape.dp - 1) / shape.dp;
        }
        EXPECT_LE(opt->adamw_state_numel(), 2 * adam_bound);
        double held = static_cast<double>(opt->adamw_state_numel());
        grid.dp()->all_reduce_sum(&held, 1);
        EXPECT_EQ(held, 2.0 * static_cast<double>(adam_local));
        if (shape.dp > 1) EXPECT_LT(opt->adamw_state_numel(), 2 * adam_local);

        // Muon momentum: each matrix's local shards are kept by exactly one DP replica (its
        // owner's), so the DP ranks' momenta partition the stage's matrix shards.
        int64_t matrix_local = 0, matrices = 0;
        for (const ParamInfo& info : store.infos())
          if (info.group == ParamGroup::kMatrix) matrix_local += info.numel(), ++matrices;
        double momentum = static_cast<double>(opt->muon_state_numel());
        grid.dp()->all_reduce_sum(&momentum, 1);
        EXPECT_EQ(momentum, static_cast<double>(matrix_local));
        if (shape.dp > 1 && matrices >= tp * shape.dp)
          EXPECT_LT(opt->muon_state_numel(), matrix_local);
      }
    }
  }
}

// Muon's owners (muon_owners): a d32-like stage (per layer four d x d attention matrices, the
// MLP's d x 4d and 4d x d, two small d x 32 gates) over 8 and 12 stage ranks. Greedy largest-first keeps every rank's
// elements within one largest matrix of the mean (round-robin gives the ranks that draw MLP
// matrices several times more), and every rank of the job computes the same owners.
TEST_F(DistributedOptimizerTest, MuonOwnersBalanceElements) {
  const int64_t d = 2048;
  std::vector<int64_t> elements;
  for (int layer = 0; layer < 32; ++layer)
    for (int64_t e : {d * d, d * d, d * d, d * d, 4 * d * d, 4 * d * d, 32 * d, 32 * d})
      elements.push_back(e);
  int64_t total = 0;
  for (int64_t e : elements) total += e;
  for (int ranks : {8, 12}) {
    SCOPED_TRACE("ranks " + std::to_string(ranks));
    const std::vector<int> owner = muon_owners(elements, ranks);
    ASSERT_EQ(owner.size(), elements.size());
    std::vector<int64_t> load(ranks, 0), round_robin(ranks, 0);
    for (size_t k = 0; k < elements.size(); ++k) {
      ASSERT_GE(owner[k], 0);
      ASSERT_LT(owner[k], ranks);
      load[owner[k]] += elements[k];
      round_robin[k % ranks] += elements[k];
    }
    const auto [lo, hi] = std::minmax_element(load.begin(), load.end());
    EXPECT_LE(*hi - *lo, 4 * d * d);
    EXPECT_LE(*hi, total / ranks + 4 * d * d);
    const int64_t rr_max = *std::max_element(round_robin.begin(), round_robin.end());
    const int64_t rr_min = *std::min_element(round_robin.begin(), round_robin.end());
    EXPECT_GT(rr_max - rr_min, 4 * d * d) << "round-robin was balanced: the test shows nothing";
    EXPECT_EQ(muon_owners(elements, ranks), owner);  // deterministic
    // Every rank of the job agrees.
    double mine = 0;
    for (size_t k = 0; k < owner.size(); ++k) mine += static_cast<double>(owner[k]) * (k + 1);
    double sum = mine;
    world_.all_reduce_sum(&sum, 1);
    EXPECT_EQ(sum, mine * world_.size());
  }
  EXPECT_EQ(muon_owners({5, 5, 5}, 1), (std::vector<int>{0, 0, 0}));
  EXPECT_EQ(muon_owners({1, 3, 2}, 2), (std::vector<int>{1, 0, 1}));  // 3 -> 0, 2 -> 1, 1 -> 1
}

TEST_F(DistributedOptimizerTest, AllReduceGradsSumsOverDp) {
  const int W = world_.size();
  ProcessGrid grid(&world_, GridShape{1, W, 1});
  ParamStore store;
  store.add("a", {1000, 3}, ParamGroup::kEmbedding);
  store.add("b", {7}, ParamGroup::kScalar);
  store.finalize();
  const int r = world_.rank();
  for (int i = 0; i < store.size(); ++i) {
    float* g = store.grad(i).f32();
    for (int64_t k = 0; k < store.info(i).numel(); ++k) g[k] = static_cast<float>(k % 13 + r);
  }
  all_reduce_grads(store, grid.dp(), /*bucket_elems=*/777);
  const float rank_sum = static_cast<float>(W * (W - 1) / 2);
  for (int i = 0; i < store.size(); ++i) {
    const float* g = store.grad(i).f32();
    for (int64_t k = 0; k < store.info(i).numel(); ++k)
      ASSERT_EQ(g[k], static_cast<float>(W * (k % 13)) + rank_sum) << i << " " << k;
  }
}

// Control: orthogonalizing each TP shard on its own (what the distributed Muon must never do)
// is far outside the tolerance above, so the layout test would catch it.
TEST_F(DistributedOptimizerTest, ShardwiseNewtonSchulzWouldFail) {
  const std::vector<float> u = values({"m", {16, 32}, ParamGroup::kMatrix, 1, 0});
  std::vector<float> whole(u.size());
  newton_schulz(u.data(), 16, 32, whole.data(), 5, NsCoefficients::standard());
  std::vector<float> sharded;
  std::vector<float> want;
  for (int r = 0; r < 2; ++r) {
    auto part = tp_slice(u, {16, 32}, 1, 2, r);
    std::vector<float> x(part.size());
    newton_schulz(part.data(), 16, 16, x.data(), 5, NsCoefficients::standard());
    sharded.insert(sharded.end(), x.begin(), x.end());
    auto w = tp_slice(whole, {16, 32}, 1, 2, r);
    want.insert(want.end(), w.begin(), w.end());
  }
  EXPECT_GT(rel_err(sharded, want), 100 * kTol);
}

}  // namespace
}  // namespace vt::optim
