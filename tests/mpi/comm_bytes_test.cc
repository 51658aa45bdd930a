// The communication volume counter (comm_bytes_total, core/communicator.h) under MPI: every
// collective of MpiCommunicator counts this rank's share of the ring algorithm for its payload,
// and a data-parallel optimizer step sends what the formula written out here from the
// parameters' shapes says, for ZeRO-1 (all_reduce_grads) and ZeRO-2 (reduce_grads, a
// reduce-scatter into the owners) on both wires; ZeRO-2's gradient sum is at most half of
// ZeRO-1's plus the AdamW chunks' padding. ZeRO-2 with a bf16 compute copy returns the output
// head's weight in bf16 (Zero2Bf16ReturnMatchesTheFormula).
// vtrain-mpi-ranks: 1 2 4 8
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "core/arena.h"
#include "core/communicator.h"
#include "optim/distributed_optimizer.h"
#include "optim/grad_sync.h"
#include "parallel/mpi_communicator.h"
#include "parallel/process_grid.h"

namespace vt {
namespace {

// Bytes counted while f runs.
template <typename F>
double bytes_of(F&& f) {
  const double before = comm_bytes_total();
  f();
  return comm_bytes_total() - before;
}

TEST(CommBytes, CollectivesCountTheRingShare) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size();
  const double share = static_cast<double>(W - 1) / W;  // of the payload, per rank
  const int64_t n = 1000, m = 96;
  const Tensor t = Tensor::zeros({n}), part = Tensor::zeros({m}), whole = Tensor::zeros({m * W});
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.all_reduce_sum(t); }), 2 * share * n * 4);
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.all_reduce_sum_bf16(t); }), 2 * share * n * 2);
  EXPECT_DOUBLE_EQ(bytes_of([&] {
                     world.all_reduce_sum_bf16_start(t);
                     world.all_reduce_wait();
                   }),
                   2 * share * n * 2);
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.all_gather(part, whole); }), share * m * W * 4);
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.reduce_scatter_sum(whole, part); }), share * m * W * 4);
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.reduce_scatter_sum_bf16(whole, part); }),
                   share * m * W * 2);
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.broadcast(t, 0); }), share * n * 4);
  const Tensor b = Tensor::zeros({n}, DType::kBF16);
  EXPECT_DOUBLE_EQ(bytes_of([&] {
                     world.broadcast_start(b, 0);
                     world.all_reduce_wait();
                   }),
                   share * n * 2);
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.reduce_sum(t, W - 1); }), share * n * 4);
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.reduce_sum_bf16(t, 0); }), share * n * 2);
  double d = 1;
  EXPECT_DOUBLE_EQ(bytes_of([&] { world.all_reduce_sum(&d, 1); }), 2 * share * 8);
  if (W > 1) {  // a ring of sends: each rank sends n floats once
    const int next = (world.rank() + 1) % W, prev = (world.rank() + W - 1) % W;
    std::vector<float> in(n, 1.0f), out(n);
    EXPECT_DOUBLE_EQ(bytes_of([&] {
                       world.send_async(in.data(), n, next, 5);
                       world.recv(out.data(), n, prev, 5);
                       world.wait_sends();
                     }),
                     n * 4.0);
  }
  // The self group sends nothing.
  EXPECT_EQ(bytes_of([&] { self_communicator()->all_reduce_sum(t); }), 0.0);
}

// A stage like the trainer's on dp = world ranks (tp 1, pp 1): AdamW parameters of sizes that
// do not divide by 8, and Muon matrices.
struct Spec {
  std::string name;
  Shape shape;
  ParamGroup group;
};
std::vector<Spec> specs() {
  std::vector<Spec> s = {{"wte", {50, 12}, ParamGroup::kEmbedding}};
  for (int i = 0; i < 3; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    s.push_back({b + "attn.wq", {12, 12}, ParamGroup::kMatrix});
    s.push_back({b + "mlp.fc", {12, 40}, ParamGroup::kMatrix});
    s.push_back({b + "value.gain", {1}, ParamGroup::kScalar});
  }
  s.push_back({"lm_head", {12, 50}, ParamGroup::kLmHead});
  return s;
}

TEST(CommBytes, OptimizerStepMatchesTheFormula) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int D = world.size();
  ProcessGrid grid(&world, GridShape{1, D, 1});
  const double share = static_cast<double>(D - 1) / D;
  // The formula's ingredients: AdamW elements rounded up to whole chunks of ceil(n / D) per
  // rank, and Muon's elements.
  double adam_chunks = 0, adam = 0, muon = 0, adam_params = 0;
  for (const Spec& s : specs()) {
    const int64_t n = shape_numel(s.shape);
    if (s.group == ParamGroup::kMatrix) {
      muon += static_cast<double>(n);
    } else {
      adam += static_cast<double>(n);
      ++adam_params;
      adam_chunks += static_cast<double>((n + D - 1) / D);
    }
  }
  double grad_sum_bytes[3][2] = {};  // [zero][wire bf16]
  for (int zero : {1, 2})
    for (DType wire : {DType::kF32, DType::kBF16}) {
      SCOPED_TRACE("zero " + std::to_string(zero) + " wire " + dtype_name(wire));
      const double w = wire == DType::kBF16 ? 2 : 4;
      ParamStore store;
      for (const Spec& s : specs()) store.add(s.name, s.shape, s.group);
      store.finalize();
      optim::DistributedOptimizer opt(&store, optim::OptimizerConfig::defaults(64), grid, zero);
      const double sum = bytes_of([&] {
        if (zero == 1)
          optim::all_reduce_grads(store, grid.dp(), 64, wire);
        else
          opt.reduce_grads(wire);
      });
      const double norm = bytes_of([&] { opt.grad_norm(); });
      const double step = bytes_of([&] { opt.step(0, 10, 1.0); });
      grad_sum_bytes[zero][wire == DType::kBF16] = sum;
      if (zero == 1) {
        // The whole arena (padding included) all-reduced; D == 1 with f32 skips.
        const double arena = static_cast<double>(store.total_numel());
        EXPECT_DOUBLE_EQ(sum, 2 * share * arena * w);
        EXPECT_DOUBLE_EQ(norm, 0.0);  // tp and pp are groups of one
      } else {
        // Reduce-scatter of the AdamW chunks (D of them a parameter, zero padded) and a reduce
        // of every Muon matrix to its owner.
        EXPECT_DOUBLE_EQ(sum, (D - 1) * adam_chunks * w + share * muon * w);
        EXPECT_DOUBLE_EQ(norm, 2 * share * 8);  // the owned parts' squares over DP
      }
      // The step: ZeRO-1's f32 all-gather of the AdamW chunks, Muon's f32 broadcasts.
      EXPECT_DOUBLE_EQ(step, (D - 1) * adam_chunks * 4 + share * muon * 4);
    }
  for (int b : {0, 1}) {
    const double w = b ? 2 : 4;
    // ZeRO-2 sends (D-1)/D of the parameters' bytes plus (D-1)/D of at most D-1 elements of
    // padding per AdamW parameter: about half of ZeRO-1's all-reduce.
    EXPECT_LE(grad_sum_bytes[2][b], share * (adam + muon + (D - 1) * adam_params) * w);
    if (D > 1) EXPECT_LT(grad_sum_bytes[2][b], 0.6 * grad_sum_bytes[1][b]);
  }
}

// ZeRO-2 as a GPU run has it: bf16 gradient wire, bf16 Newton-Schulz, a bf16 compute copy. The
// step's parameter return is started in step() and finished by the next forward's waits; what
// it sends per rank: the AdamW chunks gathered in fp32 except the output head's weight (bf16,
// into the compute copy) and Muon's bf16 results broadcast. The whole step (reduce-scatter,
// norm, return) is then the target 2 x 2 bytes x parameters x (D-1)/D plus the fp32
// half of the AdamW parameters other than the head and the chunks' padding.
TEST(CommBytes, Zero2Bf16ReturnMatchesTheFormula) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int D = world.size();
  ProcessGrid grid(&world, GridShape{1, D, 1});
  const double share = static_cast<double>(D - 1) / D;
  double chunks = 0, head_chunks = 0, muon = 0, params = 0, fp32_adam = 0, adam_params = 0;
  for (const Spec& s : specs()) {
    const int64_t n = shape_numel(s.shape);
    params += static_cast<double>(n);
    if (s.group == ParamGroup::kMatrix) {
      muon += static_cast<double>(n);
      continue;
    }
    ++adam_params;
    const double c = static_cast<double>((n + D - 1) / D);
    chunks += c;
    if (s.group == ParamGroup::kLmHead)
      head_chunks += c;
    else
      fp32_adam += static_cast<double>(n);
  }
  ParamStore store;
  for (const Spec& s : specs()) store.add(s.name, s.shape, s.group);
  store.finalize(Device::kCPU, DType::kBF16);
  optim::OptimizerConfig cfg = optim::OptimizerConfig::defaults(64);
  cfg.muon.ns_dtype = DType::kBF16;
  optim::DistributedOptimizer opt(&store, cfg, grid, /*zero_stage=*/2);
  EXPECT_TRUE(opt.returns_bf16("lm_head"));
  EXPECT_FALSE(opt.returns_bf16("wte"));  // the embedding lookup reads the fp32 master
  const double sum = bytes_of([&] { opt.reduce_grads(DType::kBF16); });
  const double norm = bytes_of([&] { opt.grad_norm(); });
  const double step = bytes_of([&] {
    opt.step(0, 10, 1.0);
    opt.finish_param_gathers(-1);
    for (int layer = 0; layer < 3; ++layer) opt.finish_param_gathers(layer);
    opt.finish_param_gathers(optim::DistributedOptimizer::kHeadLayer);
  });
  EXPECT_DOUBLE_EQ(sum, (D - 1) * chunks * 2 + share * muon * 2);
  EXPECT_DOUBLE_EQ(norm, 2 * share * 8);
  EXPECT_DOUBLE_EQ(step, (D - 1) * ((chunks - head_chunks) * 4 + head_chunks * 2) +
                             share * muon * 2);
  // Against the target: the fp32 AdamW parameters add 2 bytes each, the padding under D - 1
  // elements a parameter and wire.
  EXPECT_LE(sum + norm + step, share * (2 * 2 * params + 2 * fp32_adam +
                                        (2 + 4) * (D - 1) * adam_params + 16));
  // The masters made whole again (a checkpoint's view) cost the head's chunks once more, fp32.
  const double sync = bytes_of([&] { opt.sync_master_weights(); });
  EXPECT_DOUBLE_EQ(sync, (D - 1) * head_chunks * 4);
  EXPECT_EQ(bytes_of([&] { opt.sync_master_weights(); }), 0.0);  // nothing stale any more
}

}  // namespace
}  // namespace vt
