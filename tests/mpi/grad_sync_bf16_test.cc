// The bf16 wire of the data-parallel gradient sum (Communicator::all_reduce_sum_bf16 on MPI, and
// optim::all_reduce_grads / OverlappedGradSync with DType::kBF16) against a host model of its
// documented semantics written here without vtrain's bf16 conversions: every rank's f32 value
// rounded to bf16 (nearest even), each pairwise addition done in fp32 and rounded to bf16.
//   - 1 rank: the rounded value; 2 ranks: exactly bf16(bf16(a) + bf16(b)) (one order exists);
//     3 ranks: one of the three orders of the additions, element by element;
//   - any size: within the bound derived below of the exact (double) sum, and the same bits on
//     every rank;
//   - the non-blocking start/wait (with an f32 sum started between two bf16 ones) and a store on
//     the device emulator follow the model too, and give the bits of the blocking host call
//     where the order is fixed (up to 2 ranks; with more MPI may pick another order per call);
//   - all_reduce_grads and OverlappedGradSync (host-kept parameters included) follow the model;
//   - the reduce-scatter's and the reduce's bf16 wire (reduce_scatter_sum_bf16, reduce_sum_bf16;
//     host and emulated device tensors), and ZeRO-2's gradient sum into the owners
//     (DistributedOptimizer::reduce_grads with DType::kBF16) follow it on what each rank owns.
// vtrain-mpi-ranks: 1 2 3 4
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/arena.h"
#include "core/backend.h"
#include "core/communicator.h"
#include "optim/distributed_optimizer.h"
#include "optim/grad_sync.h"
#include "parallel/mpi_communicator.h"

namespace vt {
namespace {

// Nearest bf16 (8 significant bits), ties to even, through the double mantissa: frexp puts |x| in
// [0.5, 1) x 2^e, nearbyint (round-half-even in the default mode) keeps 8 bits. The values
// below are normal numbers far from overflow, where this is the whole story.
float model_bf16(float x) {
  if (x == 0.0f) return x;
  int e = 0;
  const double m = std::frexp(static_cast<double>(x), &e);
  return static_cast<float>(std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8));
}

// One pairwise step of the reduction: fp32 addition, rounded to bf16.
float model_add(float a, float b) { return model_bf16(a + b); }

// Rank r's value i: a sign, a 23-bit mantissa and an exponent in [-12, 6] from a hash, so that
// most values are not bf16 numbers and sums cancel and carry.
float value_of(int rank, int64_t i) {
  uint64_t z = static_cast<uint64_t>(i) * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(rank + 1) * 0xBF58476D1CE4E5B9ull;
  z ^= z >> 31;
  z *= 0x94D049BB133111EBull;
  z ^= z >> 29;
  const double mant = 1.0 + static_cast<double>(z & 0x7FFFFF) / 8388608.0;
  const int exp = static_cast<int>((z >> 23) % 19) - 12;
  const double sign = (z >> 40) & 1 ? -1.0 : 1.0;
  return static_cast<float>(sign * std::ldexp(mant, exp));
}

// Every rank's values of element i, rounded to bf16 as they leave the rank.
std::vector<float> rounded_inputs(int world, int64_t i, float (*v)(int, int64_t)) {
  std::vector<float> x(world);
  for (int r = 0; r < world; ++r) x[r] = model_bf16(v(r, i));
  return x;
}

// Checks one element against the model: exact for 1 and 2 ranks, one of the three orders for
// 3, and for any size within gamma_W * sum |x_r| of the exact sum. The bound: each x_r is
// rounded once to bf16 and then takes part in at most W - 1 additions, each an fp32 rounding
// (1 + 2^-24) followed by a bf16 rounding (1 + 2^-8), so every term carries at most W factors
// (1 + delta) with |delta| <= u = (1 + 2^-8)(1 + 2^-24) - 1, and the error is at most
// W u / (1 - W u) * sum |x_r| (Higham's gamma_W for recursive summation).
void expect_model(float got, int world, int64_t i, float (*v)(int, int64_t), const char* what) {
  const std::vector<float> x = rounded_inputs(world, i, v);
  if (world == 1) {
    EXPECT_EQ(got, x[0]) << what << " element " << i;
  } else if (world == 2) {
    EXPECT_EQ(got, model_add(x[0], x[1])) << what << " element " << i;
  } else if (world == 3) {
    const float o0 = model_add(model_add(x[0], x[1]), x[2]);
    const float o1 = model_add(model_add(x[0], x[2]), x[1]);
    const float o2 = model_add(model_add(x[1], x[2]), x[0]);
    EXPECT_TRUE(got == o0 || got == o1 || got == o2)
        << what << " element " << i << ": " << got << " is none of " << o0 << ", " << o1 << ", "
        << o2;
  }
  double exact = 0, mag = 0;
  for (int r = 0; r < world; ++r) {
    exact += v(r, i);
    mag += std::fabs(v(r, i));
  }
  const double u = (1.0 + std::ldexp(1.0, -8)) * (1.0 + std::ldexp(1.0, -24)) - 1.0;
  const double gamma = world * u / (1.0 - world * u);
  EXPECT_LE(std::fabs(got - exact), gamma * mag) << what << " element " << i;
}

// The same bits on every rank.
void expect_same_everywhere(const std::vector<float>& got, const char* what) {
  int world = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world);
  const int n = static_cast<int>(got.size());
  std::vector<float> all(static_cast<size_t>(n) * world);
  MPI_Allgather(got.data(), n, MPI_FLOAT, all.data(), n, MPI_FLOAT, MPI_COMM_WORLD);
  for (int r = 1; r < world; ++r)
    EXPECT_EQ(std::memcmp(all.data(), all.data() + static_cast<size_t>(r) * n, n * sizeof(float)), 0)
        << what << ": rank " << r << " differs from rank 0";
}

std::vector<float> mine(int rank, int64_t n) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = value_of(rank, i);
  return v;
}

TEST(Bf16Wire, BlockingSumFollowsTheModel) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size();
  const int64_t n = 5000;
  std::vector<float> v = mine(world.rank(), n);
  world.all_reduce_sum_bf16(Tensor::view(v.data(), {n}));
  for (int64_t i = 0; i < n; ++i) expect_model(v[i], W, i, value_of, "blocking");
  expect_same_everywhere(v, "blocking");
  // Exactly representable sums stay exact: small integers.
  std::vector<float> k(64);
  for (int i = 0; i < 64; ++i) k[i] = static_cast<float>(i - 32 + world.rank());
  world.all_reduce_sum_bf16(Tensor::view(k.data(), {64}));
  for (int i = 0; i < 64; ++i) EXPECT_EQ(k[i], static_cast<float>(W * (i - 32) + W * (W - 1) / 2));
}

TEST(Bf16Wire, NonBlockingEqualsBlocking) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size(), me = world.rank();
  const int64_t n = 3001;
  std::vector<float> blocking = mine(me, n), started = mine(me, n);
  world.all_reduce_sum_bf16(Tensor::view(blocking.data(), {n}));
  // Two bf16 ranges with an f32 sum started between them; one wait completes all three.
  std::vector<float> f(10);
  for (int i = 0; i < 10; ++i) f[i] = static_cast<float>(i + me);
  const Tensor s = Tensor::view(started.data(), {n});
  world.all_reduce_sum_bf16_start(s.flat(0, 1000));
  world.all_reduce_sum_start(Tensor::view(f.data(), {10}));
  world.all_reduce_sum_bf16_start(s.flat(1000, n - 1000));
  world.all_reduce_wait();
  // With up to 2 ranks there is one order of additions: the same bits. With more, MPI may pick
  // another order for the non-blocking call (as it may for f32 sums); both follow the model.
  if (W <= 2) EXPECT_EQ(std::memcmp(blocking.data(), started.data(), n * sizeof(float)), 0);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(f[i], static_cast<float>(W * i + W * (W - 1) / 2));
  // The ranges were summed independently of each other: each still follows the model.
  for (int64_t i = 0; i < n; ++i) expect_model(started[i], W, i, value_of, "started");
  expect_same_everywhere(started, "started");
}

TEST(Bf16Wire, DeviceTensorsFollowTheModel) {
  MpiCommunicator world(MPI_COMM_WORLD);
  set_device_backend(make_device_emulator());
  {
    const int64_t n = 2500;
    std::vector<float> host = mine(world.rank(), n);
    const Tensor d = Tensor::from_host(host.data(), {n}, Device::kCUDA);
    world.all_reduce_sum_bf16(Tensor::view(host.data(), {n}));
    world.all_reduce_sum_bf16(d.flat(0, 1200));
    world.all_reduce_sum_bf16_start(d.flat(1200, n - 1200));  // staged: the blocking call
    world.all_reduce_wait();
    const std::vector<float> got = d.to_host_f32();
    if (world.size() <= 2) EXPECT_EQ(std::memcmp(got.data(), host.data(), n * sizeof(float)), 0);
    for (int64_t i = 0; i < n; ++i) expect_model(got[i], world.size(), i, value_of, "device");
    expect_same_everywhere(got, "device");
  }
  set_device_backend(nullptr);
}

// A store like the trainer's: three layers, embedding, head, a value table (kept in host
// memory in the second pass).
void build(ParamStore& s, Device dev, bool table_in_host) {
  if (table_in_host) s.keep_in_host_memory(ParamGroup::kValueTable);
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

// Element k of a parameter's gradient on rank r: value_of at the parameter's name hash and k.
int64_t key_of(const ParamInfo& p, int64_t k) {
  return static_cast<int64_t>(std::hash<std::string>{}(p.name) % 100000) * 1000 + k;
}

void fill(const ParamStore& s, int rank) {
  for (const ParamInfo& p : s.infos()) {
    std::vector<float> g(p.numel());
    for (int64_t k = 0; k < p.numel(); ++k) g[k] = value_of(rank, key_of(p, k));
    s.grad(s.find(p.name)).copy_from(Tensor::view(g.data(), p.shape));
  }
}

void expect_store(const ParamStore& s, int world, const char* what) {
  for (const ParamInfo& p : s.infos()) {
    const std::vector<float> got = s.grad(s.find(p.name)).to_host_f32();
    for (int64_t k = 0; k < p.numel(); ++k) {
      const int64_t key = key_of(p, k);
      expect_model(got[k], world, key, value_of, what);
    }
    expect_same_everywhere(got, what);
  }
}

TEST(Bf16Wire, GradSyncFollowsTheModel) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size(), me = world.rank();
  set_device_backend(make_device_emulator());
  for (Device dev : {Device::kCPU, Device::kCUDA})
    for (bool table_in_host : {false, true}) {
      ParamStore a, b;
      build(a, dev, table_in_host);
      build(b, dev, table_in_host);
      fill(a, me);
      fill(b, me);
      optim::all_reduce_grads(a, &world, 16, DType::kBF16);  // small buckets: several calls
      optim::OverlappedGradSync sync(&b, &world, 16, DType::kBF16);
      for (int layer = 2; layer >= 0; --layer) sync.layer_done(layer);  // backward order
      sync.finish();
      const char* what = dev == Device::kCPU ? "cpu store" : "device store";
      expect_store(a, W, what);
      expect_store(b, W, what);
      if (W <= 2) {  // one order of additions: the two paths agree bit for bit
        const std::vector<float> ga = a.grads_tensor().to_host_f32(), gb = b.grads_tensor().to_host_f32();
        EXPECT_EQ(ga, gb) << what;
        EXPECT_EQ(a.host_grads_tensor().to_host_f32(), b.host_grads_tensor().to_host_f32());
      }
      // The padding between the arena's parameters stays zero.
      const std::vector<float> arena = a.grads_tensor().to_host_f32();
      std::vector<uint8_t> used(arena.size(), 0);
      for (const ParamInfo& p : a.infos())
        if (!p.host)
          for (int64_t k = 0; k < p.numel(); ++k) used[p.offset + k] = 1;
      for (size_t k = 0; k < arena.size(); ++k)
        if (!used[k]) EXPECT_EQ(arena[k], 0.0f) << what << " padding element " << k;
    }
  set_device_backend(nullptr);
}

// The f32 wire is today's sum: the same bits as all_reduce_sum over the arena.
TEST(Bf16Wire, F32WireIsThePlainSum) {
  MpiCommunicator world(MPI_COMM_WORLD);
  ParamStore a, b;
  build(a, Device::kCPU, false);
  build(b, Device::kCPU, false);
  fill(a, world.rank());
  fill(b, world.rank());
  optim::all_reduce_grads(a, &world, 16, DType::kF32);
  optim::all_reduce_grads(b, &world, 16);
  EXPECT_EQ(a.grads_tensor().to_host_f32(), b.grads_tensor().to_host_f32());
  if (world.size() == 1) {  // nothing to sum: untouched (the bf16 wire would round)
    ParamStore c;
    build(c, Device::kCPU, false);
    fill(c, 0);
    EXPECT_EQ(a.grads_tensor().to_host_f32(), c.grads_tensor().to_host_f32());
  }
}

TEST(Bf16Wire, ReduceScatterAndReduceFollowTheModel) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size(), me = world.rank();
  set_device_backend(make_device_emulator());
  const int64_t n = 1537;
  for (Device dev : {Device::kCPU, Device::kCUDA}) {
    const char* what = dev == Device::kCPU ? "host" : "device";
    // Reduce-scatter: element j of the W * n input is value j of this rank; rank me receives
    // the sums of elements [me * n, (me + 1) * n).
    std::vector<float> all = mine(me, W * n);
    const Tensor in = Tensor::from_host(all.data(), {W * n}, dev);
    const Tensor out = Tensor::zeros({n}, DType::kF32, dev);
    world.reduce_scatter_sum_bf16(in, out);
    const std::vector<float> got = out.to_host_f32();
    for (int64_t i = 0; i < n; ++i) expect_model(got[i], W, me * n + i, value_of, what);
    // Reduce to the last rank: its values follow the model.
    std::vector<float> v = mine(me, n);
    const Tensor t = Tensor::from_host(v.data(), {n}, dev);
    world.reduce_sum_bf16(t, W - 1);
    if (me == W - 1) {
      const std::vector<float> r = t.to_host_f32();
      for (int64_t i = 0; i < n; ++i) expect_model(r[i], W, i, value_of, what);
    }
    // The f32 reduce: small integers sum exactly.
    std::vector<float> k(100);
    for (int i = 0; i < 100; ++i) k[i] = static_cast<float>(i - 50 + me);
    const Tensor kt = Tensor::from_host(k.data(), {100}, dev);
    world.reduce_sum(kt, 0);
    if (me == 0) {
      const std::vector<float> r = kt.to_host_f32();
      for (int i = 0; i < 100; ++i)
        EXPECT_EQ(r[i], static_cast<float>(W * (i - 50) + W * (W - 1) / 2)) << what;
    }
  }
  set_device_backend(nullptr);
}

// ZeRO-2 on the bf16 wire: every rank's owned parts (its AdamW chunks, the Muon matrices it
// owns) hold the model's sums, blocking or started layer by layer; with up to 2 ranks they are
// the bits of all_reduce_grads.
TEST(Bf16Wire, Zero2GradsFollowTheModel) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int W = world.size(), me = world.rank();
  ProcessGrid grid(&world, GridShape{1, W, 1});
  set_device_backend(make_device_emulator());
  for (Device dev : {Device::kCPU, Device::kCUDA})
    for (bool table_in_host : {false, true}) {
      const char* what = dev == Device::kCPU ? "cpu store" : "device store";
      ParamStore a, whole;
      build(a, dev, table_in_host);
      build(whole, dev, table_in_host);
      fill(a, me);
      fill(whole, me);
      optim::DistributedOptimizer opt(&a, optim::OptimizerConfig::defaults(64), grid, 2);
      if (table_in_host) {  // started layer by layer (the non-blocking calls), as in backward
        for (int layer = 2; layer >= 0; --layer) opt.layer_grads_done(layer, DType::kBF16);
        opt.head_grads_done(DType::kBF16);
      }
      opt.reduce_grads(DType::kBF16);
      optim::all_reduce_grads(whole, &world, 16, DType::kBF16);
      int owned = 0;
      for (const ParamInfo& p : a.infos()) {
        const std::vector<float> got = a.grad(a.find(p.name)).to_host_f32();
        const std::vector<float> want = whole.grad(whole.find(p.name)).to_host_f32();
        const int64_t n = p.numel();
        int64_t lo = 0, hi = 0;
        if (p.group == ParamGroup::kMatrix) {
          if (opt.muon_owner(p.name) == me) hi = n;  // tp 1: the owner's replica is its DP rank
        } else {
          const int64_t chunk = (n + W - 1) / W;
          lo = std::min(n, chunk * me);
          hi = std::min(n, lo + chunk);
        }
        for (int64_t k = lo; k < hi; ++k) {
          expect_model(got[k], W, key_of(p, k), value_of, what);
          if (W <= 2) EXPECT_EQ(got[k], want[k]) << what << " " << p.name << " " << k;
          ++owned;
        }
      }
      // Every element is owned by exactly one rank.
      int total = 0;
      for (const ParamInfo& p : a.infos()) total += static_cast<int>(p.numel());
      int sum = owned;
      MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      EXPECT_EQ(sum, total) << what;
      // whole_grads (the non-finite report's view): every element the owner's sum, everywhere.
      opt.whole_grads();
      expect_store(a, W, what);
    }
  set_device_backend(nullptr);
}

}  // namespace
}  // namespace vt
