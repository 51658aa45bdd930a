// NcclCommunicator: the vt::Communicator interface over NCCL for DEVICE buffers (every pointer
// passed to it is a CUDA device pointer). Bootstrapped over MPI: rank 0 of the MPI group calls
// ncclGetUniqueId, the id is broadcast with MPI_Bcast, and every rank calls ncclCommInitRank
// with its MPI rank, so the NCCL ranks equal the MPI ranks of that group.
//
// One rank per GPU: the constructor selects the device local_rank % device_count, where
// local_rank is the rank within the node (OMPI_COMM_WORLD_LOCAL_RANK when set by Open MPI's
// launcher, else the rank in an MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) of the group).
//
// Semantics: every call enqueues on stream() and then synchronizes that stream, so when it
// returns the result is in the buffer and the input may be reused (the blocking behaviour of
// MpiCommunicator). By default stream() is the legacy default stream (nullptr), which orders
// with all blocking streams of the device; set_stream() switches to another one. Point-to-point
// send/recv ignore `tag` (NCCL has no tags): messages between one pair arrive in call order,
// and a blocking send only returns once the peer has posted the matching recv, so two ranks
// that both send first deadlock (as large MPI sends do). send_async is the interface's default
// (a blocking send). A fused send+recv with ncclGroupStart/End is the right tool for pipeline
// exchanges and can be added later.
#pragma once
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>

#include "parallel/communicator.h"

namespace vt {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `comm` (not taken over: the caller keeps owning it, e.g. an
  // MpiCommunicator's comm()). Sets the current CUDA device of this process.
  explicit NcclCommunicator(MPI_Comm comm);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(float* data, int64_t n) override;
  void all_reduce_sum(double* data, int64_t n) override;
  void all_reduce_max(float* data, int64_t n) override;
  void all_gather(const float* in, float* out, int64_t n) override;
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override;
  void broadcast(float* data, int64_t n, int root) override;
  void send(const float* data, int64_t n, int peer, int tag) override;
  void recv(float* data, int64_t n, int peer, int tag) override;
  void barrier() override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  void set_stream(cudaStream_t s) { stream_ = s; }
  ncclComm_t nccl_comm() const { return comm_; }

  // The node-local rank of this process within `comm` (see above).
  static int local_rank(MPI_Comm comm);

 private:
  void check(ncclResult_t r, const char* op) const;
  void sync(const char* op) const;

  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  float* scratch_ = nullptr;  // one float on the device, for barrier()
  int size_ = 1, rank_ = 0, device_ = 0;
};

}  // namespace vt
