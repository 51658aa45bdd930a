// NcclCommunicator (src/parallel/nccl_communicator.cc) with one rank (MPI_COMM_SELF): every
// collective is the identity (all_gather and reduce_scatter copy), barrier returns. Multi-rank
// checks need mpirun and several GPUs and belong in tests/mpi once GPU runners exist.
// The Tensor calls run on device tensors of the CUDA backend and on host tensors (staged through
// device memory), in f32 and bf16.
// Blocking point-to-point is not tested here: a blocking send to oneself waits for a recv that is
// never posted (a deferred send followed by its recv is). Skips without a CUDA device (MPI is initialized only when a device is present).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "core/cuda_backend.h"
#include "gpu_test_util.h"
#include "parallel/nccl_communicator.h"

namespace {

// MPI_Init (singleton, no mpirun needed) before the tests, MPI_Finalize after, only with a GPU.
class MpiEnv : public ::testing::Environment {
 public:
  void SetUp() override {
    if (vt::cuda::cuda_device_count() == 0) return;
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      MPI_Init(nullptr, nullptr);
      owned_ = true;
    }
  }
  void TearDown() override {
    if (owned_) MPI_Finalize();
  }

 private:
  bool owned_ = false;
};
::testing::Environment* const kMpiEnv = ::testing::AddGlobalTestEnvironment(new MpiEnv);

template <class T>
using DeviceBuffer = vt::gputest::RawDeviceBuffer<T>;

template <class T>
std::vector<T> iota_vec(size_t n, T start) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + T(i) * T(0.5);
  return v;
}

TEST(GpuNccl, OneRankCollectivesAreIdentity) {
  VT_SKIP_WITHOUT_CUDA();
  vt::NcclCommunicator comm(MPI_COMM_SELF, nullptr);  // no CUDA backend: the default stream
  EXPECT_EQ(comm.size(), 1);
  EXPECT_EQ(comm.rank(), 0);
  int dev = -1;
  VT_CUDA_CHECK(cudaGetDevice(&dev));
  EXPECT_EQ(dev, comm.device());

  const size_t n = 1000;
  const auto f = iota_vec<float>(n, -3.0f);
  const auto d = iota_vec<double>(n, 1e10);

  DeviceBuffer<float> a(f);
  comm.all_reduce_sum(a.p, int64_t(n));
  EXPECT_EQ(a.get(), f);
  comm.all_reduce_max(a.p, int64_t(n));
  EXPECT_EQ(a.get(), f);
  comm.broadcast(a.p, int64_t(n), 0);
  EXPECT_EQ(a.get(), f);

  DeviceBuffer<double> b(d);
  comm.all_reduce_sum(b.p, int64_t(n));
  EXPECT_EQ(b.get(), d);

  DeviceBuffer<float> out(std::vector<float>(n, 0.0f));
  comm.all_gather(a.p, out.p, int64_t(n));
  EXPECT_EQ(out.get(), f);
  DeviceBuffer<float> out2(std::vector<float>(n, 0.0f));
  comm.reduce_scatter_sum(a.p, out2.p, int64_t(n));
  EXPECT_EQ(out2.get(), f);

  comm.barrier();
}

// One rank: all_reduce and broadcast are identities (returned early), all_gather and
// reduce_scatter are NCCL copies in the tensor's own dtype; values must come back unchanged.
TEST(GpuNccl, OneRankTensorCallsKeepValues) {
  VT_SKIP_WITHOUT_CUDA();
  vt::set_device_backend(vt::make_cuda_backend());
  {
    vt::NcclCommunicator comm(MPI_COMM_SELF,
                              vt::cuda_compute_stream(vt::backend(vt::Device::kCUDA)));
    const size_t n = 1000;
    std::vector<float> f(n);  // exact in bf16: multiples of 0.5 in [-16, 15.5]
    for (size_t i = 0; i < n; ++i) f[i] = float(i % 64) * 0.5f - 16.0f;
    for (vt::DType dt : {vt::DType::kF32, vt::DType::kBF16}) {
      for (vt::Device dev : {vt::Device::kCUDA, vt::Device::kCPU}) {
        SCOPED_TRACE(testing::Message() << vt::dtype_name(dt) << " on "
                                        << (dev == vt::Device::kCUDA ? "device" : "host"));
        const vt::Tensor a =
            vt::Tensor::from_host(f.data(), {int64_t(n)}, vt::Device::kCPU).to(dev, dt);
        comm.all_reduce_sum(a);
        comm.all_reduce_max(a);
        comm.broadcast(a, 0);
        EXPECT_EQ(a.to_host_f32(), f);
        const vt::Tensor out = vt::Tensor::zeros({int64_t(n)}, dt, dev);
        comm.all_gather(a, out);
        EXPECT_EQ(out.to_host_f32(), f);
        const vt::Tensor out2 = vt::Tensor::zeros({int64_t(n)}, dt, dev);
        comm.reduce_scatter_sum(a, out2);
        EXPECT_EQ(out2.to_host_f32(), f);
      }
    }
    // A deferred send to oneself goes out in one NCCL group with the recv that matches it (a
    // blocking send to oneself would wait forever; so would two deferred sends to oneself before
    // their recvs, since the first recv's group would hold an unmatched self-send). The source
    // may be overwritten right after send_async.
    for (vt::Device dev : {vt::Device::kCUDA, vt::Device::kCPU}) {
      for (int rep = 0; rep < 2; ++rep) {
        vt::Tensor a = vt::Tensor::from_host(f.data(), {int64_t(n)}, vt::Device::kCPU).to(dev);
        comm.send_async(a, 0, 1);
        a.zero_();
        const vt::Tensor r = vt::Tensor::zeros({int64_t(n)}, vt::DType::kF32, dev);
        comm.recv(r, 0, 1);
        comm.wait_sends();
        EXPECT_EQ(r.to_host_f32(), f);
      }
    }
    // Device work queued on the backend's stream right before a collective is seen by it.
    comm.set_stream(vt::cuda_compute_stream(vt::backend(vt::Device::kCUDA)));
    const vt::Tensor d = vt::Tensor::zeros({int64_t(n)}, vt::DType::kF32, vt::Device::kCUDA);
    d.copy_from(vt::Tensor::view(const_cast<float*>(f.data()), {int64_t(n)}));
    const vt::Tensor g = vt::Tensor::zeros({int64_t(n)}, vt::DType::kF32, vt::Device::kCUDA);
    comm.all_gather(d, g);
    EXPECT_EQ(g.to_host_f32(), f);
  }
  vt::backend(vt::Device::kCUDA).synchronize();
  vt::set_device_backend(nullptr);
}

}  // namespace
