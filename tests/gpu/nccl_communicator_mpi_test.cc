// NcclCommunicator (src/parallel/nccl_communicator.cc) between processes, one GPU each (on the
// CUDA emulation: one emulated device per rank), over the whole world and over split groups as
// the process grid makes them: every rank uses the device of its node-local rank for the CUDA
// backend and for NCCL alike (a data-parallel group on a multi-GPU node must not pick the device
// from its rank inside the group); Tensor collectives on device and host tensors in f32 and
// bf16, and the bf16 wire's sum of f32 tensors; 1F1B-style exchanges where both neighbours send
// first; non-blocking sums, gathers, reduce-scatters and reduces (waited in parts by marks); calls on device tensors queued on the backend's stream without the
// host waiting. Skipped when the machine has fewer GPUs than ranks on it.
// vtrain-mpi-ranks: 2 4
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "core/backend.h"
#include "core/cuda_backend.h"
#include "core/process_device.h"
#include "core/tensor.h"
#include "kernels/cuda_check.cuh"
#include "parallel/nccl_communicator.h"

namespace vt {
namespace {

class NcclMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    MPI_Comm_rank(MPI_COMM_WORLD, &me_);
    MPI_Comm_size(MPI_COMM_WORLD, &world_);
    const int gpus = cuda::cuda_device_count();
    int enough = gpus >= node_local_size() ? 1 : 0, all = 0;
    MPI_Allreduce(&enough, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all) GTEST_SKIP() << "needs one GPU per rank (" << gpus << " visible)";
    set_device_backend(make_cuda_backend());
  }
  void TearDown() override { set_device_backend(nullptr); }
  // The CUDA backend's stream, which every communicator here is built with.
  static cudaStream_t compute() { return cuda_compute_stream(backend(Device::kCUDA)); }
  int me_ = 0, world_ = 1;
};

// A group like the process grid's data-parallel groups: ranks with the same rank % 2.
MPI_Comm split_group(int me) {
  MPI_Comm g;
  MPI_Comm_split(MPI_COMM_WORLD, me % 2, me, &g);
  return g;
}

std::vector<float> values(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = float(rank * 16 + int(i % 16)) * 0.5f;  // exact in bf16
  return v;
}

TEST_F(NcclMpi, BackendAndEveryGroupUseTheProcessDevice) {
  int backend_dev = -1;
  VT_CUDA_CHECK(cudaGetDevice(&backend_dev));
  EXPECT_EQ(backend_dev, process_device_index(cuda::cuda_device_count()));
  MPI_Comm g = split_group(me_);
  {
    NcclCommunicator world(MPI_COMM_WORLD, compute()), group(g, compute());
    EXPECT_EQ(world.device(), backend_dev);
    EXPECT_EQ(group.device(), backend_dev) << "rank " << group.rank() << " of its group";
    int dev = -1;
    VT_CUDA_CHECK(cudaGetDevice(&dev));
    EXPECT_EQ(dev, backend_dev) << "building a communicator must not move the backend's device";
    const Tensor t = Tensor::from_host(values(me_, 8).data(), {8}, Device::kCPU).to(Device::kCUDA);
    group.all_reduce_sum(t);  // a real collective on the group's communicator
    std::vector<float> want(8, 0.0f);
    for (int r = me_ % 2; r < world_; r += 2) {
      const auto v = values(r, 8);
      for (size_t i = 0; i < 8; ++i) want[i] += v[i];
    }
    EXPECT_EQ(t.to_host_f32(), want);
  }
  MPI_Comm_free(&g);
}

TEST_F(NcclMpi, TensorCollectivesOnDeviceAndHostTensors) {
  NcclCommunicator comm(MPI_COMM_WORLD, compute());
  const int64_t n = 48;
  for (DType dt : {DType::kF32, DType::kBF16}) {
    for (Device dev : {Device::kCUDA, Device::kCPU}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(dt) << (dev == Device::kCUDA ? " device" : " host"));
      const auto mine = values(me_, size_t(n));
      const Tensor a = Tensor::from_host(mine.data(), {n}, Device::kCPU).to(dev, dt);
      comm.all_reduce_sum(a);
      std::vector<float> sum(size_t(n), 0.0f);
      for (int r = 0; r < world_; ++r) {
        const auto v = values(r, size_t(n));
        for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
      }
      EXPECT_EQ(a.to_host_f32(), sum);

      const Tensor src = Tensor::from_host(mine.data(), {n}, Device::kCPU).to(dev, dt);
      const Tensor all = Tensor::zeros({n * world_}, dt, dev);
      comm.all_gather(src, all);
      const auto g = all.to_host_f32();
      for (int r = 0; r < world_; ++r) EXPECT_EQ(g[size_t(r * n + 5)], values(r, size_t(n))[5]);

      const Tensor part = Tensor::zeros({n}, dt, dev);
      comm.reduce_scatter_sum(all, part);
      const auto p = part.to_host_f32();
      EXPECT_EQ(p[3], float(world_) * values(me_, size_t(n))[3]);

      comm.broadcast(src, world_ - 1);
      EXPECT_EQ(src.to_host_f32(), values(world_ - 1, size_t(n)));
    }
  }
}

TEST_F(NcclMpi, NeighboursThatBothSendFirstDoNotDeadlock) {
  NcclCommunicator comm(MPI_COMM_WORLD, compute());
  const int right = (me_ + 1) % world_, left = (me_ + world_ - 1) % world_;
  for (int round = 0; round < 3; ++round) {
    const auto mine = values(me_ + round, 32);
    Tensor out = Tensor::from_host(mine.data(), {32}, Device::kCPU).to(Device::kCUDA);
    comm.send_async(out, right, 0);
    out = Tensor::zeros({32}, DType::kF32, Device::kCUDA);  // the source may go at once
    const Tensor in = Tensor::zeros({32}, DType::kF32, Device::kCUDA);
    comm.recv(in, left, 0);
    EXPECT_EQ(in.to_host_f32(), values(left + round, 32)) << "round " << round;
  }
  comm.wait_sends();
}

TEST_F(NcclMpi, StartedSumsCompleteAtTheWait) {
  NcclCommunicator comm(MPI_COMM_WORLD, compute());
  std::vector<Tensor> ts;
  for (int k = 0; k < 3; ++k) {
    const auto v = values(me_ + k, 20);
    ts.push_back(Tensor::from_host(v.data(), {20}, Device::kCPU).to(Device::kCUDA));
    comm.all_reduce_sum_start(ts.back());
  }
  comm.all_reduce_wait();
  for (int k = 0; k < 3; ++k) {
    std::vector<float> want(20, 0.0f);
    for (int r = 0; r < world_; ++r) {
      const auto v = values(r + k, 20);
      for (size_t i = 0; i < 20; ++i) want[i] += v[i];
    }
    EXPECT_EQ(ts[size_t(k)].to_host_f32(), want) << "sum " << k;
  }
}

TEST_F(NcclMpi, StartedBroadcastsCompleteAtTheWait) {
  // Device f32 and bf16 broadcasts from every root, a started sum among them: all there after
  // the wait, the bf16 ones bit for bit (they are the bytes of the root's tensor).
  NcclCommunicator comm(MPI_COMM_WORLD, compute());
  std::vector<Tensor> fs, bs;
  const auto mine = values(me_, 20);
  Tensor sum = Tensor::from_host(mine.data(), {20}, Device::kCPU).to(Device::kCUDA);
  for (int root = 0; root < world_; ++root) {
    const auto v = values(100 + root, 20);
    Tensor f = Tensor::zeros({20}, DType::kF32, Device::kCUDA);
    if (me_ == root) f = Tensor::from_host(v.data(), {20}, Device::kCPU).to(Device::kCUDA);
    Tensor b = Tensor::zeros({20}, DType::kBF16, Device::kCUDA);
    if (me_ == root) b = Tensor::from_host(v.data(), {20}, Device::kCPU).to(Device::kCUDA, DType::kBF16);
    comm.broadcast_start(f, root);
    if (root == 0) comm.all_reduce_sum_start(sum);
    comm.broadcast_start(b, root);
    fs.push_back(f);
    bs.push_back(b);
  }
  comm.all_reduce_wait();
  for (int root = 0; root < world_; ++root) {
    const auto v = values(100 + root, 20);
    EXPECT_EQ(fs[size_t(root)].to_host_f32(), v) << "root " << root;
    const Tensor want = Tensor::from_host(v.data(), {20}, Device::kCPU).to(Device::kCPU, DType::kBF16);
    EXPECT_EQ(bs[size_t(root)].to_host_f32(), want.to_host_f32()) << "root " << root;
  }
  std::vector<float> total(20, 0.0f);
  for (int r = 0; r < world_; ++r) {
    const auto v = values(r, 20);
    for (size_t i = 0; i < 20; ++i) total[i] += v[i];
  }
  EXPECT_EQ(sum.to_host_f32(), total);
}

// Nearest bf16 (8 significant bits, ties to even) through the double mantissa, written apart
// from vtrain's conversions: the model of the bf16 wire below.
float model_bf16(float x) {
  if (x == 0.0f) return x;
  int e = 0;
  const double m = std::frexp(double(x), &e);
  return float(std::ldexp(std::nearbyint(std::ldexp(m, 8)), e - 8));
}

float wire_value(int rank, int64_t i) {
  return float(std::sin(0.37 * double(i) + 1.3 * rank) * std::ldexp(1.0, int(i % 9) - 4));
}

// The bf16 wire (all_reduce_sum_bf16 and its start/wait) on f32 device and host tensors:
// ncclBfloat16 sums, each rank's values rounded to bf16 and every addition rounded to bf16.
// With 2 ranks the result is exactly bf16(bf16(a) + bf16(b)); with any number it is within
// W u / (1 - W u) of the sum of |x| (u = (1 + 2^-8)(1 + 2^-24) - 1: one rounding of the input and
// at most W - 1 fp32-then-bf16 additions per term) and the same on every rank. The started
// variant (with an f32 sum started between two bf16 ones) gives the blocking bits with 2 ranks.
TEST_F(NcclMpi, Bf16WireSumOfF32Tensors) {
  NcclCommunicator comm(MPI_COMM_WORLD, compute());
  const int64_t n = 257;
  const double u = (1.0 + std::ldexp(1.0, -8)) * (1.0 + std::ldexp(1.0, -24)) - 1.0;
  const double gamma = world_ * u / (1.0 - world_ * u);
  for (Device dev : {Device::kCUDA, Device::kCPU}) {
    SCOPED_TRACE(dev == Device::kCUDA ? "device" : "host");
    std::vector<float> mine(static_cast<size_t>(n)), ints(8);
    for (int64_t i = 0; i < n; ++i) mine[size_t(i)] = wire_value(me_, i);
    for (int i = 0; i < 8; ++i) ints[size_t(i)] = float(i + me_);
    const Tensor a = Tensor::from_host(mine.data(), {n}, dev);
    const Tensor b = Tensor::from_host(mine.data(), {n}, dev);
    const Tensor c = Tensor::from_host(ints.data(), {8}, dev);
    comm.all_reduce_sum_bf16(a);
    comm.all_reduce_sum_bf16_start(b.flat(0, 100));
    comm.all_reduce_sum_start(c);
    comm.all_reduce_sum_bf16_start(b.flat(100, n - 100));
    comm.all_reduce_wait();
    const std::vector<float> got = a.to_host_f32(), started = b.to_host_f32();
    for (int64_t i = 0; i < n; ++i) {
      double exact = 0, mag = 0;
      for (int r = 0; r < world_; ++r) {
        exact += wire_value(r, i);
        mag += std::fabs(wire_value(r, i));
      }
      EXPECT_LE(std::fabs(got[size_t(i)] - exact), gamma * mag) << "element " << i;
      EXPECT_LE(std::fabs(started[size_t(i)] - exact), gamma * mag) << "element " << i;
      EXPECT_EQ(got[size_t(i)], model_bf16(got[size_t(i)])) << "not a bf16 value: " << i;
      if (world_ == 2) {
        const float want = model_bf16(model_bf16(wire_value(0, i)) + model_bf16(wire_value(1, i)));
        EXPECT_EQ(got[size_t(i)], want) << "element " << i;
        EXPECT_EQ(started[size_t(i)], want) << "element " << i;
      }
    }
    std::vector<float> all(size_t(n) * size_t(world_));
    MPI_Allgather(got.data(), int(n), MPI_FLOAT, all.data(), int(n), MPI_FLOAT, MPI_COMM_WORLD);
    for (int r = 0; r < world_; ++r)
      EXPECT_TRUE(std::equal(got.begin(), got.end(), all.begin() + r * n)) << "rank " << r;
    const std::vector<float> sums = c.to_host_f32();
    for (int i = 0; i < 8; ++i)
      EXPECT_EQ(sums[size_t(i)], float(world_ * i + world_ * (world_ - 1) / 2));
  }
}

// ZeRO-2's collectives (--zero 2): the bf16-wire reduce-scatter and the reduce to one rank, f32
// and bf16, on device and host tensors, against the exact sums and the wire's error bound.
TEST_F(NcclMpi, Bf16WireReduceScatterAndReduce) {
  NcclCommunicator comm(MPI_COMM_WORLD, compute());
  const int64_t n = 129;
  const double u = (1.0 + std::ldexp(1.0, -8)) * (1.0 + std::ldexp(1.0, -24)) - 1.0;
  const double gamma = world_ * u / (1.0 - world_ * u);
  auto expect_sum = [&](float got, int64_t j, const char* what) {
    double exact = 0, mag = 0;
    for (int r = 0; r < world_; ++r) {
      exact += wire_value(r, j);
      mag += std::fabs(wire_value(r, j));
    }
    EXPECT_LE(std::fabs(got - exact), gamma * mag) << what << " element " << j;
    EXPECT_EQ(got, model_bf16(got)) << what << ": not a bf16 value: " << j;
    if (world_ == 2)
      EXPECT_EQ(got, model_bf16(model_bf16(wire_value(0, j)) + model_bf16(wire_value(1, j))))
          << what << " element " << j;
  };
  for (Device dev : {Device::kCUDA, Device::kCPU}) {
    SCOPED_TRACE(dev == Device::kCUDA ? "device" : "host");
    std::vector<float> all(static_cast<size_t>(n * world_));
    for (int64_t j = 0; j < n * world_; ++j) all[size_t(j)] = wire_value(me_, j);
    const Tensor in = Tensor::from_host(all.data(), {n * world_}, dev);
    const Tensor out = Tensor::zeros({n}, DType::kF32, dev);
    comm.reduce_scatter_sum_bf16(in, out);
    const std::vector<float> got = out.to_host_f32();
    for (int64_t i = 0; i < n; ++i) expect_sum(got[size_t(i)], me_ * n + i, "reduce-scatter");
    // Reduce to the last rank: bf16 within the bound, small integers exact in f32.
    const Tensor b = Tensor::from_host(all.data(), {n}, dev);
    comm.reduce_sum_bf16(b, world_ - 1);
    std::vector<float> ints(8);
    for (int i = 0; i < 8; ++i) ints[size_t(i)] = float(i + me_);
    const Tensor c = Tensor::from_host(ints.data(), {8}, dev);
    comm.reduce_sum(c, world_ - 1);
    if (me_ == world_ - 1) {
      const std::vector<float> rb = b.to_host_f32(), rc = c.to_host_f32();
      for (int64_t i = 0; i < n; ++i) expect_sum(rb[size_t(i)], i, "reduce");
      for (int i = 0; i < 8; ++i)
        EXPECT_EQ(rc[size_t(i)], float(world_ * i + world_ * (world_ - 1) / 2));
    }
  }
}

// ZeRO-2's started calls on device tensors (the started sums' stream): all-gathers in f32 and
// bf16 (the bytes as they are: bf16 bit for bit) completed in two parts by marks
// (all_reduce_wait_until), and the started reduce-scatter and reduce in f32 and on the bf16
// wire, which equal the blocking calls' results bit for bit; comm_bytes counts each at its start.
TEST_F(NcclMpi, StartedGathersReduceScattersAndReducesComplete) {
  NcclCommunicator comm(MPI_COMM_WORLD, compute());
  const int64_t n = 37;
  const double share = double(world_ - 1) / world_;
  std::vector<float> mine(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) mine[size_t(i)] = wire_value(me_, i);
  const Tensor f = Tensor::from_host(mine.data(), {n}, Device::kCPU).to(Device::kCUDA);
  const Tensor b = Tensor::from_host(mine.data(), {n}, Device::kCPU).to(Device::kCUDA, DType::kBF16);
  std::vector<Tensor> outs = {Tensor::zeros({n * world_}, DType::kF32, Device::kCUDA),
                              Tensor::zeros({n * world_}, DType::kBF16, Device::kCUDA),
                              Tensor::zeros({n * world_}, DType::kF32, Device::kCUDA)};
  const double before = comm_bytes_total();
  comm.all_gather_start(f, outs[0]);
  comm.all_gather_start(b, outs[1]);
  const int64_t second = comm.started_mark();
  comm.all_gather_start(f, outs[2]);
  const int64_t third = comm.started_mark();
  EXPECT_GT(third, second);
  EXPECT_DOUBLE_EQ(comm_bytes_total() - before, share * n * world_ * (4 + 2 + 4));
  auto expect_gathered = [&](const Tensor& out, bool bf16, int k) {
    const std::vector<float> got = out.to_host_f32();
    for (int r = 0; r < world_; ++r)
      for (int64_t i = 0; i < n; ++i) {
        const float v = wire_value(r, i);
        EXPECT_EQ(got[size_t(r * n + i)], bf16 ? model_bf16(v) : v)
            << "gather " << k << " rank " << r << " element " << i;
      }
  };
  comm.all_reduce_wait_until(second);  // the first two; the third may still be in flight
  expect_gathered(outs[0], false, 0);
  expect_gathered(outs[1], true, 1);
  comm.all_reduce_wait_until(third);
  expect_gathered(outs[2], false, 2);

  // Reduce-scatter and reduce, started against blocking.
  std::vector<float> all(static_cast<size_t>(n * world_));
  for (int64_t j = 0; j < n * world_; ++j) all[size_t(j)] = wire_value(me_, j);
  const Tensor in = Tensor::from_host(all.data(), {n * world_}, Device::kCPU).to(Device::kCUDA);
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16 wire" : "f32");
    const Tensor want = Tensor::zeros({n}, DType::kF32, Device::kCUDA);
    const Tensor got = Tensor::zeros({n}, DType::kF32, Device::kCUDA);
    const Tensor r_want = in.flat(0, n).clone(), r_got = in.flat(0, n).clone();
    if (bf16) {
      comm.reduce_scatter_sum_bf16(in, want);
      comm.reduce_sum_bf16(r_want, world_ - 1);
      comm.reduce_scatter_sum_bf16_start(in, got);
      comm.reduce_sum_bf16_start(r_got, world_ - 1);
    } else {
      comm.reduce_scatter_sum(in, want);
      comm.reduce_sum(r_want, world_ - 1);
      comm.reduce_scatter_sum_start(in, got);
      comm.reduce_sum_start(r_got, world_ - 1);
    }
    comm.all_reduce_wait();
    EXPECT_EQ(got.to_host_f32(), want.to_host_f32());
    if (me_ == world_ - 1) EXPECT_EQ(r_got.to_host_f32(), r_want.to_host_f32());
  }
}

// A gate on a stream (cudaLaunchHostFunc): the stream's later work waits until open() (or until
// the watchdog opens it after `limit`, recording that it had to).
class StreamGate {
 public:
  explicit StreamGate(std::chrono::seconds limit) {
    watchdog_ = std::thread([this, limit] {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, limit, [&] { return open_; })) {
        fired_ = true;
        open_ = true;
        cv_.notify_all();
      }
    });
  }
  ~StreamGate() {
    open();
    watchdog_.join();
  }
  static void CUDART_CB hold(void* p) {
    auto* g = static_cast<StreamGate*>(p);
    std::unique_lock<std::mutex> lock(g->mu_);
    g->cv_.wait(lock, [&] { return g->open_; });
  }
  void open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool fired() {
    std::lock_guard<std::mutex> lock(mu_);
    return fired_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false, fired_ = false;
  std::thread watchdog_;
};

// With the backend's stream held by a gate, collectives and point-to-point calls on device
// tensors return at once: they are queued on that stream behind the gate, and nothing waits on
// the host (a call that synchronized would block until the watchdog opened the gate). Once the
// gate opens, the queued work runs and the results are right.
TEST_F(NcclMpi, DeviceCallsQueueOnTheComputeStreamWithoutWaiting) {
  NcclCommunicator comm(MPI_COMM_WORLD, compute());
  const cudaStream_t bs = compute();
  ASSERT_NE(bs, nullptr);
  EXPECT_EQ(comm.stream(), bs) << "collectives run on the backend's stream";
  const int64_t n = 24;
  const auto mine = values(me_, size_t(n));
  const Tensor sum = Tensor::from_host(mine.data(), {n}, Device::kCPU).to(Device::kCUDA);
  const Tensor all = Tensor::zeros({n * world_}, DType::kF32, Device::kCUDA);
  const Tensor out = Tensor::from_host(mine.data(), {n}, Device::kCPU).to(Device::kCUDA);
  const Tensor in = Tensor::zeros({n}, DType::kF32, Device::kCUDA);
  const int right = (me_ + 1) % world_, left = (me_ + world_ - 1) % world_;
  bool fired = false;
  {
    StreamGate gate(std::chrono::seconds(60));
    VT_CUDA_CHECK(cudaLaunchHostFunc(bs, StreamGate::hold, &gate));
    comm.all_gather(sum, all);
    comm.all_reduce_sum(sum);
    comm.send_async(out, right, 0);
    comm.recv(in, left, 0);
    comm.wait_sends();
    fired = gate.fired();  // before the gate opens: did any call wait for the stream?
    gate.open();
  }
  EXPECT_FALSE(fired) << "a call on device tensors waited on the host for the backend's stream";
  std::vector<float> want(size_t(n), 0.0f);
  for (int r = 0; r < world_; ++r) {
    const auto v = values(r, size_t(n));
    for (size_t i = 0; i < v.size(); ++i) want[i] += v[i];
  }
  EXPECT_EQ(sum.to_host_f32(), want);
  const auto g = all.to_host_f32();
  for (int r = 0; r < world_; ++r) EXPECT_EQ(g[size_t(r * n + 3)], values(r, size_t(n))[3]);
  EXPECT_EQ(in.to_host_f32(), values(left, size_t(n)));
}

}  // namespace
}  // namespace vt
