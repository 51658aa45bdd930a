// Communicator: the small set of collectives and point-to-point calls the engine uses, behind
// one interface so layers never see MPI or NCCL directly. The float*/double* calls work on host
// memory; the Tensor calls take tensors on any device in f32 or bf16 (the model's activations).
// SelfCommunicator is the size-1 group (every collective is the identity, but the bf16-wire sum
// rounds to bf16); the MPI and NCCL implementations live beside it.
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

  // The bf16 wire format (docs/design.md "Parallelism", --grad-sync bf16): an in-place sum of
  // the f32 tensor t over the group that carries half the bytes. Each rank's values are rounded
  // to bf16 (nearest even), every pairwise addition of the reduction is done in fp32 and its
  // result rounded to bf16, and the bf16 result is widened back into t; every rank ends with
  // identical values. The order of the additions is the implementation's (with 2 ranks there is
  // one: bf16(bf16(a) + bf16(b))). A group of one rounds t to bf16 (the sum of one value), so a
  // run sees the same rounding on every data-parallel size. Packing and unpacking run on t's
  // device (an ops cast); the default moves the bf16 values through host memory to the buffer
  // call below.
  virtual void all_reduce_sum_bf16(const Tensor& t);
  // Non-blocking variant, completed by all_reduce_wait() together with the f32 sums (same
  // rules as all_reduce_sum_start). Default: the blocking call.
  virtual void all_reduce_sum_bf16_start(const Tensor& t) { all_reduce_sum_bf16(t); }
  // The wire itself: n bf16 values (their bits) summed in place by the rule above, in the
  // memory the float* calls take. Default: nothing for a group of one, else refused.
  virtual void all_reduce_sum_bf16(uint16_t* data, int64_t n);
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
  using Communicator::recv;                    \
  using Communicator::all_reduce_sum_bf16

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
