// OverlappedGradSync (the data-parallel gradient sum started layer by layer during backward)
// against the blocking all_reduce_grads and against the exact sum: gradients are small integers
// (exact in fp32 whatever the reduction order), different on every rank, on a CPU store (MPI
// non-blocking all-reduces) and on an emulated device store (the staged path).
// vtrain-mpi-ranks: 2 4
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "optim/grad_sync.h"
#include "parallel/mpi_communicator.h"

namespace vt::optim {
namespace {

void build(ParamStore& s, Device dev) {
  s.add("wte", {10, 4}, ParamGroup::kEmbedding);
  for (int i = 0; i < 3; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    const ParamMeta m{.layer = i};
    s.add(b + "attn.wq", {4, 5}, ParamGroup::kMatrix, {}, {}, m);
    s.add(b + "mlp.fc", {4, 7}, ParamGroup::kMatrix, {}, {}, m);
    s.add(b + "value.gain", {1}, ParamGroup::kScalar, {}, {}, m);
  }
  s.add("value.table", {10, 3}, ParamGroup::kValueTable);
  s.add("lm_head", {4, 10}, ParamGroup::kLmHead);
  s.finalize(dev);
}

// Gradient element k of rank r: an integer in [-8, 8] (padding stays zero).
std::vector<float> grads_of(const ParamStore& s, int rank) {
  std::vector<float> g(s.total_numel(), 0.0f);
  for (const ParamInfo& p : s.infos())
    for (int64_t i = 0; i < p.numel(); ++i)
      g[p.offset + i] = static_cast<float>(((p.offset + i) * 7 + rank * 13) % 17 - 8);
  return g;
}

TEST(OverlappedGradSync, EqualsTheBlockingSumAndTheExactSum) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size(), me = world.rank();
  set_device_backend(make_device_emulator());
  for (Device dev : {Device::kCPU, Device::kCUDA}) {
    ParamStore a, b;
    build(a, dev);
    build(b, dev);
    const std::vector<float> mine = grads_of(a, me);
    a.grads_tensor().copy_from(Tensor::view(const_cast<float*>(mine.data()), {a.total_numel()}));
    b.grads_tensor().copy_from(a.grads_tensor());
    all_reduce_grads(a, &world, 16);  // small buckets: several calls
    OverlappedGradSync sync(&b, &world, 16);
    sync.head_done();  // the head's backward comes first
    for (int layer = 2; layer >= 0; --layer) sync.layer_done(layer);  // backward order
    sync.finish();
    std::vector<float> want(a.total_numel(), 0.0f);
    for (int r = 0; r < W; ++r) {
      const std::vector<float> g = grads_of(a, r);
      for (size_t i = 0; i < want.size(); ++i) want[i] += g[i];
    }
    EXPECT_EQ(a.grads_tensor().to_host_f32(), want) << (dev == Device::kCPU ? "cpu" : "device");
    EXPECT_EQ(b.grads_tensor().to_host_f32(), want) << (dev == Device::kCPU ? "cpu" : "device");
    // A second step reuses the plan.
    b.grads_tensor().copy_from(Tensor::view(const_cast<float*>(mine.data()), {b.total_numel()}));
    sync.layer_done(1);  // some layers (and the head) not announced: finish() sums them too
    sync.finish();
    EXPECT_EQ(b.grads_tensor().to_host_f32(), want);
  }
  set_device_backend(nullptr);
}

}  // namespace
}  // namespace vt::optim
