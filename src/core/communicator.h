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

  // The bf16 wire for the reduce-scatter (--zero 2): in (f32, size() * n) and out (f32, n) as in
  // reduce_scatter_sum, each rank's values rounded to bf16 and the reduction's additions done in
  // fp32 with bf16 results (the all-reduce's rule above; a group of one rounds). Default: the
  // values are packed to bf16 where `in` lives and reduced by the host buffer call below.
  virtual void reduce_scatter_sum_bf16(const Tensor& in, const Tensor& out);
  // The wire of the call above: in (size() * n bf16 bits), out (n). Default: a copy for a group
  // of one, else refused.
  virtual void reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n);
  // Sum to one rank: root's t ends with the sum over the group; the other ranks' t is left
  // unspecified (the default, an all-reduce, leaves the sum there too). f32 tensors.
  virtual void reduce_sum(const Tensor& t, int root) { all_reduce_sum(t); }
  // The same on the bf16 wire (root's t gets the bf16-rounded sum widened back; a group of one
  // rounds). Default: all_reduce_sum_bf16.
  virtual void reduce_sum_bf16(const Tensor& t, int root) { all_reduce_sum_bf16(t); }
  // Non-blocking variants of the four calls above, completed by all_reduce_wait() with the
  // started sums (same rules as all_reduce_sum_start: in, out and t untouched and alive until
  // the wait). Default: the blocking calls.
  virtual void reduce_scatter_sum_start(const Tensor& in, const Tensor& out) {
    reduce_scatter_sum(in, out);
  }
  virtual void reduce_scatter_sum_bf16_start(const Tensor& in, const Tensor& out) {
    reduce_scatter_sum_bf16(in, out);
  }
  virtual void reduce_sum_start(const Tensor& t, int root) { reduce_sum(t, root); }
  virtual void reduce_sum_bf16_start(const Tensor& t, int root) { reduce_sum_bf16(t, root); }

  // The all-gather's 16-bit wire: in (n bf16 bits), out (size() * n), rank order; the bits
  // travel as they are (2 bytes a value). The Tensor all_gather of bf16 tensors lands here.
  // Default: a copy for a group of one, else refused.
  virtual void all_gather(const uint16_t* in, uint16_t* out, int64_t n);
  // Non-blocking all_gather (ZeRO-2's return of the updated parameters, docs/design.md
  // "Parallelism"): f32 or bf16 tensors, the bytes as they are; completed by all_reduce_wait()
  // with every started call, or by all_reduce_wait_until() below (same rules as
  // all_reduce_sum_start). Default: the blocking call.
  virtual void all_gather_start(const Tensor& in, const Tensor& out) { all_gather(in, out); }
  // Waiting for part of the started calls, in the order they were started: started_mark() is a
  // mark after every call started so far; all_reduce_wait_until(mark) completes at least the
  // calls started before `mark` (a consumer waits for the calls it needs right before it needs
  // them, the later ones stay in flight). Only calls whose result needs no widening may be
  // outstanding then (all-gathers and broadcasts: no *_bf16_start sums). Default: marks are 0
  // and the wait is all_reduce_wait() (everything: correct, without the overlap).
  virtual int64_t started_mark() const { return 0; }
  virtual void all_reduce_wait_until(int64_t mark) { all_reduce_wait(); }
};

// Communication volume (the `comm_bytes` metric): the bytes this process has put on the wire,
// summed over every communicator of the process. Each collective counts this rank's share of
// the bandwidth-optimal ring/pipeline algorithm (what NCCL runs on large messages), so the count
// depends only on the call, not on the library's choice of algorithm: for a payload of B bytes
// (the whole tensor; for reduce-scatter the whole input, for all-gather the whole output) over a
// group of D ranks, an all-reduce sends 2 (D - 1) / D * B, a reduce-scatter, all-gather,
// broadcast or reduce (D - 1) / D * B, a send B; a group of one sends nothing. bf16 wires count
// 2 bytes a value. The implementations (MPI, NCCL) count; wrappers (HybridCommunicator) do not.
double comm_bytes_total();
void count_comm_bytes(double bytes);
// This rank's ring share, as above: `kind` is one of these.
enum class CommKind { kAllReduce, kReduceScatter, kAllGather, kBroadcast, kReduce, kSend };
double ring_bytes(CommKind kind, double payload_bytes, int group_size);
// count_comm_bytes(ring_bytes(kind, elements * elem_bytes, group_size)).
void count_collective(CommKind kind, int64_t elements, int64_t elem_bytes, int group_size);

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
  using Communicator::all_reduce_sum_bf16;      \
  using Communicator::reduce_scatter_sum_bf16;  \
  using Communicator::all_gather_start

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
