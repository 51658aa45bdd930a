// MpiCommunicator: the Communicator interface over an MPI communicator (CPU buffers). Every
// call checks MPI's return code and aborts the whole job with a message naming this rank and
// the operation, so a failing collective never leaves the job hanging; every call is marked for
// the communication watchdog (comm_watchdog.h), which aborts the job when one never returns.
// Also owns MPI start-up and shut-down (MpiSession) for the vtrain binary and tests.
#pragma once
#include <mpi.h>

#include <string>
#include <vector>

#include "core/communicator.h"

namespace vt {

class MpiCommunicator final : public Communicator {
 public:
  VT_COMMUNICATOR_TENSOR_CALLS;
  // Takes ownership of `comm` (freed in the destructor unless it is MPI_COMM_WORLD).
  explicit MpiCommunicator(MPI_Comm comm, std::string name = "world");
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

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
  void send_async(const float* data, int64_t n, int peer, int tag) override;
  // Host f32 tensors: MPI_Iallreduce in place (progress happens inside later MPI calls and the
  // wait); device or bf16 tensors: the blocking staged call.
  void all_reduce_sum_start(const Tensor& t) override;
  // Host f32 or bf16 tensors: MPI_Ibcast of the raw elements (bf16 as 16-bit words: 2 bytes
  // each), completed by all_reduce_wait; device tensors: the blocking staged call.
  void broadcast_start(const Tensor& t, int root) override;
  void all_reduce_wait() override;
  // MPI_Allgather of 16-bit words (2 bytes a value).
  void all_gather(const uint16_t* in, uint16_t* out, int64_t n) override;
  // Host f32 or bf16 tensors: MPI_Iallgather of the raw elements, completed by all_reduce_wait
  // or all_reduce_wait_until; device tensors: the blocking staged call.
  void all_gather_start(const Tensor& in, const Tensor& out) override;
  // Marks count the requests started (the calls above); the wait completes the oldest ones.
  int64_t started_mark() const override {
    return completed_ + static_cast<int64_t>(reductions_.size());
  }
  void all_reduce_wait_until(int64_t mark) override;
  void wait_sends() override;
  // The bf16 wire (communicator.h): MPI_Allreduce of a 2-byte contiguous type with a
  // user-defined, commutative MPI_Op (the fp32 sum of two bf16 values, rounded to bf16).
  void all_reduce_sum_bf16(uint16_t* data, int64_t n) override;
  // Host f32 tensors: packed into a bf16 buffer of this communicator and MPI_Iallreduce'd;
  // all_reduce_wait() widens the sums back into the tensors. Device tensors: the blocking call.
  void all_reduce_sum_bf16_start(const Tensor& t) override;
  // The reduce-scatter's bf16 wire: MPI_Reduce_scatter_block with the same type and op.
  void reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) override;
  // MPI_Reduce to root (f32, or the bf16 type and op); a device tensor goes through host memory.
  void reduce_sum(const Tensor& t, int root) override;
  void reduce_sum_bf16(const Tensor& t, int root) override;
  // Host f32 tensors: MPI_Ireduce_scatter_block / MPI_Ireduce (bf16: packed into buffers of this
  // communicator, widened back into out / t by all_reduce_wait); device tensors: blocking.
  void reduce_scatter_sum_start(const Tensor& in, const Tensor& out) override;
  void reduce_scatter_sum_bf16_start(const Tensor& in, const Tensor& out) override;
  void reduce_sum_start(const Tensor& t, int root) override;
  void reduce_sum_bf16_start(const Tensor& t, int root) override;

  MPI_Comm comm() const { return comm_; }
  const std::string& name() const { return name_; }
  // Splits this group by `color`, ordering by `key`.
  MpiCommunicator* split(int color, int key, const std::string& name) const;

 private:
  void check(int err, const char* op) const;
  // In-place MPI_Allreduce of n elements in chunks that fit MPI's int counts.
  void all_reduce(void* data, int64_t n, MPI_Datatype type, size_t elem_bytes, MPI_Op op,
                  const char* what);
  // MPI_Reduce of n elements to root (in place there), in chunks.
  void reduce(void* data, int64_t n, MPI_Datatype type, size_t elem_bytes, MPI_Op op, int root,
              const char* what);
  MPI_Comm comm_;
  std::string name_;
  std::vector<MPI_Request> reductions_;         // sums and broadcasts started (the *_start calls)
  int64_t completed_ = 0;                       // requests waited for so far (started_mark)
  struct Bf16Sum {
    Tensor target, wire;  // the f32 tensor and its bf16 values on the wire
    Tensor input;         // a reduce-scatter's packed bf16 input, alive until the wait
  };
  std::vector<Bf16Sum> bf16_sums_;              // started by all_reduce_sum_bf16_start
  std::vector<MPI_Request> pending_;            // sends started by send_async
  std::vector<std::vector<float>> pending_buf_; // their buffers, alive until wait_sends
  const char* watch_name_;  // name_ interned for the watchdog
  int size_ = 1, rank_ = 0;
};

// MPI_Init / MPI_Finalize for a process; `world_rank()` works once constructed.
class MpiSession {
 public:
  MpiSession(int* argc, char*** argv);
  ~MpiSession();
  int world_rank() const { return rank_; }
  // Whether MPI allows calls from several threads at once (MPI_THREAD_MULTIPLE).
  static bool thread_multiple();
  int world_size() const { return size_; }

 private:
  int rank_ = 0, size_ = 1;
};

// Ends every rank of the job with `message` (prefixed by this rank), exit code `code`.
[[noreturn]] void abort_job(const std::string& message, int code = 2);

}  // namespace vt
