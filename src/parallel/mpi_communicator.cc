// MPI implementation of the Communicator interface, with the bf16 wire's MPI type and op.
#include "parallel/mpi_communicator.h"

#include <algorithm>
#include <climits>
#include <cstdio>
#include <vector>

#include "core/bf16.h"
#include "core/check.h"
#include "core/ops.h"
#include "parallel/comm_watchdog.h"

namespace vt {

namespace {
// MPI counts are int: split large transfers into chunks.
constexpr int64_t kChunk = INT_MAX / 8;

// The bf16 wire: two bytes a value, summed by adding the two values in fp32 and rounding the
// result to bf16 (nearest even). fp32 addition is commutative, so the op is too; MPI may pick
// any reduction order, and every rank receives the same result.
void bf16_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = f32_to_bf16(bf16_to_f32(a[i]) + bf16_to_f32(b[i]));
}

struct Bf16Wire {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_Op op = MPI_OP_NULL;
};

// Made on first use (after MPI_Init), kept until MPI_Finalize.
const Bf16Wire& bf16_wire() {
  static const Bf16Wire wire = [] {
    Bf16Wire w;
    MPI_Type_contiguous(2, MPI_BYTE, &w.type);
    MPI_Type_commit(&w.type);
    MPI_Op_create(bf16_sum, /*commute=*/1, &w.op);
    return w;
  }();
  return wire;
}

int world_rank_or_zero() {
  int init = 0;
  MPI_Initialized(&init);
  int r = 0;
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
}  // namespace

void abort_job(const std::string& message, int code) {
  std::fflush(stdout);
  std::fprintf(stderr, "vtrain: rank %d: %s\n", world_rank_or_zero(), message.c_str());
  std::fflush(stderr);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) {
    // With one process there is no peer to end: finalize and exit with the code, without
    // MPI_Abort's banner. With several, MPI_Abort ends the peers that would otherwise hang.
    int size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
    MPI_Finalize();
  }
  std::exit(code);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name)
    : comm_(comm), name_(std::move(name)), watch_name_(intern_group_name(name_)) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_size(comm_, &size_);
  MPI_Comm_rank(comm_, &rank_);
}

MpiCommunicator::~MpiCommunicator() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && comm_ != MPI_COMM_WORLD && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
}

void MpiCommunicator::check(int err, const char* op) const {
  if (err == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(err, msg, &len);
  abort_job(std::string("MPI ") + op + " on the " + name_ + " group failed: " +
            std::string(msg, len));
}

void MpiCommunicator::all_reduce(void* data, int64_t n, MPI_Datatype type, size_t elem_bytes,
                                 MPI_Op op, const char* what) {
  CommOpScope watch(what, watch_name_);
  char* bytes = static_cast<char*>(data);
  for (int64_t o = 0; o < n; o += kChunk)
    check(MPI_Allreduce(MPI_IN_PLACE, bytes + o * elem_bytes,
                        static_cast<int>(std::min(kChunk, n - o)), type, op, comm_),
          what);
}

void MpiCommunicator::all_reduce_sum(float* data, int64_t n) {
  count_collective(CommKind::kAllReduce, n, 4, size_);
  all_reduce(data, n, MPI_FLOAT, sizeof(float), MPI_SUM, "all-reduce");
}

void MpiCommunicator::all_reduce_sum(double* data, int64_t n) {
  count_collective(CommKind::kAllReduce, n, 8, size_);
  all_reduce(data, n, MPI_DOUBLE, sizeof(double), MPI_SUM, "all-reduce");
}

void MpiCommunicator::all_reduce_max(float* data, int64_t n) {
  count_collective(CommKind::kAllReduce, n, 4, size_);
  all_reduce(data, n, MPI_FLOAT, sizeof(float), MPI_MAX, "all-reduce(max)");
}

void MpiCommunicator::all_gather(const float* in, float* out, int64_t n) {
  CommOpScope watch("all-gather", watch_name_);
  count_collective(CommKind::kAllGather, n * size_, 4, size_);
  VT_CHECK_MSG(n <= kChunk, "all_gather of " << n << " elements is too large for one call");
  check(MPI_Allgather(in, static_cast<int>(n), MPI_FLOAT, out, static_cast<int>(n), MPI_FLOAT,
                      comm_),
        "all-gather");
}

void MpiCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  CommOpScope watch("reduce-scatter", watch_name_);
  count_collective(CommKind::kReduceScatter, n * size_, 4, size_);
  VT_CHECK_MSG(n <= kChunk, "reduce_scatter of " << n << " elements is too large for one call");
  check(MPI_Reduce_scatter_block(in, out, static_cast<int>(n), MPI_FLOAT, MPI_SUM, comm_),
        "reduce-scatter");
}

void MpiCommunicator::broadcast(float* data, int64_t n, int root) {
  CommOpScope watch("broadcast", watch_name_);
  count_collective(CommKind::kBroadcast, n, 4, size_);
  for (int64_t o = 0; o < n; o += kChunk)
    check(MPI_Bcast(data + o, static_cast<int>(std::min(kChunk, n - o)), MPI_FLOAT, root, comm_),
          "broadcast");
}

void MpiCommunicator::send(const float* data, int64_t n, int peer, int tag) {
  CommOpScope watch("send", watch_name_, peer);
  count_collective(CommKind::kSend, n, 4, size_);
  for (int64_t o = 0; o < n; o += kChunk)
    check(MPI_Send(data + o, static_cast<int>(std::min(kChunk, n - o)), MPI_FLOAT, peer, tag,
                   comm_),
          "send");
}

void MpiCommunicator::recv(float* data, int64_t n, int peer, int tag) {
  CommOpScope watch("recv", watch_name_, peer);
  for (int64_t o = 0; o < n; o += kChunk)
    check(MPI_Recv(data + o, static_cast<int>(std::min(kChunk, n - o)), MPI_FLOAT, peer, tag,
                   comm_, MPI_STATUS_IGNORE),
          "recv");
}

void MpiCommunicator::send_async(const float* data, int64_t n, int peer, int tag) {
  VT_CHECK_MSG(n <= kChunk, "send_async of " << n << " elements is too large for one call");
  count_collective(CommKind::kSend, n, 4, size_);
  pending_buf_.emplace_back(data, data + n);
  pending_.emplace_back();
  check(MPI_Isend(pending_buf_.back().data(), static_cast<int>(n), MPI_FLOAT, peer, tag, comm_,
                  &pending_.back()),
        "send");
}

void MpiCommunicator::all_reduce_sum_start(const Tensor& t) {
  if (size() == 1 || t.numel() == 0) return;
  if (!t.on_host() || t.dtype() != DType::kF32) {
    all_reduce_sum(t);
    return;
  }
  float* data = t.f32();
  const int64_t n = t.numel();
  count_collective(CommKind::kAllReduce, n, 4, size_);
  for (int64_t o = 0; o < n; o += kChunk) {
    reductions_.emplace_back();
    check(MPI_Iallreduce(MPI_IN_PLACE, data + o, static_cast<int>(std::min(kChunk, n - o)),
                         MPI_FLOAT, MPI_SUM, comm_, &reductions_.back()),
          "all_reduce_sum (start)");
  }
}

void MpiCommunicator::broadcast_start(const Tensor& t, int root) {
  if (size() == 1 || t.numel() == 0) return;
  const bool bf16 = t.dtype() == DType::kBF16;
  if (!t.on_host() || (!bf16 && t.dtype() != DType::kF32)) {
    broadcast(t, root);
    return;
  }
  const MPI_Datatype type = bf16 ? MPI_UINT16_T : MPI_FLOAT;
  char* data = static_cast<char*>(t.raw());
  const size_t elem = bf16 ? 2 : 4;
  const int64_t n = t.numel();
  count_collective(CommKind::kBroadcast, n, static_cast<int64_t>(elem), size_);
  for (int64_t o = 0; o < n; o += kChunk) {
    reductions_.emplace_back();
    check(MPI_Ibcast(data + o * elem, static_cast<int>(std::min(kChunk, n - o)), type, root,
                     comm_, &reductions_.back()),
          "broadcast (start)");
  }
}

void MpiCommunicator::all_reduce_sum_bf16(uint16_t* data, int64_t n) {
  if (size() == 1 || n == 0) return;
  const Bf16Wire& w = bf16_wire();
  count_collective(CommKind::kAllReduce, n, 2, size_);
  all_reduce(data, n, w.type, sizeof(uint16_t), w.op, "all-reduce(bf16)");
}

void MpiCommunicator::reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) {
  if (size_ == 1) {
    Communicator::reduce_scatter_sum_bf16(in, out, n);
    return;
  }
  CommOpScope watch("reduce-scatter(bf16)", watch_name_);
  VT_CHECK_MSG(n <= kChunk, "reduce_scatter of " << n << " elements is too large for one call");
  count_collective(CommKind::kReduceScatter, n * size_, 2, size_);
  const Bf16Wire& w = bf16_wire();
  check(MPI_Reduce_scatter_block(in, out, static_cast<int>(n), w.type, w.op, comm_),
        "reduce-scatter(bf16)");
}

void MpiCommunicator::reduce(void* data, int64_t n, MPI_Datatype type, size_t elem_bytes,
                             MPI_Op op, int root, const char* what) {
  CommOpScope watch(what, watch_name_);
  count_collective(CommKind::kReduce, n, static_cast<int64_t>(elem_bytes), size_);
  char* bytes = static_cast<char*>(data);
  for (int64_t o = 0; o < n; o += kChunk) {
    const int count = static_cast<int>(std::min(kChunk, n - o));
    char* p = bytes + o * elem_bytes;
    // The root reduces in place; the others' buffers are only read.
    check(MPI_Reduce(rank_ == root ? MPI_IN_PLACE : p, rank_ == root ? p : nullptr, count, type,
                     op, root, comm_),
          what);
  }
}

void MpiCommunicator::reduce_sum(const Tensor& t, int root) {
  VT_CHECK_MSG(t.dtype() == DType::kF32, "reduce_sum sums f32 tensors, got " << dtype_name(t.dtype()));
  if (size_ == 1 || t.numel() == 0) return;
  const int64_t n = t.numel();
  // Host memory (a device tensor through a host copy).
  Tensor h = t.on_host() ? t : t.to(Device::kCPU);
  reduce(h.f32(), n, MPI_FLOAT, sizeof(float), MPI_SUM, root, "reduce");
  if (rank_ == root && h.raw() != t.raw()) t.copy_from(h);
}

void MpiCommunicator::reduce_sum_bf16(const Tensor& t, int root) {
  VT_CHECK_MSG(t.dtype() == DType::kF32,
               "reduce_sum_bf16 sums f32 tensors, got " << dtype_name(t.dtype()));
  if (t.numel() == 0) return;
  // Rounded where t lives, reduced as bf16 bits through host memory, widened back into t
  // (every rank, as a group of one rounds: the non-roots' values are unspecified anyway).
  const int64_t n = t.numel();
  Tensor b = Tensor::empty({n}, DType::kBF16, t.device());
  ops::copy(b, t.flat(0, n));
  if (size_ > 1) {
    Tensor h = b.on_host() ? b : b.to(Device::kCPU);
    const Bf16Wire& w = bf16_wire();
    reduce(h.bf16(), n, w.type, sizeof(uint16_t), w.op, root, "reduce(bf16)");
    if (h.raw() != b.raw()) b.copy_from(h);
  }
  ops::copy(t.flat(0, n), b);
}

void MpiCommunicator::all_reduce_sum_bf16_start(const Tensor& t) {
  if (!t.on_host() || t.dtype() != DType::kF32 || size() == 1 || t.numel() == 0) {
    all_reduce_sum_bf16(t);  // rounds (a group of one) or refuses other dtypes
    return;
  }
  const int64_t n = t.numel();
  count_collective(CommKind::kAllReduce, n, 2, size_);
  Bf16Sum s{t, Tensor::empty({n}, DType::kBF16, Device::kCPU), Tensor()};
  const float* x = t.f32();
  uint16_t* data = s.wire.bf16();
  for (int64_t i = 0; i < n; ++i) data[i] = f32_to_bf16(x[i]);  // the blocking call's rounding
  const Bf16Wire& w = bf16_wire();
  for (int64_t o = 0; o < n; o += kChunk) {
    reductions_.emplace_back();
    check(MPI_Iallreduce(MPI_IN_PLACE, data + o, static_cast<int>(std::min(kChunk, n - o)),
                         w.type, w.op, comm_, &reductions_.back()),
          "all_reduce_sum_bf16 (start)");
  }
  bf16_sums_.push_back(std::move(s));
}

void MpiCommunicator::reduce_scatter_sum_start(const Tensor& in, const Tensor& out) {
  if (size_ == 1 || !in.on_host() || !out.on_host() || in.dtype() != DType::kF32 ||
      out.dtype() != DType::kF32 || out.numel() == 0) {
    reduce_scatter_sum(in, out);
    return;
  }
  const int64_t n = out.numel();
  VT_CHECK_MSG(in.numel() == n * size_, "reduce_scatter_sum_start: sizes " << in.numel() << " and "
                                                                           << n << " do not match");
  VT_CHECK_MSG(n <= kChunk, "reduce_scatter of " << n << " elements is too large for one call");
  count_collective(CommKind::kReduceScatter, n * size_, 4, size_);
  reductions_.emplace_back();
  check(MPI_Ireduce_scatter_block(in.f32(), out.f32(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                                  comm_, &reductions_.back()),
        "reduce-scatter (start)");
}

void MpiCommunicator::reduce_scatter_sum_bf16_start(const Tensor& in, const Tensor& out) {
  if (size_ == 1 || !in.on_host() || !out.on_host() || in.dtype() != DType::kF32 ||
      out.dtype() != DType::kF32 || out.numel() == 0) {
    reduce_scatter_sum_bf16(in, out);
    return;
  }
  const int64_t n = out.numel();
  VT_CHECK_MSG(in.numel() == n * size_, "reduce_scatter_sum_bf16_start: sizes "
                                            << in.numel() << " and " << n << " do not match");
  VT_CHECK_MSG(n <= kChunk, "reduce_scatter of " << n << " elements is too large for one call");
  count_collective(CommKind::kReduceScatter, n * size_, 2, size_);
  Bf16Sum s{out, Tensor::empty({n}, DType::kBF16, Device::kCPU),
            Tensor::empty({n * size_}, DType::kBF16, Device::kCPU)};
  const float* x = in.f32();
  uint16_t* packed = s.input.bf16();
  for (int64_t i = 0; i < n * size_; ++i) packed[i] = f32_to_bf16(x[i]);
  const Bf16Wire& w = bf16_wire();
  reductions_.emplace_back();
  check(MPI_Ireduce_scatter_block(packed, s.wire.bf16(), static_cast<int>(n), w.type, w.op, comm_,
                                  &reductions_.back()),
        "reduce-scatter(bf16) (start)");
  bf16_sums_.push_back(std::move(s));
}

void MpiCommunicator::reduce_sum_start(const Tensor& t, int root) {
  if (size_ == 1 || !t.on_host() || t.dtype() != DType::kF32 || t.numel() == 0) {
    reduce_sum(t, root);
    return;
  }
  const int64_t n = t.numel();
  count_collective(CommKind::kReduce, n, 4, size_);
  float* data = t.f32();
  for (int64_t o = 0; o < n; o += kChunk) {
    float* p = data + o;
    reductions_.emplace_back();
    check(MPI_Ireduce(rank_ == root ? MPI_IN_PLACE : p, rank_ == root ? p : nullptr,
                      static_cast<int>(std::min(kChunk, n - o)), MPI_FLOAT, MPI_SUM, root, comm_,
                      &reductions_.back()),
          "reduce (start)");
  }
}

void MpiCommunicator::reduce_sum_bf16_start(const Tensor& t, int root) {
  if (size_ == 1 || !t.on_host() || t.dtype() != DType::kF32 || t.numel() == 0) {
    reduce_sum_bf16(t, root);
    return;
  }
  const int64_t n = t.numel();
  count_collective(CommKind::kReduce, n, 2, size_);
  Bf16Sum s{t, Tensor::empty({n}, DType::kBF16, Device::kCPU), Tensor()};
  const float* x = t.f32();
  uint16_t* data = s.wire.bf16();
  for (int64_t i = 0; i < n; ++i) data[i] = f32_to_bf16(x[i]);
  const Bf16Wire& w = bf16_wire();
  for (int64_t o = 0; o < n; o += kChunk) {
    uint16_t* p = data + o;
    reductions_.emplace_back();
    check(MPI_Ireduce(rank_ == root ? MPI_IN_PLACE : p, rank_ == root ? p : nullptr,
                      static_cast<int>(std::min(kChunk, n - o)), w.type, w.op, root, comm_,
                      &reductions_.back()),
          "reduce(bf16) (start)");
  }
  bf16_sums_.push_back(std::move(s));
}

void MpiCommunicator::all_gather(const uint16_t* in, uint16_t* out, int64_t n) {
  CommOpScope watch("all-gather(bf16)", watch_name_);
  count_collective(CommKind::kAllGather, n * size_, 2, size_);
  VT_CHECK_MSG(n <= kChunk, "all_gather of " << n << " elements is too large for one call");
  check(MPI_Allgather(in, static_cast<int>(n), MPI_UINT16_T, out, static_cast<int>(n),
                      MPI_UINT16_T, comm_),
        "all-gather(bf16)");
}

void MpiCommunicator::all_gather_start(const Tensor& in, const Tensor& out) {
  const bool bf16 = in.dtype() == DType::kBF16;
  if (size() == 1 || !in.on_host() || !out.on_host() || (!bf16 && in.dtype() != DType::kF32) ||
      in.dtype() != out.dtype()) {
    all_gather(in, out);  // checks the pair
    return;
  }
  const int64_t n = in.numel();
  VT_CHECK_MSG(out.numel() == n * size_, "all_gather_start: sizes " << n << " and "
                                             << out.numel() << " do not match");
  VT_CHECK_MSG(n <= kChunk, "all_gather of " << n << " elements is too large for one call");
  if (n == 0) return;
  const MPI_Datatype type = bf16 ? MPI_UINT16_T : MPI_FLOAT;
  count_collective(CommKind::kAllGather, n * size_, bf16 ? 2 : 4, size_);
  reductions_.emplace_back();
  check(MPI_Iallgather(in.raw(), static_cast<int>(n), type, out.raw(), static_cast<int>(n), type,
                       comm_, &reductions_.back()),
        "all-gather (start)");
}

void MpiCommunicator::all_reduce_wait_until(int64_t mark) {
  const int64_t n = std::min<int64_t>(mark - completed_, static_cast<int64_t>(reductions_.size()));
  if (n <= 0) return;
  if (!bf16_sums_.empty()) {  // they are widened by the whole wait
    all_reduce_wait();
    return;
  }
  CommOpScope watch("all-gather (wait)", watch_name_);
  check(MPI_Waitall(static_cast<int>(n), reductions_.data(), MPI_STATUSES_IGNORE),
        "all-gather (wait)");
  reductions_.erase(reductions_.begin(), reductions_.begin() + n);
  completed_ += n;
}

void MpiCommunicator::all_reduce_wait() {
  if (reductions_.empty()) return;
  CommOpScope watch("all_reduce_sum (wait)", watch_name_);
  check(MPI_Waitall(static_cast<int>(reductions_.size()), reductions_.data(), MPI_STATUSES_IGNORE),
        "all_reduce_sum (wait)");
  completed_ += static_cast<int64_t>(reductions_.size());
  reductions_.clear();
  for (const Bf16Sum& s : bf16_sums_) {
    float* x = s.target.f32();
    const uint16_t* w = s.wire.bf16();
    for (int64_t i = 0; i < s.target.numel(); ++i) x[i] = bf16_to_f32(w[i]);
  }
  bf16_sums_.clear();
}

void MpiCommunicator::wait_sends() {
  if (pending_.empty()) return;
  CommOpScope watch("send (wait)", watch_name_);
  check(MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE),
        "send (wait)");
  pending_.clear();
  pending_buf_.clear();
}

void MpiCommunicator::barrier() {
  CommOpScope watch("barrier", watch_name_);
  check(MPI_Barrier(comm_), "barrier");
}

MpiCommunicator* MpiCommunicator::split(int color, int key, const std::string& name) const {
  CommOpScope watch("comm split", watch_name_);
  MPI_Comm out;
  check(MPI_Comm_split(comm_, color, key, &out), "comm split");
  return new MpiCommunicator(out, name);
}

MpiSession::MpiSession(int* argc, char*** argv) {
  int init = 0;
  MPI_Initialized(&init);
  // Every thread may call MPI (the asynchronous checkpoint writer, train/async_saver.h).
  int provided = 0;
  if (!init) MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

bool MpiSession::thread_multiple() {
  int init = 0, level = MPI_THREAD_SINGLE;
  MPI_Initialized(&init);
  if (init) MPI_Query_thread(&level);
  return level >= MPI_THREAD_MULTIPLE;
}

MpiSession::~MpiSession() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  // MPI_Finalize waits for every rank: watched, so one that never gets here cannot hang the rest.
  CommOpScope watch("finalize", intern_group_name("world"));
  MPI_Finalize();
}

}  // namespace vt
