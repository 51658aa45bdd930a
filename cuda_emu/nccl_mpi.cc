// The NCCL API of the emulation, carried over MPI between the ranks of a job: communicators are
// MPI communicators made at ncclCommInitRank, collectives and point-to-point calls are queued on
// the caller's CUDA stream like NCCL's kernels and run there as MPI calls, so they complete in
// stream order and block that stream (not the host) until the peers take part.
//
// What NCCL does and the emulation keeps: buffers must be device memory of the communicator's
// device (checked over the whole count), the stream must belong to that device, two ranks of
// one communicator on the same device of the same host are refused at init ("duplicate GPU"),
// sends are rendezvous (MPI_Ssend: a send completes only with its receive, so two ranks that
// both send first deadlock as with NCCL), calls between ncclGroupStart/End progress together,
// bf16 and fp16 sums are rounded at every step of the reduction. Differences: the reduction
// order is MPI's, not NCCL's ring/tree; a group may use one stream only; counts must fit an int.
//
// Bootstrap: the rank that called ncclGetUniqueId (its world rank is in the id) must take part
// in the ncclCommInitRank calls of that id (true when the id is broadcast over the group, as
// vtrain and most programs do). Members meet there over a private duplicate of MPI_COMM_WORLD.
//
// MPI must run with MPI_THREAD_MULTIPLE (the stream workers call MPI while the host thread may
// too): this file interposes MPI_Init / MPI_Init_thread / MPI_Finalize through the MPI profiling
// interface to ask for it, and drains the emulated streams before MPI_Finalize.
#include <mpi.h>
#include <nccl.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime.h"

struct ncclComm {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1, device = 0;
  std::string last_error;
  std::mutex mu;  // issued
  std::vector<std::pair<vt_emu::Stream*, uint64_t>> issued;  // last operation per stream
};

namespace vt_emu {
namespace {

MPI_Comm g_boot = MPI_COMM_NULL;  // duplicate of MPI_COMM_WORLD for bootstraps
int g_thread_level = MPI_THREAD_SINGLE;
std::atomic<uint32_t> g_id_counter{0};
thread_local std::string tl_last_error;

constexpr char kIdMagic[] = "vtrain-emulated-nccl";

struct IdPayload {
  char magic[sizeof(kIdMagic)];
  int32_t root_world = 0;
  uint32_t counter = 0;
};
static_assert(sizeof(IdPayload) <= NCCL_UNIQUE_ID_BYTES);

struct Member {
  int32_t nccl_rank = 0, world_rank = 0, device = 0;
  uint64_t host = 0;
};

ncclResult_t err(ncclComm* c, ncclResult_t r, const std::string& why) {
  std::fprintf(stderr, "vt_emu NCCL WARN %s\n", why.c_str());
  std::fflush(stderr);
  tl_last_error = why;
  if (c) {
    std::lock_guard<std::mutex> lock(c->mu);
    c->last_error = why;
  }
  return r;
}

uint64_t host_hash() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  uint64_t h = 1469598103934665603ull;
  for (const char* p = name; *p; ++p) h = (h ^ uint64_t(uint8_t(*p))) * 1099511628211ull;
  return h;
}

ncclResult_t ready(const char* api) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin)
    return err(nullptr, ncclSystemError,
               std::string(api) + ": the emulated NCCL runs over MPI: call MPI_Init first");
  if (g_boot == MPI_COMM_NULL || g_thread_level < MPI_THREAD_MULTIPLE)
    return err(nullptr, ncclSystemError,
               std::string(api) + ": MPI was initialized without MPI_THREAD_MULTIPLE (the "
                                  "emulation's MPI_Init was not linked in)");
  return ncclSuccess;
}

// --- data types and reductions -------------------------------------------------------------
size_t nccl_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

template <class H, float (*ToF)(H), H (*FromF)(float), int kOp>
void half_op(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = ToF(a[i]), y = ToF(b[i]);
    float r = 0.0f;
    switch (kOp) {
      case 0: r = x + y; break;
      case 1: r = x * y; break;
      case 2: r = x > y ? x : y; break;
      default: r = x < y ? x : y; break;
    }
    b[i] = FromF(r);  // rounded at every step, as NCCL's half-precision reductions are
  }
}
float bf_to(__nv_bfloat16 x) { return __bfloat162float(x); }
__nv_bfloat16 bf_from(float x) { return __float2bfloat16_rn(x); }
float h_to(__half x) { return __half2float(x); }
__half h_from(float x) { return __float2half_rn(x); }

MPI_Op half_mpi_op(ncclDataType_t t, int op) {
  static std::mutex mu;
  static MPI_Op ops[2][4] = {{MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL},
                             {MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL, MPI_OP_NULL}};
  static MPI_User_function* fns[2][4] = {
      {half_op<__nv_bfloat16, bf_to, bf_from, 0>, half_op<__nv_bfloat16, bf_to, bf_from, 1>,
       half_op<__nv_bfloat16, bf_to, bf_from, 2>, half_op<__nv_bfloat16, bf_to, bf_from, 3>},
      {half_op<__half, h_to, h_from, 0>, half_op<__half, h_to, h_from, 1>,
       half_op<__half, h_to, h_from, 2>, half_op<__half, h_to, h_from, 3>}};
  const int ti = t == ncclBfloat16 ? 0 : 1;
  std::lock_guard<std::mutex> lock(mu);
  if (ops[ti][op] == MPI_OP_NULL) MPI_Op_create(fns[ti][op], 1, &ops[ti][op]);
  return ops[ti][op];
}

struct MpiType {
  MPI_Datatype type = MPI_DATATYPE_NULL;
  bool half = false;
};
MpiType mpi_type(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return {MPI_INT8_T};
    case ncclUint8: return {MPI_UINT8_T};
    case ncclInt32: return {MPI_INT32_T};
    case ncclUint32: return {MPI_UINT32_T};
    case ncclInt64: return {MPI_INT64_T};
    case ncclUint64: return {MPI_UINT64_T};
    case ncclFloat32: return {MPI_FLOAT};
    case ncclFloat64: return {MPI_DOUBLE};
    case ncclFloat16: case ncclBfloat16: return {MPI_UINT16_T, true};
    default: return {};
  }
}

// ncclSum/Prod/Max/Min/Avg -> the MPI op (Avg: a sum, divided afterwards).
bool mpi_op(ncclRedOp_t op, ncclDataType_t t, MPI_Op* out) {
  int k;
  switch (op) {
    case ncclSum: case ncclAvg: k = 0; break;
    case ncclProd: k = 1; break;
    case ncclMax: k = 2; break;
    case ncclMin: k = 3; break;
    default: return false;
  }
  if (mpi_type(t).half) {
    *out = half_mpi_op(t, k);
    return true;
  }
  static const MPI_Op std_ops[4] = {MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN};
  *out = std_ops[k];
  return true;
}

void divide_by(void* buf, size_t count, ncclDataType_t t, int n) {
  for (size_t i = 0; i < count; ++i) {
    switch (t) {
      case ncclFloat32: static_cast<float*>(buf)[i] /= float(n); break;
      case ncclFloat64: static_cast<double*>(buf)[i] /= double(n); break;
      case ncclBfloat16: {
        auto* p = static_cast<__nv_bfloat16*>(buf) + i;
        *p = __float2bfloat16_rn(__bfloat162float(*p) / float(n));
        break;
      }
      case ncclFloat16: {
        auto* p = static_cast<__half*>(buf) + i;
        *p = __float2half_rn(__half2float(*p) / float(n));
        break;
      }
      case ncclInt32: static_cast<int32_t*>(buf)[i] /= n; break;
      case ncclInt64: static_cast<int64_t*>(buf)[i] /= n; break;
      default: break;
    }
  }
}

// --- operations --------------------------------------------------------------------------------
enum class Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kSend, kRecv };

struct Work {
  Kind kind;
  ncclComm* comm;
  const void* send;
  void* recv;
  size_t count;  // per-rank count as NCCL defines it for the call
  ncclDataType_t type;
  ncclRedOp_t op;
  int peer_or_root;
  Stream* stream;
};

thread_local int tl_group_depth = 0;
thread_local std::vector<Work> tl_group;

ncclResult_t check_buffer(ncclComm* c, const void* p, size_t bytes, const char* api,
                          const char* what) {
  if (bytes == 0) return ncclSuccess;
  if (!p) return err(c, ncclInvalidArgument, std::string(api) + ": " + what + " is null");
  const Region r = classify(p, bytes);
  if (!r.known || r.kind != MemKind::kDevice || r.device != c->device)
    return err(c, ncclInvalidArgument,
               std::string(api) + ": " + what + " (" + std::to_string(bytes) + " bytes) is " +
                   describe(classify(p, 0)) + ", not device memory of the communicator's device " +
                   std::to_string(c->device) + " (rank " + std::to_string(c->rank) + ")");
  return ncclSuccess;
}

// Runs one operation as a blocking MPI call (outside a group) or starts it non-blocking and
// returns its requests (inside a group). Temporaries live in `keep` until completion.
void run_work(const Work& w, std::vector<MPI_Request>* reqs,
              std::vector<std::shared_ptr<std::vector<char>>>* keep) {
  const MpiType mt = mpi_type(w.type);
  const size_t es = nccl_size(w.type);
  const int n = int(w.count);
  MPI_Comm comm = w.comm->comm;
  MPI_Op op = MPI_OP_NULL;
  if (w.kind == Kind::kAllReduce || w.kind == Kind::kReduce || w.kind == Kind::kReduceScatter)
    mpi_op(w.op, w.type, &op);
  const bool nb = reqs != nullptr;
  MPI_Request rq = MPI_REQUEST_NULL;
  switch (w.kind) {
    case Kind::kAllReduce: {
      const void* s = w.send == w.recv ? MPI_IN_PLACE : w.send;
      if (nb) MPI_Iallreduce(s, w.recv, n, mt.type, op, comm, &rq);
      else MPI_Allreduce(s, w.recv, n, mt.type, op, comm);
      break;
    }
    case Kind::kReduce: {
      const bool root = w.comm->rank == w.peer_or_root;
      const void* s = root && w.send == w.recv ? MPI_IN_PLACE : w.send;
      if (nb) MPI_Ireduce(s, w.recv, n, mt.type, op, w.peer_or_root, comm, &rq);
      else MPI_Reduce(s, w.recv, n, mt.type, op, w.peer_or_root, comm);
      break;
    }
    case Kind::kBroadcast:
      if (w.comm->rank == w.peer_or_root && w.send != w.recv)
        std::memcpy(w.recv, w.send, w.count * es);
      if (nb) MPI_Ibcast(w.recv, n, mt.type, w.peer_or_root, comm, &rq);
      else MPI_Bcast(w.recv, n, mt.type, w.peer_or_root, comm);
      break;
    case Kind::kAllGather: {
      // NCCL's in-place all-gather: send == recv + rank * count.
      const bool in_place =
          w.send == static_cast<const char*>(w.recv) + size_t(w.comm->rank) * w.count * es;
      const void* s = in_place ? MPI_IN_PLACE : w.send;
      if (nb) MPI_Iallgather(s, n, mt.type, w.recv, n, mt.type, comm, &rq);
      else MPI_Allgather(s, n, mt.type, w.recv, n, mt.type, comm);
      break;
    }
    case Kind::kReduceScatter: {
      // Copy the input when it overlaps the output (NCCL's in-place form).
      const char* s = static_cast<const char*>(w.send);
      const char* r = static_cast<const char*>(w.recv);
      const size_t in_bytes = w.count * es * size_t(w.comm->size);
      if (r < s + in_bytes && s < r + w.count * es) {
        auto copy = std::make_shared<std::vector<char>>(s, s + in_bytes);
        keep->push_back(copy);
        s = copy->data();
      }
      if (nb) MPI_Ireduce_scatter_block(s, w.recv, n, mt.type, op, comm, &rq);
      else MPI_Reduce_scatter_block(s, w.recv, n, mt.type, op, comm);
      break;
    }
    case Kind::kSend:
      if (nb) MPI_Issend(w.send, n, mt.type, w.peer_or_root, 0, comm, &rq);
      else MPI_Ssend(w.send, n, mt.type, w.peer_or_root, 0, comm);
      break;
    case Kind::kRecv:
      if (nb) MPI_Irecv(w.recv, n, mt.type, w.peer_or_root, 0, comm, &rq);
      else MPI_Recv(w.recv, n, mt.type, w.peer_or_root, 0, comm, MPI_STATUS_IGNORE);
      break;
  }
  if (nb) reqs->push_back(rq);
}

void finish_avg(const Work& w) {
  if (w.op != ncclAvg) return;
  if (w.kind == Kind::kAllReduce || w.kind == Kind::kReduceScatter ||
      (w.kind == Kind::kReduce && w.comm->rank == w.peer_or_root))
    divide_by(w.recv, w.count, w.type, w.comm->size);
}

void note_issued(ncclComm* c, Stream* s, uint64_t seq) {
  std::lock_guard<std::mutex> lock(c->mu);
  for (auto& [st, q] : c->issued)
    if (st == s) {
      q = seq;
      return;
    }
  c->issued.emplace_back(s, seq);
}

// Validates a call, then queues it (or adds it to the open group).
ncclResult_t submit(Work w, const char* api, cudaStream_t stream) {
  ncclComm* c = w.comm;
  if (!c) return err(nullptr, ncclInvalidArgument, std::string(api) + ": null communicator");
  const size_t es = nccl_size(w.type);
  if (!es || mpi_type(w.type).type == MPI_DATATYPE_NULL)
    return err(c, ncclInvalidArgument, std::string(api) + ": data type not emulated");
  if (w.count > size_t(INT_MAX))
    return err(c, ncclInvalidArgument, std::string(api) + ": counts above INT_MAX are not emulated");
  MPI_Op op;
  if ((w.kind == Kind::kAllReduce || w.kind == Kind::kReduce || w.kind == Kind::kReduceScatter) &&
      !mpi_op(w.op, w.type, &op))
    return err(c, ncclInvalidArgument, std::string(api) + ": reduction op not emulated");
  if ((w.kind == Kind::kSend || w.kind == Kind::kRecv || w.kind == Kind::kBroadcast ||
       w.kind == Kind::kReduce) &&
      (w.peer_or_root < 0 || w.peer_or_root >= c->size))
    return err(c, ncclInvalidArgument, std::string(api) + ": peer/root " +
                                           std::to_string(w.peer_or_root) + " out of range");
  const size_t one = w.count * es, all = one * size_t(c->size);
  ncclResult_t r = ncclSuccess;
  switch (w.kind) {
    case Kind::kAllReduce:
      r = check_buffer(c, w.send, one, api, "sendbuff");
      if (!r) r = check_buffer(c, w.recv, one, api, "recvbuff");
      break;
    case Kind::kBroadcast: case Kind::kReduce:
      if (c->rank == w.peer_or_root) r = check_buffer(c, w.send, one, api, "sendbuff");
      if (!r && (w.kind == Kind::kBroadcast || c->rank == w.peer_or_root))
        r = check_buffer(c, w.recv, one, api, "recvbuff");
      if (!r && w.kind == Kind::kReduce) r = check_buffer(c, w.send, one, api, "sendbuff");
      break;
    case Kind::kAllGather:
      r = check_buffer(c, w.send, one, api, "sendbuff");
      if (!r) r = check_buffer(c, w.recv, all, api, "recvbuff");
      break;
    case Kind::kReduceScatter:
      r = check_buffer(c, w.send, all, api, "sendbuff");
      if (!r) r = check_buffer(c, w.recv, one, api, "recvbuff");
      break;
    case Kind::kSend: r = check_buffer(c, w.send, one, api, "sendbuff"); break;
    case Kind::kRecv: r = check_buffer(c, w.recv, one, api, "recvbuff"); break;
  }
  if (r) return r;
  Stream* s = resolve(stream);
  if (!s) return err(c, ncclInvalidArgument, std::string(api) + ": not a live CUDA stream");
  if (stream_device(s) != c->device)
    return err(c, ncclInvalidUsage, std::string(api) + ": stream of device " +
                                         std::to_string(stream_device(s)) +
                                         ", communicator of device " + std::to_string(c->device));
  if (is_capturing(s)) {
    refuse_if_capturing(s, api);  // invalidates the capture
    return err(c, ncclInvalidUsage,
               std::string(api) + ": NCCL calls on a capturing stream are not emulated (the "
                                  "emulation keeps collectives outside CUDA graphs)");
  }
  w.stream = s;
  if (w.count == 0 && w.kind != Kind::kSend && w.kind != Kind::kRecv) return ncclSuccess;
  if (tl_group_depth > 0) {
    tl_group.push_back(w);
    return ncclSuccess;
  }
  const uint64_t seq = enqueue(s, [w] {
    run_work(w, nullptr, nullptr);
    finish_avg(w);
  });
  note_issued(c, s, seq);
  return ncclSuccess;
}

}  // namespace
}  // namespace vt_emu

using namespace vt_emu;

// --- MPI profiling-interface wrappers ------------------------------------------------------------
extern "C" {

static void after_init(int provided) {
  g_thread_level = provided;
  PMPI_Comm_dup(MPI_COMM_WORLD, &g_boot);
}

int MPI_Init(int* argc, char*** argv) {
  int provided = MPI_THREAD_SINGLE;
  const int rc = PMPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  if (rc == MPI_SUCCESS) after_init(provided);
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required > MPI_THREAD_MULTIPLE ? required
                                                                              : MPI_THREAD_MULTIPLE,
                                  provided);
  if (rc == MPI_SUCCESS) after_init(*provided);
  return rc;
}

int MPI_Finalize(void) {
  synchronize_all();  // no stream worker may be inside MPI after this
  return PMPI_Finalize();
}

// --- NCCL API ------------------------------------------------------------------------------------
ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return err(nullptr, ncclInvalidArgument, "ncclGetUniqueId: null");
  if (ncclResult_t r = ready("ncclGetUniqueId")) return r;
  std::memset(id, 0, sizeof(*id));
  IdPayload p;
  std::memcpy(p.magic, kIdMagic, sizeof(kIdMagic));
  MPI_Comm_rank(MPI_COMM_WORLD, &p.root_world);
  p.counter = g_id_counter++;
  std::memcpy(id->internal, &p, sizeof(p));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  if (!out) return err(nullptr, ncclInvalidArgument, "ncclCommInitRank: null comm pointer");
  *out = nullptr;
  if (ncclResult_t r = ready("ncclCommInitRank")) return r;
  IdPayload p;
  std::memcpy(&p, id.internal, sizeof(p));
  if (std::memcmp(p.magic, kIdMagic, sizeof(kIdMagic)) != 0)
    return err(nullptr, ncclInvalidArgument, "ncclCommInitRank: not an id from ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return err(nullptr, ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) +
                                                 " of " + std::to_string(nranks));
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess)
    return err(nullptr, ncclUnhandledCudaError, "ncclCommInitRank: no current CUDA device");
  int world = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world);
  const int tag = 1000 + int(p.counter % 30000u);
  Member me{rank, world, device, host_hash()};
  std::vector<Member> members(static_cast<size_t>(nranks));
  int32_t status = 0;  // 0 ok, 1 duplicate rank, 2 duplicate device
  if (world == p.root_world) {
    std::vector<bool> seen(static_cast<size_t>(nranks), false);
    members[size_t(rank)] = me;
    seen[size_t(rank)] = true;
    std::vector<int> sources;
    for (int i = 1; i < nranks; ++i) {
      Member m;
      MPI_Status st;
      MPI_Recv(&m, int(sizeof(m)), MPI_BYTE, MPI_ANY_SOURCE, tag, g_boot, &st);
      sources.push_back(st.MPI_SOURCE);
      if (m.nccl_rank < 0 || m.nccl_rank >= nranks || seen[size_t(m.nccl_rank)]) {
        status = 1;
        continue;
      }
      seen[size_t(m.nccl_rank)] = true;
      members[size_t(m.nccl_rank)] = m;
    }
    for (int i = 0; i < nranks && !status; ++i)
      for (int j = i + 1; j < nranks; ++j)
        if (members[size_t(i)].host == members[size_t(j)].host &&
            members[size_t(i)].device == members[size_t(j)].device)
          status = 2;
    for (int src : sources) {
      MPI_Send(&status, 1, MPI_INT32_T, src, tag, g_boot);
      MPI_Send(members.data(), int(sizeof(Member) * members.size()), MPI_BYTE, src, tag, g_boot);
    }
  } else {
    MPI_Send(&me, int(sizeof(me)), MPI_BYTE, p.root_world, tag, g_boot);
    MPI_Recv(&status, 1, MPI_INT32_T, p.root_world, tag, g_boot, MPI_STATUS_IGNORE);
    MPI_Recv(members.data(), int(sizeof(Member) * members.size()), MPI_BYTE, p.root_world, tag,
             g_boot, MPI_STATUS_IGNORE);
  }
  if (status == 1) return err(nullptr, ncclInvalidUsage, "ncclCommInitRank: duplicate or bad ranks");
  if (status == 2)
    return err(nullptr, ncclInvalidUsage,
               "ncclCommInitRank: duplicate GPU detected: two ranks of the communicator use the "
               "same device on the same host");
  std::vector<int> ranks(static_cast<size_t>(nranks));
  for (int i = 0; i < nranks; ++i) ranks[size_t(i)] = members[size_t(i)].world_rank;
  MPI_Group world_group, group;
  MPI_Comm_group(g_boot, &world_group);
  MPI_Group_incl(world_group, nranks, ranks.data(), &group);
  auto* c = new ncclComm;
  MPI_Comm_create_group(g_boot, group, tag, &c->comm);
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  c->rank = rank;
  c->size = nranks;
  c->device = device;
  *out = c;
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                    ncclConfig_t*) {
  return ncclCommInitRank(comm, nranks, id, rank);
}

// Waits for everything this communicator queued.
ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  std::vector<std::pair<Stream*, uint64_t>> issued;
  {
    std::lock_guard<std::mutex> lock(c->mu);
    issued = c->issued;
  }
  for (auto& [s, seq] : issued) wait_for(s, seq);
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  ncclCommFinalize(c);
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && c->comm != MPI_COMM_NULL) MPI_Comm_free(&c->comm);
  delete c;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (!c) return ncclInvalidArgument;
  return ncclSuccess;  // in-flight MPI calls cannot be cancelled: the communicator is leaked
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t c) {
  if (c) {
    std::lock_guard<std::mutex> lock(c->mu);
    static thread_local std::string copy;
    copy = c->last_error;
    return copy.c_str();
  }
  return tl_last_error.c_str();
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* e) {
  if (!c || !e) return ncclInvalidArgument;
  *e = ncclSuccess;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t c, int* count) {
  if (!c || !count) return ncclInvalidArgument;
  *count = c->size;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(const ncclComm_t c, int* device) {
  if (!c || !device) return ncclInvalidArgument;
  *device = c->device;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t c, int* rank) {
  if (!c || !rank) return ncclInvalidArgument;
  *rank = c->rank;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(Work{Kind::kAllReduce, comm, send, recv, count, type, op, 0, nullptr},
                "ncclAllReduce", stream);
}

ncclResult_t ncclReduce(const void* send, void* recv, size_t count, ncclDataType_t type,
                        ncclRedOp_t op, int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(Work{Kind::kReduce, comm, send, recv, count, type, op, root, nullptr},
                "ncclReduce", stream);
}

ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t type,
                           int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(Work{Kind::kBroadcast, comm, send, recv, count, type, ncclSum, root, nullptr},
                "ncclBroadcast", stream);
}

ncclResult_t ncclBcast(void* buf, size_t count, ncclDataType_t type, int root, ncclComm_t comm,
                       cudaStream_t stream) {
  return ncclBroadcast(buf, buf, count, type, root, comm, stream);
}

ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t type,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit(Work{Kind::kAllGather, comm, send, recv, count, type, ncclSum, 0, nullptr},
                "ncclAllGather", stream);
}

ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t type,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(Work{Kind::kReduceScatter, comm, send, recv, count, type, op, 0, nullptr},
                "ncclReduceScatter", stream);
}

ncclResult_t ncclSend(const void* send, size_t count, ncclDataType_t type, int peer,
                      ncclComm_t comm, cudaStream_t stream) {
  return submit(Work{Kind::kSend, comm, send, nullptr, count, type, ncclSum, peer, nullptr},
                "ncclSend", stream);
}

ncclResult_t ncclRecv(void* recv, size_t count, ncclDataType_t type, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return submit(Work{Kind::kRecv, comm, nullptr, recv, count, type, ncclSum, peer, nullptr},
                "ncclRecv", stream);
}

ncclResult_t ncclGroupStart() {
  ++tl_group_depth;
  return ncclSuccess;
}

// The group's calls start together (non-blocking MPI) in one stream operation and complete
// together.
ncclResult_t ncclGroupEnd() {
  if (tl_group_depth == 0) return err(nullptr, ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--tl_group_depth > 0) return ncclSuccess;
  std::vector<Work> works;
  works.swap(tl_group);
  if (works.empty()) return ncclSuccess;
  Stream* s = works.front().stream;
  for (const Work& w : works)
    if (w.stream != s)
      return err(w.comm, ncclInvalidUsage,
                 "ncclGroupEnd: the emulation runs a group on one stream; this group uses several");
  const uint64_t seq = enqueue(s, [works] {
    std::vector<MPI_Request> reqs;
    std::vector<std::shared_ptr<std::vector<char>>> keep;
    for (const Work& w : works) run_work(w, &reqs, &keep);
    MPI_Waitall(int(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE);
    for (const Work& w : works) finish_avg(w);
  });
  for (const Work& w : works) note_issued(w.comm, s, seq);
  return ncclSuccess;
}

}  // extern "C"
