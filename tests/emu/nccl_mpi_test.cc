// The emulation's NCCL over MPI (cuda_emu/nccl_mpi.cc) between real processes, one emulated
// device each: every collective against its definition (sums, max, bf16 sums rounded at each
// step, in-place forms), point-to-point in a group where both ranks send first, the refusal of
// buffers on another device and of two ranks on one device ("duplicate GPU"), and that a
// collective is queued on the stream (the host returns while the stream waits for the peer).
// vtrain-mpi-ranks: 2 3
#include <cuda_bf16.h>
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <cmath>
#include <numeric>
#include <string>
#include <vector>

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int s = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

ncclComm_t make_comm(int device) {
  EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
  ncclUniqueId id;
  if (world_rank() == 0) EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, world_size(), id, world_rank()), ncclSuccess);
  return c;
}

template <class T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&d), h.size() * sizeof(T)), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return d;
}
template <class T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(EmuNccl, CollectivesMatchTheirDefinitions) {
  const int me = world_rank(), W = world_size();
  ncclComm_t c = make_comm(me);
  int dev = -1;
  ncclCommCuDevice(c, &dev);
  EXPECT_EQ(dev, me);
  const size_t n = 100;
  auto value = [](int r, size_t i) { return float(r * 1000 + int(i)); };
  std::vector<float> mine(n);
  for (size_t i = 0; i < n; ++i) mine[i] = value(me, i);

  float* d = upload(mine);
  ASSERT_EQ(ncclAllReduce(d, d, n, ncclFloat32, ncclSum, c, nullptr), ncclSuccess);
  auto sum = download(d, n);
  ASSERT_EQ(ncclAllReduce(d, d, n, ncclFloat32, ncclMax, c, nullptr), ncclSuccess);
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < W; ++r) want += value(r, i);
    EXPECT_EQ(sum[i], want);
  }
  EXPECT_EQ(download(d, n)[7], sum[7]) << "max of equal values";

  float* all = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&all), n * W * sizeof(float)), cudaSuccess);
  float* src = upload(mine);
  ASSERT_EQ(ncclAllGather(src, all, n, ncclFloat32, c, nullptr), ncclSuccess);
  const auto gathered = download(all, n * W);
  for (int r = 0; r < W; ++r) EXPECT_EQ(gathered[size_t(r) * n + 3], value(r, 3));

  float* part = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&part), n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(ncclReduceScatter(all, part, n, ncclFloat32, ncclSum, c, nullptr), ncclSuccess);
  EXPECT_EQ(download(part, n)[5], float(W) * value(me, 5));

  ASSERT_EQ(ncclBroadcast(src, src, n, ncclFloat32, W - 1, c, nullptr), ncclSuccess);
  EXPECT_EQ(download(src, n)[9], value(W - 1, 9));
  for (float* p : {d, all, src, part}) cudaFree(p);
  ncclCommDestroy(c);
}

TEST(EmuNccl, Bf16SumsRoundAtEveryStep) {
  const int me = world_rank(), W = world_size();
  ncclComm_t c = make_comm(me);
  // 256 + 1 + 1 (+ 1): in bf16 (8 significant bits) 256 + 1 rounds back to 256 at every step,
  // so the bf16 sum stays 256 where an fp32 sum rounded once would give 258 or more.
  std::vector<__nv_bfloat16> h(4, __float2bfloat16_rn(me == 0 ? 256.0f : 1.0f));
  __nv_bfloat16* d = upload(h);
  ASSERT_EQ(ncclAllReduce(d, d, 4, ncclBfloat16, ncclSum, c, nullptr), ncclSuccess);
  const auto got = download(d, 4);
  const float exact = 256.0f + float(W - 1);
  EXPECT_EQ(__bfloat162float(got[0]), 256.0f) << "fp32-then-round would give "
                                              << __bfloat162float(__float2bfloat16_rn(exact));
  cudaFree(d);
  ncclCommDestroy(c);
}

TEST(EmuNccl, GroupedSendsAndRecvsDoNotDeadlock) {
  const int me = world_rank(), W = world_size();
  ncclComm_t c = make_comm(me);
  const int right = (me + 1) % W, left = (me + W - 1) % W;
  std::vector<float> mine(64, float(me));
  float* s = upload(mine);
  float* r = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&r), 64 * sizeof(float)), cudaSuccess);
  // Everyone sends first: rendezvous sends complete only because the group starts both.
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  ASSERT_EQ(ncclSend(s, 64, ncclFloat32, right, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclRecv(r, 64, ncclFloat32, left, c, nullptr), ncclSuccess);
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  EXPECT_EQ(download(r, 64)[10], float(left));
  cudaFree(s);
  cudaFree(r);
  ncclCommDestroy(c);
}

TEST(EmuNccl, CollectivesAreQueuedOnTheStream) {
  const int me = world_rank();
  ncclComm_t c = make_comm(me);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
  std::vector<float> one(8, 1.0f);
  float* d = upload(one);
  if (me == 0) {
    // Rank 0 queues its all-reduce and returns at once, before rank 1 has called its own: the
    // host is not blocked, the stream is.
    ASSERT_EQ(ncclAllReduce(d, d, 8, ncclFloat32, ncclSum, c, s), ncclSuccess);
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    MPI_Barrier(MPI_COMM_WORLD);
  } else {
    MPI_Barrier(MPI_COMM_WORLD);
    ASSERT_EQ(ncclAllReduce(d, d, 8, ncclFloat32, ncclSum, c, s), ncclSuccess);
  }
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  EXPECT_EQ(download(d, 8)[0], float(world_size()));
  cudaFree(d);
  cudaStreamDestroy(s);
  ncclCommDestroy(c);
}

TEST(EmuNccl, RefusesForeignBuffersAndSharedDevices) {
  const int me = world_rank();
  ncclComm_t c = make_comm(me);
  // A buffer of another device.
  ASSERT_EQ(cudaSetDevice((me + 1) % world_size()), cudaSuccess);
  float* other = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&other), 16 * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(me), cudaSuccess);
  EXPECT_EQ(ncclAllReduce(other, other, 16, ncclFloat32, ncclSum, c, nullptr), ncclInvalidArgument);
  EXPECT_NE(std::string(ncclGetLastError(c)).find("not device memory of the communicator's"),
            std::string::npos)
      << ncclGetLastError(c);
  // Host memory.
  std::vector<float> host(16);
  EXPECT_EQ(ncclAllReduce(host.data(), host.data(), 16, ncclFloat32, ncclSum, c, nullptr),
            ncclInvalidArgument);
  cudaFree(other);
  ncclCommDestroy(c);
  // Every rank on device 0: NCCL refuses a communicator with two ranks on one GPU.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ncclUniqueId id;
  if (me == 0) ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t dup = nullptr;
  EXPECT_EQ(ncclCommInitRank(&dup, world_size(), id, me), ncclInvalidUsage);
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("duplicate GPU"), std::string::npos);
}

}  // namespace
