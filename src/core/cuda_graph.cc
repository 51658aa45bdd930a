// CudaStepGraph (see cuda_graph.h): capture on the runtime's stream, instantiate, launch,
// replay under an equal key, re-capture or refuse under another.
#if VTRAIN_HAS_CUDA
#include "core/cuda_graph.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/cuda_runtime.h"
#include "kernels/cuda_check.cuh"

namespace vt {

namespace {

std::string describe(const GraphKey& k) {
  std::vector<std::string> ptrs;
  for (const void* p : k.buffers) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%p", p);
    ptrs.emplace_back(buf);
  }
  return absl::StrCat("shapes {", k.shapes, "}, buffers {", absl::StrJoin(ptrs, " "), "}");
}

std::string cuda_reason(cudaError_t e) {
  return absl::StrCat(cudaGetErrorName(e), ": ", cudaGetErrorString(e));
}

}  // namespace

CudaStepGraph::CudaStepGraph(std::string name, CudaRuntime& rt, int max_captures)
    : name_(std::move(name)), rt_(rt), max_captures_(max_captures) {}

CudaStepGraph::~CudaStepGraph() {
  if (exec_ || graph_) {
    rt_.on_device();
    (void)cudaStreamSynchronize(rt_.stream());  // launches still queued finish first
    drop();
  }
}

void CudaStepGraph::drop() {
  if (exec_) (void)cudaGraphExecDestroy(exec_);
  if (graph_) (void)cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

absl::Status CudaStepGraph::run(const GraphKey& key, const std::function<void()>& body) {
  rt_.on_device();
  cudaStream_t stream = rt_.stream();
  if (exec_ && key == key_) {
    VT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
    ++replays_;
    return absl::OkStatus();
  }
  if (exec_ && max_captures_ >= 0 && captures_ >= max_captures_)
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA graph '", name_, "' was captured for ", describe(key_), "; this call has ",
        describe(key), ", and the graph may be captured at most ", max_captures_,
        " time(s): it is not replayed with other shapes or buffers"));
  if (exec_) {
    VT_CUDA_CHECK(cudaStreamSynchronize(stream));  // its launches are done before it goes
    drop();
  }
  (void)cudaGetLastError();
  // Thread-local mode: this thread's unsafe calls (cudaMalloc, synchronous copies, ...) fail the
  // capture; other threads of the process (a loader allocating pinned memory, a checkpoint
  // writer) may go on with theirs.
  VT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  vt::cuda::capture_label() = name_.c_str();
  body();
  vt::cuda::capture_label() = nullptr;
  cudaGraph_t g = nullptr;
  const cudaError_t end = cudaStreamEndCapture(stream, &g);
  if (end != cudaSuccess || g == nullptr) {
    const std::string why = cuda_reason(end);
    (void)cudaGetLastError();
    return absl::FailedPreconditionError(absl::StrCat(
        "CUDA graph '", name_, "' cannot be captured for ", describe(key), ": ", why,
        " (the captured step made a call a graph cannot hold: a host read, a synchronization, "
        "an allocation outside the stream; nothing of it ran)"));
  }
  graph_ = g;
  VT_CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  ++captures_;
  key_ = key;
  VT_CUDA_CHECK(cudaGraphLaunch(exec_, stream));
  return absl::OkStatus();
}

}  // namespace vt
#endif  // VTRAIN_HAS_CUDA
