// NcclCommunicator (see nccl_communicator.h): host code over the NCCL API, built when vtrain is
// built with CUDA (real NCCL, or the emulation's NCCL over MPI). Failures abort the whole job
// (MPI_Abort) with a message naming the rank and the operation, so a failed collective never
// leaves the other ranks hanging. Calls on device memory are stream-ordered on stream() (the compute
// stream it was built with, by default) and return without waiting; only host memory (staged
// tensors) and barrier() make the host wait.
#if VTRAIN_HAS_CUDA
#include "parallel/nccl_communicator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/ops.h"
#include "core/process_device.h"

namespace vt {
namespace {

[[noreturn]] void die(int rank, const char* op, const std::string& why) {
  std::fprintf(stderr, "[rank %d] NCCL communicator: %s failed: %s\n", rank, op, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 2);
  std::abort();
}

void check_mpi(int err, int rank, const char* op) {
  if (err == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, msg, &len);
  die(rank, op, std::string(msg, len));
}

void check_cuda(cudaError_t err, int rank, const char* op) {
  if (err != cudaSuccess) die(rank, op, cudaGetErrorString(err));
}

int64_t nccl_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclFloat64: return 8;
    case ncclFloat16: case ncclBfloat16: return 2;
    default: return 4;
  }
}

ncclDataType_t nccl_type(const Tensor& t, int rank, const char* op) {
  switch (t.dtype()) {
    case DType::kF32: return ncclFloat32;
    case DType::kBF16: return ncclBfloat16;
    default: break;
  }
  die(rank, op, std::string("tensor calls take f32 or bf16 tensors, got ") + dtype_name(t.dtype()));
}

// The device memory NCCL reads / writes for a tensor: the tensor's own memory for a device
// tensor; for a host tensor a temporary device buffer on `stream` (filled from the tensor when
// `load`; store_back() enqueues the copy back). Everything is stream-ordered on `stream`; the
// caller synchronizes the stream before the host tensor is read and after the last use.
class Staged {
 public:
  // `device_tensors_ok`: the communicator was built with a CUDA backend's compute stream.
  Staged(const Tensor& t, bool load, cudaStream_t stream, bool device_tensors_ok, int rank,
         const char* op)
      : t_(t), stream_(stream), rank_(rank), op_(op) {
    if (t.device() == Device::kCUDA) {
      if (!device_tensors_ok)
        die(rank, op,
            "device tensors without the CUDA backend (the device emulator keeps them in host "
            "memory): use an MPI communicator with --device emulated");
      p_ = t.raw();
      return;
    }
    host_ = true;
    check_cuda(cudaMallocAsync(&p_, t.nbytes(), stream_), rank_, op_);
    if (load)
      check_cuda(cudaMemcpyAsync(p_, t.raw(), t.nbytes(), cudaMemcpyHostToDevice, stream_), rank_,
                 op_);
  }
  ~Staged() {
    if (host_) check_cuda(cudaFreeAsync(p_, stream_), rank_, op_);
  }
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;
  void* p() const { return p_; }
  void store_back() const {
    if (host_)
      check_cuda(cudaMemcpyAsync(t_.raw(), p_, t_.nbytes(), cudaMemcpyDeviceToHost, stream_),
                 rank_, op_);
  }

 private:
  Tensor t_;
  cudaStream_t stream_;
  int rank_;
  const char* op_;
  bool host_ = false;
  void* p_ = nullptr;
};

void check_pair(const Tensor& in, const Tensor& out, int64_t in_factor, int64_t out_factor,
                int rank, const char* op) {
  if (in.device() != out.device() || in.dtype() != out.dtype())
    die(rank, op, "in and out must share device and dtype");
  if (in.numel() * in_factor != out.numel() * out_factor)
    die(rank, op, "sizes " + std::to_string(in.numel()) + " and " + std::to_string(out.numel()) +
                      " do not match the group size");
}

}  // namespace

NcclCommunicator::NcclCommunicator(MPI_Comm comm, cudaStream_t compute_stream)
    : compute_stream_(compute_stream) {
  check_mpi(MPI_Comm_rank(comm, &rank_), 0, "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size_), rank_, "MPI_Comm_size");
  int ndev = 0;
  check_cuda(cudaGetDeviceCount(&ndev), rank_, "cudaGetDeviceCount");
  if (ndev < 1) die(rank_, "device selection", "no CUDA device");
  device_ = process_device_index(ndev);
  check_cuda(cudaSetDevice(device_), rank_, "cudaSetDevice");

  ncclUniqueId id{};
  if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  check_mpi(MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, comm), rank_, "MPI_Bcast(ncclUniqueId)");
  check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float)), rank_,
             "cudaMalloc(barrier scratch)");
}

NcclCommunicator::~NcclCommunicator() {
  // Deferred sends still pending go out now (a peer may be waiting for them).
  if (comm_ && !pending_.empty()) {
    flush_sends("~NcclCommunicator");
    cudaStreamSynchronize(stream());
  }
  if (order_ev_) cudaEventDestroy(order_ev_);
  release_marks(marks_.size());
  if (async_stream_) {
    cudaStreamSynchronize(async_stream_);
    cudaStreamDestroy(async_stream_);
    cudaEventDestroy(async_ready_);
    cudaEventDestroy(async_done_);
  }
  if (scratch_) cudaFree(scratch_);
  if (comm_) {
    ncclCommFinalize(comm_);  // flushes outstanding work (blocking communicator)
    ncclCommDestroy(comm_);
  }
}

void NcclCommunicator::check(ncclResult_t r, const char* op) const {
  if (r == ncclSuccess) return;
  std::string why = ncclGetErrorString(r);
  if (comm_) {
    const char* last = ncclGetLastError(comm_);
    if (last && *last) why += std::string(" (") + last + ")";
  }
  die(rank_, op, why);
}

cudaStream_t NcclCommunicator::stream() const {
  if (stream_set_) return stream_;
  return compute_stream_ ? compute_stream_ : stream_;
}

void NcclCommunicator::sync(const char* op) const {
  check_cuda(cudaStreamSynchronize(stream()), rank_, op);
}

// `to` waits (on the device) for what is queued on `from` so far.
void NcclCommunicator::stream_wait(cudaStream_t to, cudaStream_t from, const char* op) {
  if (order_ev_ == nullptr)
    check_cuda(cudaEventCreateWithFlags(&order_ev_, cudaEventDisableTiming), rank_, op);
  check_cuda(cudaEventRecord(order_ev_, from), rank_, op);
  check_cuda(cudaStreamWaitEvent(to, order_ev_, 0), rank_, op);
}

void NcclCommunicator::order_after_backend(const char* op) {
  // Started sums first (the backend's stream then waits for them, on the device).
  if (async_pending_) all_reduce_wait();
  const cudaStream_t bs = compute_stream_, s = stream();
  if (bs != nullptr && bs != s) stream_wait(s, bs, op);
}

void NcclCommunicator::order_before_backend(const char* op) {
  const cudaStream_t bs = compute_stream_, s = stream();
  if (bs != nullptr && bs != s) stream_wait(bs, s, op);
}

void NcclCommunicator::all_reduce_sum(float* data, int64_t n) {
  order_after_backend("all_reduce_sum");
  flush_sends("all_reduce_sum");
  count_collective(CommKind::kAllReduce, n, 4, size_);
  check(ncclAllReduce(data, data, size_t(n), ncclFloat32, ncclSum, comm_, stream()),
        "all_reduce_sum(f32)");
  order_before_backend("all_reduce_sum(f32)");
}

void NcclCommunicator::all_reduce_sum(double* data, int64_t n) {
  order_after_backend("all_reduce_sum");
  flush_sends("all_reduce_sum");
  count_collective(CommKind::kAllReduce, n, 8, size_);
  check(ncclAllReduce(data, data, size_t(n), ncclFloat64, ncclSum, comm_, stream()),
        "all_reduce_sum(f64)");
  order_before_backend("all_reduce_sum(f64)");
}

void NcclCommunicator::all_reduce_max(float* data, int64_t n) {
  order_after_backend("all_reduce_max");
  flush_sends("all_reduce_max");
  count_collective(CommKind::kAllReduce, n, 4, size_);
  check(ncclAllReduce(data, data, size_t(n), ncclFloat32, ncclMax, comm_, stream()),
        "all_reduce_max");
  order_before_backend("all_reduce_max");
}

void NcclCommunicator::all_gather(const float* in, float* out, int64_t n) {
  order_after_backend("all_gather");
  flush_sends("all_gather");
  count_collective(CommKind::kAllGather, n * size_, 4, size_);
  check(ncclAllGather(in, out, size_t(n), ncclFloat32, comm_, stream()), "all_gather");
  order_before_backend("all_gather");
}

void NcclCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  order_after_backend("reduce_scatter_sum");
  flush_sends("reduce_scatter_sum");
  count_collective(CommKind::kReduceScatter, n * size_, 4, size_);
  check(ncclReduceScatter(in, out, size_t(n), ncclFloat32, ncclSum, comm_, stream()),
        "reduce_scatter_sum");
  order_before_backend("reduce_scatter_sum");
}

void NcclCommunicator::broadcast(float* data, int64_t n, int root) {
  order_after_backend("broadcast");
  flush_sends("broadcast");
  count_collective(CommKind::kBroadcast, n, 4, size_);
  check(ncclBroadcast(data, data, size_t(n), ncclFloat32, root, comm_, stream()), "broadcast");
  order_before_backend("broadcast");
}

void NcclCommunicator::send(const float* data, int64_t n, int peer, int /*tag*/) {
  const char* op = "send";
  order_after_backend(op);
  issue_with_pending(data, nullptr, size_t(n), ncclFloat32, peer, op);
  order_before_backend(op);
}

void NcclCommunicator::recv(float* data, int64_t n, int peer, int /*tag*/) {
  const char* op = "recv";
  order_after_backend(op);
  issue_with_pending(nullptr, data, size_t(n), ncclFloat32, peer, op);
  order_before_backend(op);
}

void NcclCommunicator::barrier() {
  order_after_backend("barrier");
  flush_sends("barrier");
  check(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream()), "barrier");
  sync("barrier");
}

void NcclCommunicator::send_async(const float* data, int64_t n, int peer, int /*tag*/) {
  const char* op = "send_async";
  if (n == 0) return;
  order_after_backend(op);
  defer_send(data, sizeof(float) * size_t(n), cudaMemcpyDeviceToDevice, size_t(n), ncclFloat32,
             peer, op);
}

void NcclCommunicator::wait_sends() {
  const char* op = "wait_sends";
  if (pending_.empty()) return;
  order_after_backend(op);
  issue_with_pending(nullptr, nullptr, 0, ncclFloat32, -1, op);
  order_before_backend(op);
}

void NcclCommunicator::defer_send(const void* src, size_t bytes, cudaMemcpyKind kind, size_t count,
                                  ncclDataType_t type, int peer, const char* op) {
  PendingSend ps;
  ps.count = count;
  ps.type = type;
  ps.peer = peer;
  const cudaStream_t s = stream();
  check_cuda(cudaMallocAsync(&ps.buf, bytes, s), rank_, op);
  check_cuda(cudaMemcpyAsync(ps.buf, src, bytes, kind, s), rank_, op);
  // The copy is taken before the caller reuses the source: a device source is overwritten only by
  // work the backend queues later (ordered after the copy), and a host source is pageable memory,
  // which cudaMemcpyAsync has read by the time it returns.
  order_before_backend(op);
  pending_.push_back(ps);
}

void NcclCommunicator::issue_with_pending(const void* send_buf, void* recv_buf, size_t count,
                                          ncclDataType_t type, int peer, const char* op) {
  const cudaStream_t s = stream();
  check(ncclGroupStart(), op);
  for (const PendingSend& ps : pending_)
    count_collective(CommKind::kSend, int64_t(ps.count), nccl_bytes(ps.type), size_);
  if (send_buf != nullptr) count_collective(CommKind::kSend, int64_t(count), nccl_bytes(type), size_);
  for (const PendingSend& ps : pending_)
    check(ncclSend(ps.buf, ps.count, ps.type, ps.peer, comm_, stream()), op);
  if (send_buf != nullptr) check(ncclSend(send_buf, count, type, peer, comm_, s), op);
  if (recv_buf != nullptr) check(ncclRecv(recv_buf, count, type, peer, comm_, s), op);
  check(ncclGroupEnd(), op);
  // Stream-ordered: the buffers are recycled only after the sends have run.
  for (const PendingSend& ps : pending_) check_cuda(cudaFreeAsync(ps.buf, s), rank_, op);
  pending_.clear();
}

void NcclCommunicator::flush_sends(const char* op) {
  if (!pending_.empty()) issue_with_pending(nullptr, nullptr, 0, ncclFloat32, -1, op);
}

// ---------------------------------------------------------------------------------------------
// Tensor calls: order with the backend, stage host tensors, one NCCL call in the tensor's dtype,
// copy staged results back; wait only when host memory is involved.

void NcclCommunicator::done(const char* op, bool host_memory) {
  if (host_memory)
    sync(op);  // the staged copies into and out of host memory are complete
  else
    order_before_backend(op);
}

void NcclCommunicator::all_reduce(const Tensor& t, ncclRedOp_t red, const char* op) {
  if (size_ == 1 || t.numel() == 0) return;
  const ncclDataType_t type = nccl_type(t, rank_, op);
  order_after_backend(op);
  flush_sends(op);
  {
    Staged b(t, true, stream(), compute_stream_ != nullptr, rank_, op);
    count_collective(CommKind::kAllReduce, t.numel(), nccl_bytes(type), size_);
    check(ncclAllReduce(b.p(), b.p(), size_t(t.numel()), type, red, comm_, stream()), op);
    b.store_back();
  }
  done(op, t.on_host());
}

// Makes async_stream_ (created on first use) wait for everything queued so far on the backend's
// stream (which wrote the tensor) and on stream() (the deferred sends just issued), without
// blocking the host.
void NcclCommunicator::order_async_after_all(const char* op) {
  if (async_stream_ == nullptr) {
    check_cuda(cudaStreamCreateWithFlags(&async_stream_, cudaStreamNonBlocking), rank_, op);
    check_cuda(cudaEventCreateWithFlags(&async_ready_, cudaEventDisableTiming), rank_, op);
    check_cuda(cudaEventCreateWithFlags(&async_done_, cudaEventDisableTiming), rank_, op);
  }
  const cudaStream_t bs = compute_stream_, s = stream();
  check_cuda(cudaEventRecord(async_ready_, bs ? bs : s), rank_, op);
  check_cuda(cudaStreamWaitEvent(async_stream_, async_ready_, 0), rank_, op);
  if (bs && bs != s) {
    check_cuda(cudaEventRecord(async_ready_, s), rank_, op);
    check_cuda(cudaStreamWaitEvent(async_stream_, async_ready_, 0), rank_, op);
  }
}

void NcclCommunicator::all_reduce_sum_start(const Tensor& t) {
  const char* op = "all_reduce_sum (start)";
  if (size_ == 1 || t.numel() == 0) return;
  if (t.on_host()) {
    all_reduce_sum(t);
    return;
  }
  const ncclDataType_t type = nccl_type(t, rank_, op);
  flush_sends(op);
  order_async_after_all(op);
  count_collective(CommKind::kAllReduce, t.numel(), nccl_bytes(type), size_);
  check(ncclAllReduce(t.raw(), t.raw(), size_t(t.numel()), type, ncclSum, comm_, async_stream_),
        op);
  note_started(op);
}

void NcclCommunicator::broadcast_start(const Tensor& t, int root) {
  const char* op = "broadcast (start)";
  if (size_ == 1 || t.numel() == 0) return;
  if (t.on_host()) {
    broadcast(t, root);
    return;
  }
  const ncclDataType_t type = nccl_type(t, rank_, op);
  flush_sends(op);
  order_async_after_all(op);
  count_collective(CommKind::kBroadcast, t.numel(), nccl_bytes(type), size_);
  check(ncclBroadcast(t.raw(), t.raw(), size_t(t.numel()), type, root, comm_, async_stream_), op);
  note_started(op);
}

void NcclCommunicator::note_started(const char* op) {
  async_pending_ = true;
  ++started_;
  cudaEvent_t ev = nullptr;
  check_cuda(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), rank_, op);
  check_cuda(cudaEventRecord(ev, async_stream_), rank_, op);
  marks_.emplace_back(started_, ev);
}

void NcclCommunicator::release_marks(size_t count) {
  for (size_t i = 0; i < count && i < marks_.size(); ++i) cudaEventDestroy(marks_[i].second);
  marks_.erase(marks_.begin(), marks_.begin() + std::min(count, marks_.size()));
}

bool NcclCommunicator::can_start(const Tensor& t) const {
  return !t.on_host() && compute_stream_ != nullptr && size_ > 1;
}

void NcclCommunicator::all_reduce_wait_until(int64_t mark) {
  if (!async_pending_) return;
  if (!bf16_sums_.empty() || marks_.empty() || mark >= marks_.back().first) {
    all_reduce_wait();
    return;
  }
  const char* op = "all_reduce_sum (wait until)";
  // The newest call up to the mark: its event follows every earlier one on async_stream_.
  size_t last = marks_.size();
  for (size_t i = 0; i < marks_.size() && marks_[i].first <= mark; ++i) last = i;
  if (last == marks_.size()) return;  // those were waited for already
  const cudaStream_t bs = compute_stream_, s = stream();
  check_cuda(cudaStreamWaitEvent(bs ? bs : s, marks_[last].second, 0), rank_, op);
  if (bs && bs != s) check_cuda(cudaStreamWaitEvent(s, marks_[last].second, 0), rank_, op);
  release_marks(last + 1);
}

void NcclCommunicator::all_gather_start(const Tensor& in, const Tensor& out) {
  const char* op = "all_gather (start)";
  if (!can_start(in) || in.numel() == 0) {
    all_gather(in, out);
    return;
  }
  check_pair(in, out, size_, 1, rank_, op);
  const ncclDataType_t type = nccl_type(in, rank_, op);
  flush_sends(op);
  order_async_after_all(op);
  count_collective(CommKind::kAllGather, out.numel(), nccl_bytes(type), size_);
  check(ncclAllGather(in.raw(), out.raw(), size_t(in.numel()), type, comm_, async_stream_), op);
  note_started(op);
}

void NcclCommunicator::reduce_scatter_sum_start(const Tensor& in, const Tensor& out) {
  const char* op = "reduce_scatter_sum (start)";
  if (!can_start(in) || out.numel() == 0) {
    reduce_scatter_sum(in, out);
    return;
  }
  check_pair(in, out, 1, size_, rank_, op);
  const ncclDataType_t type = nccl_type(in, rank_, op);
  flush_sends(op);
  order_async_after_all(op);
  count_collective(CommKind::kReduceScatter, in.numel(), nccl_bytes(type), size_);
  check(ncclReduceScatter(in.raw(), out.raw(), size_t(out.numel()), type, ncclSum, comm_,
                          async_stream_),
        op);
  note_started(op);
}

void NcclCommunicator::reduce_scatter_sum_bf16_start(const Tensor& in, const Tensor& out) {
  if (!can_start(in) || out.numel() == 0 || in.dtype() != DType::kF32 ||
      out.dtype() != DType::kF32) {
    reduce_scatter_sum_bf16(in, out);
    return;
  }
  check_pair(in, out, 1, size_, rank_, "reduce_scatter_sum_bf16 (start)");
  Bf16Sum b{out.flat(0, out.numel()), Tensor::empty({out.numel()}, DType::kBF16, out.device()),
            Tensor::empty({in.numel()}, DType::kBF16, in.device())};
  ops::copy(b.input, in.flat(0, in.numel()));  // on the backend's stream, before the start
  reduce_scatter_sum_start(b.input, b.wire);    // ncclBfloat16
  bf16_sums_.push_back(std::move(b));
}

void NcclCommunicator::reduce_sum_start(const Tensor& t, int root) {
  const char* op = "reduce_sum (start)";
  if (!can_start(t) || t.numel() == 0) {
    reduce_sum(t, root);
    return;
  }
  const ncclDataType_t type = nccl_type(t, rank_, op);
  flush_sends(op);
  order_async_after_all(op);
  count_collective(CommKind::kReduce, t.numel(), nccl_bytes(type), size_);
  check(ncclReduce(t.raw(), t.raw(), size_t(t.numel()), type, ncclSum, root, comm_, async_stream_),
        op);
  note_started(op);
}

void NcclCommunicator::reduce_sum_bf16_start(const Tensor& t, int root) {
  if (!can_start(t) || t.numel() == 0 || t.dtype() != DType::kF32) {
    reduce_sum_bf16(t, root);
    return;
  }
  // Non-roots get their own rounded values back, as the blocking call leaves them.
  Bf16Sum b{t.flat(0, t.numel()), Tensor::empty({t.numel()}, DType::kBF16, t.device()), Tensor()};
  ops::copy(b.wire, b.target);
  reduce_sum_start(b.wire, root);
  bf16_sums_.push_back(std::move(b));
}

void NcclCommunicator::all_reduce_wait() {
  if (!async_pending_) return;
  const char* op = "all_reduce_sum (wait)";
  async_pending_ = false;
  release_marks(marks_.size());
  check_cuda(cudaEventRecord(async_done_, async_stream_), rank_, op);
  const cudaStream_t bs = compute_stream_, s = stream();
  check_cuda(cudaStreamWaitEvent(bs ? bs : s, async_done_, 0), rank_, op);
  if (bs && bs != s) check_cuda(cudaStreamWaitEvent(s, async_done_, 0), rank_, op);
  // Started bf16 sums: widened on the backend's stream, which now waits for them; their buffers
  // are freed on that stream after the casts.
  for (const Bf16Sum& b : bf16_sums_) ops::copy(b.target, b.wire);
  bf16_sums_.clear();
}

void NcclCommunicator::all_reduce_sum_bf16(uint16_t* data, int64_t n) {
  if (size_ == 1 || n == 0) return;
  order_after_backend("all_reduce_sum(bf16)");
  flush_sends("all_reduce_sum(bf16)");
  count_collective(CommKind::kAllReduce, n, 2, size_);
  check(ncclAllReduce(data, data, size_t(n), ncclBfloat16, ncclSum, comm_, stream()),
        "all_reduce_sum(bf16)");
  order_before_backend("all_reduce_sum(bf16)");
}

void NcclCommunicator::all_reduce_sum_bf16(const Tensor& t) {
  const char* op = "all_reduce_sum_bf16(tensor)";
  if (t.dtype() != DType::kF32)
    die(rank_, op, std::string("sums f32 tensors, got ") + dtype_name(t.dtype()));
  if (t.numel() == 0) return;
  if (t.device() == Device::kCUDA && compute_stream_ == nullptr)
    die(rank_, op, "device tensors without the CUDA backend (the device emulator)");
  // Packed where t lives (on the backend's stream for a device tensor), summed in bf16 by the
  // Tensor all-reduce (a host tensor through a staged device buffer), widened back where t
  // lives.
  Tensor b = Tensor::empty(t.shape(), DType::kBF16, t.device());
  ops::copy(b, t);
  all_reduce(b, ncclSum, op);
  ops::copy(t, b);
}

void NcclCommunicator::all_reduce_sum_bf16_start(const Tensor& t) {
  if (t.on_host() || size_ == 1 || t.numel() == 0 || t.dtype() != DType::kF32 ||
      compute_stream_ == nullptr) {
    all_reduce_sum_bf16(t);
    return;
  }
  Bf16Sum b{t, Tensor::empty(t.shape(), DType::kBF16, t.device()), Tensor()};
  ops::copy(b.wire, t);         // on the backend's stream, before the sum's start event
  all_reduce_sum_start(b.wire);  // ncclBfloat16 on the started sums' stream
  bf16_sums_.push_back(std::move(b));
}

void NcclCommunicator::reduce_scatter_sum_bf16(const Tensor& in, const Tensor& out) {
  const char* op = "reduce_scatter_sum_bf16(tensor)";
  if (in.dtype() != DType::kF32 || out.dtype() != DType::kF32)
    die(rank_, op, std::string("sums f32 tensors, got ") + dtype_name(in.dtype()));
  if (out.numel() == 0) return;
  if (in.device() == Device::kCUDA && compute_stream_ == nullptr)
    die(rank_, op, "device tensors without the CUDA backend (the device emulator)");
  // Packed where the tensors live, reduce-scattered by NCCL in bf16 (ncclBfloat16: fp32 adds
  // rounded to bf16 at each step), widened back. A group of one rounds.
  Tensor bi = Tensor::empty({in.numel()}, DType::kBF16, in.device());
  Tensor bo = Tensor::empty({out.numel()}, DType::kBF16, out.device());
  ops::copy(bi, in.flat(0, in.numel()));
  if (size_ == 1)
    ops::copy(bo, bi);
  else
    reduce_scatter_sum(bi, bo);
  ops::copy(out.flat(0, out.numel()), bo);
}

void NcclCommunicator::reduce_sum(const Tensor& t, int root) {
  const char* op = "reduce_sum(tensor)";
  if (size_ == 1 || t.numel() == 0) return;
  const ncclDataType_t type = nccl_type(t, rank_, op);
  order_after_backend(op);
  flush_sends(op);
  {
    Staged b(t, true, stream(), compute_stream_ != nullptr, rank_, op);
    count_collective(CommKind::kReduce, t.numel(), nccl_bytes(type), size_);
    check(ncclReduce(b.p(), b.p(), size_t(t.numel()), type, ncclSum, root, comm_, stream()), op);
    if (rank_ == root) b.store_back();
  }
  done(op, t.on_host());
}

void NcclCommunicator::reduce_sum_bf16(const Tensor& t, int root) {
  const char* op = "reduce_sum_bf16(tensor)";
  if (t.dtype() != DType::kF32)
    die(rank_, op, std::string("sums f32 tensors, got ") + dtype_name(t.dtype()));
  if (t.numel() == 0) return;
  if (t.device() == Device::kCUDA && compute_stream_ == nullptr)
    die(rank_, op, "device tensors without the CUDA backend (the device emulator)");
  Tensor b = Tensor::empty({t.numel()}, DType::kBF16, t.device());
  ops::copy(b, t.flat(0, t.numel()));
  reduce_sum(b, root);
  ops::copy(t.flat(0, t.numel()), b);
}

void NcclCommunicator::all_reduce_sum(const Tensor& t) {
  all_reduce(t, ncclSum, "all_reduce_sum(tensor)");
}

void NcclCommunicator::all_reduce_max(const Tensor& t) {
  all_reduce(t, ncclMax, "all_reduce_max(tensor)");
}

void NcclCommunicator::all_gather(const Tensor& in, const Tensor& out) {
  const char* op = "all_gather(tensor)";
  check_pair(in, out, size_, 1, rank_, op);
  if (in.numel() == 0) return;
  const ncclDataType_t type = nccl_type(in, rank_, op);
  order_after_backend(op);
  flush_sends(op);
  {
    Staged bi(in, true, stream(), compute_stream_ != nullptr, rank_, op), bo(out, false, stream(), compute_stream_ != nullptr, rank_, op);
    count_collective(CommKind::kAllGather, out.numel(), nccl_bytes(type), size_);
    check(ncclAllGather(bi.p(), bo.p(), size_t(in.numel()), type, comm_, stream()), op);
    bo.store_back();
  }
  done(op, in.on_host() || out.on_host());
}

void NcclCommunicator::reduce_scatter_sum(const Tensor& in, const Tensor& out) {
  const char* op = "reduce_scatter_sum(tensor)";
  check_pair(in, out, 1, size_, rank_, op);
  if (out.numel() == 0) return;
  const ncclDataType_t type = nccl_type(in, rank_, op);
  order_after_backend(op);
  flush_sends(op);
  {
    Staged bi(in, true, stream(), compute_stream_ != nullptr, rank_, op), bo(out, false, stream(), compute_stream_ != nullptr, rank_, op);
    count_collective(CommKind::kReduceScatter, in.numel(), nccl_bytes(type), size_);
    check(ncclReduceScatter(bi.p(), bo.p(), size_t(out.numel()), type, ncclSum, comm_, stream()),
          op);
    bo.store_back();
  }
  done(op, in.on_host() || out.on_host());
}

void NcclCommunicator::broadcast(const Tensor& t, int root) {
  const char* op = "broadcast(tensor)";
  if (size_ == 1 || t.numel() == 0) return;
  const ncclDataType_t type = nccl_type(t, rank_, op);
  order_after_backend(op);
  flush_sends(op);
  {
    Staged b(t, rank_ == root, stream(), compute_stream_ != nullptr, rank_, op);
    count_collective(CommKind::kBroadcast, t.numel(), nccl_bytes(type), size_);
    check(ncclBroadcast(b.p(), b.p(), size_t(t.numel()), type, root, comm_, stream()), op);
    if (rank_ != root) b.store_back();
  }
  done(op, t.on_host());
}

void NcclCommunicator::send(const Tensor& t, int peer, int /*tag*/) {
  const char* op = "send(tensor)";
  if (t.numel() == 0) return;
  const ncclDataType_t type = nccl_type(t, rank_, op);
  order_after_backend(op);
  {
    Staged b(t, true, stream(), compute_stream_ != nullptr, rank_, op);
    issue_with_pending(b.p(), nullptr, size_t(t.numel()), type, peer, op);
  }
  done(op, t.on_host());
}

void NcclCommunicator::send_async(const Tensor& t, int peer, int /*tag*/) {
  const char* op = "send_async(tensor)";
  if (t.numel() == 0) return;
  const ncclDataType_t type = nccl_type(t, rank_, op);
  if (t.device() == Device::kCUDA && compute_stream_ == nullptr)
    die(rank_, op, "device tensors without the CUDA backend (the device emulator)");
  order_after_backend(op);
  defer_send(t.raw(), t.nbytes(),
             t.device() == Device::kCUDA ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice,
             size_t(t.numel()), type, peer, op);
}

void NcclCommunicator::recv(const Tensor& t, int peer, int /*tag*/) {
  const char* op = "recv(tensor)";
  if (t.numel() == 0) return;
  const ncclDataType_t type = nccl_type(t, rank_, op);
  order_after_backend(op);
  {
    Staged b(t, false, stream(), compute_stream_ != nullptr, rank_, op);
    issue_with_pending(nullptr, b.p(), size_t(t.numel()), type, peer, op);
    b.store_back();
  }
  done(op, t.on_host());
}

}  // namespace vt

#endif  // VTRAIN_HAS_CUDA
