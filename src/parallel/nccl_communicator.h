// NcclCommunicator: the vt::Communicator interface over NCCL for DEVICE buffers (every pointer
// passed to the float*/double* calls is a CUDA device pointer; the Tensor calls also take host
// tensors, see below). Bootstrapped over MPI: rank 0 of the MPI group calls
// ncclGetUniqueId, the id is broadcast with MPI_Bcast, and every rank calls ncclCommInitRank
// with its MPI rank, so the NCCL ranks equal the MPI ranks of that group.
//
// One rank per GPU: the constructor makes this process's device current
// (process_device_index(), core/process_device.h: the same device the CUDA backend uses, chosen
// from the node-local rank of the process, never from its rank inside `comm`).
//
// Semantics: calls on device memory are queued on stream() and return without waiting for them:
// by default stream() is the compute stream the communicator was built with (the CUDA backend's
// own stream, cuda_compute_stream(backend) in core/cuda_backend.h), so a collective
// runs after every op the backend queued before it and before every op it queues next, on the
// device, with no host synchronization at all (this is what lets a training step queue its work
// ahead of the GPU). The legacy default stream (plain cudaMemcpy) waits for the backend's
// blocking stream, so reading a result that way, or through Tensor copies (which synchronize),
// sees it. set_stream() picks another stream; the communicator then orders it with the compute
// stream by events (device-side waits) in both directions. The host waits only where host memory
// takes part: Tensor calls on host tensors (staged, see below) return with the result in host
// memory, and barrier() returns once every rank has reached it.
//
// Tensor calls (f32 -> ncclFloat32, bf16 -> ncclBfloat16; other dtypes are an error):
//   - device tensors (Device::kCUDA, on a communicator built with a compute stream) go to NCCL as they are,
//     in their own dtype: a bf16 sum is reduced by NCCL in bf16 storage (rounded at each step
//     of its ring/tree), unlike the base class's fp32 host staging; reduce f32 tensors where
//     fp32 accuracy matters. Device tensors of the device emulator (host memory tagged kCUDA)
//     are refused: use an MPI communicator with the emulator.
//   - host tensors are staged through a temporary device buffer (copied in, collective, copied
//     back), because NCCL cannot read host memory; the results equal those for device tensors.
//     (The base class's staging is no fallback here: it ends in the float* calls, which take
//     device pointers on this communicator.)
//
// Point-to-point. NCCL has no tags (`tag` is ignored): messages between one pair arrive in call
// order. NCCL sends are rendezvous (a send completes only together with the peer's recv), so
// send_async cannot simply be a blocking send: 1F1B pipelines, where neighbours send to each
// other before receiving, would deadlock. Instead send_async (both overloads) copies the data
// into a device buffer of the communicator and returns at once (the caller may reuse its buffer,
// as with MPI's buffered sends); the deferred sends are issued, in call order and in one NCCL
// group (ncclGroupStart/End) with the next recv or blocking send of this communicator, so a rank
// that sends to its neighbour and then receives from it never waits for a peer that is doing the
// same. wait_sends() issues whatever is still deferred (stream-ordered, like every call);
// collectives and the destructor issue pending sends first. Caveat (where this differs from MPI): a deferred send is
// not on the wire until this rank next receives, sends, waits or runs a collective on this
// communicator, so a peer must not wait for it while this rank blocks on something else (e.g. a
// collective of another group that the peer would have to join first). A deferred send to
// oneself must be received by the very next recv (a group holding an unmatched self-send never
// completes). send (not deferred) completes on the device once the peer has received, and two
// ranks that both send first with it deadlock (their streams do).
#pragma once
#include <cuda_runtime_api.h>
#include <mpi.h>
#include <nccl.h>

#include <cstdint>
#include <vector>

#include "core/communicator.h"

namespace vt {

class NcclCommunicator final : public Communicator {
 public:
  VT_COMMUNICATOR_TENSOR_CALLS;

  // Collective over `comm` (not taken over: the caller keeps owning it, e.g. an
  // MpiCommunicator's comm()). Makes this process's device current (see above).
  // `compute_stream`: the CUDA backend's stream (cuda_compute_stream(backend(Device::kCUDA)),
  // core/cuda_backend.h), which calls are ordered with and queued on by default, and which must
  // outlive the communicator; nullptr without a CUDA backend: calls then run on the legacy
  // default stream and device tensors (the device emulator's, in host memory) are refused.
  NcclCommunicator(MPI_Comm comm, cudaStream_t compute_stream);
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
  // Deferred sends (see above).
  void send_async(const float* data, int64_t n, int peer, int tag) override;
  void wait_sends() override;
  void barrier() override;

  // Tensor calls (see above).
  void all_reduce_sum(const Tensor& t) override;
  void all_reduce_max(const Tensor& t) override;
  void all_gather(const Tensor& in, const Tensor& out) override;
  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override;
  void broadcast(const Tensor& t, int root) override;
  void send(const Tensor& t, int peer, int tag) override;
  void send_async(const Tensor& t, int peer, int tag) override;
  void recv(const Tensor& t, int peer, int tag) override;
  // Non-blocking sums of device tensors on a stream of their own (after the backend's queued
  // work, via an event); all_reduce_wait() makes the backend's stream wait for them (an event,
  // no host synchronization). Every other call of this communicator waits for them first.
  // Host tensors: the blocking call.
  void all_reduce_sum_start(const Tensor& t) override;
  // The same for a broadcast of a device tensor (f32 or bf16, as its type); host: blocking.
  void broadcast_start(const Tensor& t, int root) override;
  void all_reduce_wait() override;
  // The bf16 wire (communicator.h): f32 tensors are cast to a bf16 buffer on their device (the
  // backend's stream), summed by ncclAllReduce(ncclBfloat16, ncclSum) (NCCL adds two bf16 values
  // in fp32 and rounds to bf16 at each step) and cast back; host tensors are packed on the host
  // and staged. The start variant sums on the started sums' stream; all_reduce_wait() queues the
  // cast back on the backend's stream after the sums. The buffer call takes device memory.
  void all_reduce_sum_bf16(const Tensor& t) override;
  void all_reduce_sum_bf16_start(const Tensor& t) override;
  // The other started calls on device tensors, on the started sums' stream likewise (host
  // tensors: the blocking calls): ncclAllGather (f32 or bf16, as their type), ncclReduceScatter
  // and ncclReduce in f32, and their bf16 wires (packed to bf16 on the backend's stream before
  // the start; all_reduce_wait() widens the results back on it, as for the bf16 sums).
  void all_gather_start(const Tensor& in, const Tensor& out) override;
  void reduce_scatter_sum_start(const Tensor& in, const Tensor& out) override;
  void reduce_scatter_sum_bf16_start(const Tensor& in, const Tensor& out) override;
  void reduce_sum_start(const Tensor& t, int root) override;
  void reduce_sum_bf16_start(const Tensor& t, int root) override;
  // Marks count the started calls; an event recorded after each lets all_reduce_wait_until make
  // the backend's stream wait for the calls up to a mark only (a device-side wait: the later
  // ones stay in flight behind the backend's next work). With bf16 results still to widen, or
  // a mark at the newest call, it is all_reduce_wait().
  int64_t started_mark() const override { return started_; }
  void all_reduce_wait_until(int64_t mark) override;
  void all_reduce_sum_bf16(uint16_t* data, int64_t n) override;
  // The reduce-scatter's bf16 wire: cast to bf16 on the tensors' device, ncclReduceScatter in
  // ncclBfloat16, cast back (host tensors staged).
  void reduce_scatter_sum_bf16(const Tensor& in, const Tensor& out) override;
  // ncclReduce to root in the tensor's dtype (f32); the bf16 form casts to bf16 on t's device,
  // reduces in ncclBfloat16 and casts back (non-roots get their own rounded values back).
  void reduce_sum(const Tensor& t, int root) override;
  void reduce_sum_bf16(const Tensor& t, int root) override;

  int device() const { return device_; }
  // The stream the calls run on: the one given to set_stream, else the compute stream it was
  // built with, else the legacy default stream.
  cudaStream_t stream() const;
  void set_stream(cudaStream_t s) {
    stream_ = s;
    stream_set_ = true;
  }
  ncclComm_t nccl_comm() const { return comm_; }

 private:
  void check(ncclResult_t r, const char* op) const;
  void sync(const char* op) const;
  // Device-side ordering with the compute stream when stream() is another one (an event,
  // never a host wait): the collective after the backend's queued work, the backend's later work
  // after the collective. order_after_backend also completes started sums (all_reduce_wait).
  void order_after_backend(const char* op);
  // async_stream_ (made on first use) after the backend's queued work and stream()'s.
  void order_async_after_all(const char* op);
  void order_before_backend(const char* op);
  void stream_wait(cudaStream_t to, cudaStream_t from, const char* op);
  // End of a call: a host wait when host memory took part (staged tensors), else
  // order_before_backend.
  void done(const char* op, bool host_memory);
  void all_reduce(const Tensor& t, ncclRedOp_t red, const char* op);
  // Copies `bytes` from src into a new device buffer and queues a send of it (see above).
  void defer_send(const void* src, size_t bytes, cudaMemcpyKind kind, size_t count,
                  ncclDataType_t type, int peer, const char* op);
  // One NCCL group: every deferred send, then (when given) one send of send_buf or one recv
  // into recv_buf; frees the deferred buffers (stream-ordered). Does not synchronize.
  void issue_with_pending(const void* send_buf, void* recv_buf, size_t count, ncclDataType_t type,
                          int peer, const char* op);
  void flush_sends(const char* op);

  struct PendingSend {
    void* buf = nullptr;
    size_t count = 0;
    ncclDataType_t type = ncclFloat32;
    int peer = 0;
  };
  std::vector<PendingSend> pending_;

  cudaStream_t async_stream_ = nullptr;  // non-blocking stream of the started sums
  cudaEvent_t async_ready_ = nullptr, async_done_ = nullptr;
  bool async_pending_ = false;
  struct Bf16Sum {
    Tensor target, wire;  // an f32 tensor and its bf16 buffer, both on the device
    Tensor input;         // a reduce-scatter's packed bf16 input, alive until the wait
  };
  // A started call on async_stream_: counted, and an event recorded after it (marks_).
  void note_started(const char* op);
  // Whether a started call on `t` can go to async_stream_ (a device tensor with the backend).
  bool can_start(const Tensor& t) const;
  int64_t started_ = 0;
  std::vector<std::pair<int64_t, cudaEvent_t>> marks_;  // (mark, event after that call)
  void release_marks(size_t count);
  std::vector<Bf16Sum> bf16_sums_;  // started bf16 sums, widened back by all_reduce_wait

  ncclComm_t comm_ = nullptr;
  cudaStream_t compute_stream_ = nullptr;  // the CUDA backend's stream (constructor), or null
  cudaStream_t stream_ = nullptr;  // set_stream's choice (see stream())
  bool stream_set_ = false;
  cudaEvent_t order_ev_ = nullptr;  // ordering between stream() and the backend's stream
  float* scratch_ = nullptr;  // one float on the device, for barrier()
  int size_ = 1, rank_ = 0, device_ = 0;
};

}  // namespace vt
