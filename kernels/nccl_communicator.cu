// NcclCommunicator (see nccl_communicator.cuh). No device code of its own; it lives under
// kernels/ so that it builds only into vtrain_cuda (src/*.cc all go into vtrain_lib, which must
// build without CUDA). Failures abort the whole job (MPI_Abort) with a message naming the rank
// and the operation, so a failed collective never leaves the other ranks hanging.
#include "kernels/nccl_communicator.cuh"

#include <cstdio>
#include <cstdlib>
#include <string>

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

}  // namespace

int NcclCommunicator::local_rank(MPI_Comm comm) {
  if (const char* env = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK")) {
    int world = 0;
    MPI_Comm_compare(comm, MPI_COMM_WORLD, &world);
    // The environment describes MPI_COMM_WORLD; for a sub-communicator split the node instead.
    if (world == MPI_IDENT) return std::atoi(env);
  }
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node;
  check_mpi(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node), rank,
            "MPI_Comm_split_type");
  int local = 0;
  MPI_Comm_rank(node, &local);
  MPI_Comm_free(&node);
  return local;
}

NcclCommunicator::NcclCommunicator(MPI_Comm comm) {
  check_mpi(MPI_Comm_rank(comm, &rank_), 0, "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &size_), rank_, "MPI_Comm_size");
  // local_rank may be collective (split_type): every rank calls it.
  const int local = local_rank(comm);
  int ndev = 0;
  check_cuda(cudaGetDeviceCount(&ndev), rank_, "cudaGetDeviceCount");
  if (ndev < 1) die(rank_, "device selection", "no CUDA device");
  device_ = local % ndev;
  check_cuda(cudaSetDevice(device_), rank_, "cudaSetDevice");

  ncclUniqueId id{};
  if (rank_ == 0) check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  check_mpi(MPI_Bcast(&id, int(sizeof(id)), MPI_BYTE, 0, comm), rank_, "MPI_Bcast(ncclUniqueId)");
  check(ncclCommInitRank(&comm_, size_, id, rank_), "ncclCommInitRank");
  check_cuda(cudaMalloc(reinterpret_cast<void**>(&scratch_), sizeof(float)), rank_,
             "cudaMalloc(barrier scratch)");
}

NcclCommunicator::~NcclCommunicator() {
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

void NcclCommunicator::sync(const char* op) const {
  check_cuda(cudaStreamSynchronize(stream_), rank_, op);
}

void NcclCommunicator::all_reduce_sum(float* data, int64_t n) {
  check(ncclAllReduce(data, data, size_t(n), ncclFloat32, ncclSum, comm_, stream_),
        "all_reduce_sum(f32)");
  sync("all_reduce_sum(f32)");
}

void NcclCommunicator::all_reduce_sum(double* data, int64_t n) {
  check(ncclAllReduce(data, data, size_t(n), ncclFloat64, ncclSum, comm_, stream_),
        "all_reduce_sum(f64)");
  sync("all_reduce_sum(f64)");
}

void NcclCommunicator::all_reduce_max(float* data, int64_t n) {
  check(ncclAllReduce(data, data, size_t(n), ncclFloat32, ncclMax, comm_, stream_),
        "all_reduce_max");
  sync("all_reduce_max");
}

void NcclCommunicator::all_gather(const float* in, float* out, int64_t n) {
  check(ncclAllGather(in, out, size_t(n), ncclFloat32, comm_, stream_), "all_gather");
  sync("all_gather");
}

void NcclCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  check(ncclReduceScatter(in, out, size_t(n), ncclFloat32, ncclSum, comm_, stream_),
        "reduce_scatter_sum");
  sync("reduce_scatter_sum");
}

void NcclCommunicator::broadcast(float* data, int64_t n, int root) {
  check(ncclBroadcast(data, data, size_t(n), ncclFloat32, root, comm_, stream_), "broadcast");
  sync("broadcast");
}

void NcclCommunicator::send(const float* data, int64_t n, int peer, int /*tag*/) {
  check(ncclSend(data, size_t(n), ncclFloat32, peer, comm_, stream_), "send");
  sync("send");
}

void NcclCommunicator::recv(float* data, int64_t n, int peer, int /*tag*/) {
  check(ncclRecv(data, size_t(n), ncclFloat32, peer, comm_, stream_), "recv");
  sync("recv");
}

void NcclCommunicator::barrier() {
  check(ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_), "barrier");
  sync("barrier");
}

}  // namespace vt
