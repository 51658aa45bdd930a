// Communicator: the small set of collectives and point-to-point calls the engine uses, behind
// one interface so layers never see MPI or NCCL directly. The float*/double* calls work on host
// memory; the Tensor calls take tensors on any device in f32 or bf16 (the model's activations). SelfCommunicator is the size-1 group
// (every collective is the identity); the MPI and NCCL implementations live beside it.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace vt {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  // In-place element-wise sum / max over the group.
  virtual void all_reduce_sum(float* data, int64_t n) = 0;
  virtual void all_reduce_sum(double* data, int64_t n) = 0;
  virtual void all_reduce_max(float* data, int64_t n) = 0;
  // out (size * n) = concatenation of every rank's in (n), in rank order.
  virtual void all_gather(const float* in, float* out, int64_t n) = 0;
  // in (size * n): out (n) = sum over ranks of in[rank() * n : (rank() + 1) * n].
  virtual void reduce_scatter_sum(const float* in, float* out, int64_t n) = 0;
  virtual void broadcast(float* data, int64_t n, int root) = 0;
  virtual void send(const float* data, int64_t n, int peer, int tag) = 0;
  virtual void recv(float* data, int64_t n, int peer, int tag) = 0;
  // Starts a send of a copy of `data` and returns at once; wait_sends() completes all started
  // sends. Messages to one peer with one tag arrive in order. Default: a blocking send.
  virtual void send_async(const float* data, int64_t n, int peer, int tag) {
    send(data, n, peer, tag);
  }
  virtual void wait_sends() {}
  virtual void barrier() = 0;

  // Tensor calls (same semantics; in and out share device and dtype). The default runs the
  // host calls above, staging device tensors and bf16 values through a host f32 copy: the MPI
  // fallback for GPU tensors. NcclCommunicator overrides them with native device collectives.
  virtual void all_reduce_sum(const Tensor& t);
  virtual void all_reduce_max(const Tensor& t);
  virtual void all_gather(const Tensor& in, const Tensor& out);
  virtual void reduce_scatter_sum(const Tensor& in, const Tensor& out);
  virtual void broadcast(const Tensor& t, int root);
  virtual void send(const Tensor& t, int peer, int tag);
  virtual void send_async(const Tensor& t, int peer, int tag);
  virtual void recv(const Tensor& t, int peer, int tag);

  // Non-blocking in-place sum: starts the all-reduce of t and returns; the result is only
  // there after all_reduce_wait(), and t must stay alive and untouched until then. Several may
  // be outstanding (every rank starts them in the same order). On a GPU the wait orders the
  // device's later work after the sums without blocking the host. Default: the blocking call.
  virtual void all_reduce_sum_start(const Tensor& t) { all_reduce_sum(t); }
  // Non-blocking broadcast from `root`, finished by the same all_reduce_wait() (which waits for
  // every started call, sums and broadcasts, in the order they were started). f32 or bf16
  // tensors; the bytes travel as they are (a bf16 tensor moves 2 bytes per element where the
  // communicator has a 16-bit path). Default: the blocking call.
  virtual void broadcast_start(const Tensor& t, int root) { broadcast(t, root); }
  virtual void all_reduce_wait() {}
};

// Derived communicators pull the Tensor overloads into scope with this (they override the
// host overloads by name, which would otherwise hide them).
#define VT_COMMUNICATOR_TENSOR_CALLS           \
  using Communicator::all_reduce_sum;          \
  using Communicator::all_reduce_max;          \
  using Communicator::all_gather;              \
  using Communicator::reduce_scatter_sum;      \
  using Communicator::broadcast;               \
  using Communicator::send;                    \
  using Communicator::send_async;              \
  using Communicator::recv

// The group of one process.
class SelfCommunicator final : public Communicator {
 public:
  VT_COMMUNICATOR_TENSOR_CALLS;
  int size() const override { return 1; }
  int rank() const override { return 0; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void all_gather(const float* in, float* out, int64_t n) override;
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override;
  void broadcast(float*, int64_t, int) override {}
  void send(const float*, int64_t, int, int) override;
  void recv(float*, int64_t, int, int) override;
  void barrier() override {}
};

// A process-wide SelfCommunicator for single-process defaults.
Communicator* self_communicator();

}  // namespace vt
