// Communicator::broadcast_start on MPI (src/parallel/mpi_communicator.cc): started broadcasts of
// host f32 and bf16 tensors from different roots, interleaved with a started sum, are all there
// after all_reduce_wait, bit for bit (bf16 travels as raw 16-bit words, so every pattern, NaN
// payloads included, arrives unchanged); a device tensor takes the blocking staged path; and
// the 1-rank communicator leaves the tensor as it is.
// vtrain-mpi-ranks: 2 3
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/tensor.h"
#include "parallel/mpi_communicator.h"

namespace vt {
namespace {

// Element i of a tensor rank r would send: distinct per rank and element.
std::vector<float> f32_values(int r, int n) {
  std::vector<float> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.5f * static_cast<float>(r * 1000 + i) - 3.25f;
  return v;
}
std::vector<uint16_t> bf16_bits(int r, int n) {
  std::vector<uint16_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = static_cast<uint16_t>((r * 7919 + i * 104729) & 0xffff);
  v[0] = 0x7fc1;  // a NaN with a payload
  v[1] = 0x8000;  // -0
  return v;
}
std::vector<uint16_t> bits_of(const Tensor& t) {
  std::vector<uint16_t> v(t.numel());
  std::memcpy(v.data(), t.raw(), v.size() * 2);
  return v;
}

TEST(BroadcastStart, HostF32AndBf16FromSeveralRootsArriveAtTheWait) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int me = world.rank(), W = world.size();
  const int n = 37;
  std::vector<Tensor> fs, bs;
  Tensor sum = Tensor::zeros({n});
  for (int i = 0; i < n; ++i) sum.f32()[i] = static_cast<float>(me + i);
  for (int root = 0; root < W; ++root) {
    Tensor f = Tensor::zeros({n});
    Tensor b = Tensor::zeros({n}, DType::kBF16);
    if (me == root) {
      const auto fv = f32_values(root, n);
      const auto bv = bf16_bits(root, n);
      std::memcpy(f.raw(), fv.data(), n * 4);
      std::memcpy(b.raw(), bv.data(), n * 2);
    }
    world.broadcast_start(f, root);
    if (root == 0) world.all_reduce_sum_start(sum);  // a sum among the broadcasts
    world.broadcast_start(b, root);
    fs.push_back(f);
    bs.push_back(b);
  }
  world.all_reduce_wait();
  for (int root = 0; root < W; ++root) {
    const auto fv = f32_values(root, n);
    EXPECT_EQ(std::vector<float>(fs[root].f32(), fs[root].f32() + n), fv) << "root " << root;
    EXPECT_EQ(bits_of(bs[root]), bf16_bits(root, n)) << "root " << root;
  }
  for (int i = 0; i < n; ++i)
    EXPECT_EQ(sum.f32()[i], static_cast<float>(W * (W - 1) / 2 + W * i)) << i;
}

TEST(BroadcastStart, DeviceTensorsTakeTheBlockingPath) {
  MpiCommunicator world(MPI_COMM_WORLD);
  const int me = world.rank();
  const int n = 12;
  set_device_backend(make_device_emulator());
  const auto fv = f32_values(1, n);
  Tensor host = Tensor::zeros({n});
  if (me == 1) std::memcpy(host.raw(), fv.data(), n * 4);
  {
    const Tensor dev = host.to(Device::kCUDA);  // freed before the backend goes
    world.broadcast_start(dev, 1);
    world.all_reduce_wait();
    EXPECT_EQ(dev.to_host_f32(), fv);
  }
  set_device_backend(nullptr);
}

TEST(BroadcastStart, OneRankLeavesTheTensor) {
  Tensor t = Tensor::zeros({4}, DType::kBF16);
  const std::vector<uint16_t> v{1, 2, 0x7fc1, 4};
  std::memcpy(t.raw(), v.data(), 8);
  self_communicator()->broadcast_start(t, 0);
  self_communicator()->all_reduce_wait();
  EXPECT_EQ(bits_of(t), v);
}

}  // namespace
}  // namespace vt
