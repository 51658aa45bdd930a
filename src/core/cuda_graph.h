// CudaStepGraph: a piece of the CUDA backend's stream work (a micro-step, an optimizer step)
// captured once into a CUDA graph and replayed, so that the host launches it with one call
// instead of one call per op (docs/design.md, "CUDA graphs").
//
// Keyed replay. A graph holds its kernels' arguments as they were at capture: shapes, scalars
// and device addresses. run() therefore takes a GraphKey: the caller's shape signature (every
// size and setting the body's calls depend on) and the device buffers the body reads or writes
// that outlive one call (inputs, parameters, gradients, outputs). A call whose key equals the
// held graph's replays it; any other key re-captures (the old graph is dropped), unless the
// graph was made with a capture limit it has reached: then run() refuses by the graph's name.
// Nothing is ever replayed under a key it was not captured with. Values that change between
// calls without changing the key (a learning rate, a step count) must reach the kernels through
// device memory the caller updates before run() (a copy from pinned memory inside the body is
// captured and reads the pinned value at every replay), never as a kernel argument.
//
// Refusal. The body runs while the stream captures (stream capture in thread-local mode: the
// calling thread's unsafe calls are refused, other threads' are not): work queued
// on the stream is recorded, not run. A call a graph cannot hold (a host read of a result, a
// stream synchronization, an allocation outside the stream, an NCCL call on the emulation, a
// free of memory allocated before the capture) fails the capture; run() then returns an error
// naming the graph and the CUDA runtime's reason, and the stream is back to eager use. A
// VT_CUDA_CHECK that aborts inside the body names the graph being captured too
// (vt::cuda::capture_label, kernels/cuda_check.cuh).
//
// Memory. Stream-ordered allocations the body makes belong to the graph (their addresses are
// fixed; CUDA frees them with the graph). Warm up first: one eager call grows the runtime's
// scratch (attention workspace, RoPE tables) so the captured body allocates only its own
// temporaries.
// Host-only; builds with CUDA (VTRAIN_HAS_CUDA).
#pragma once
#if VTRAIN_HAS_CUDA
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace vt {

class CudaRuntime;

struct GraphKey {
  std::string shapes;                 // the caller's signature of every size and setting
  std::vector<const void*> buffers;  // device buffers the body touches that outlive one call
  bool operator==(const GraphKey& o) const { return shapes == o.shapes && buffers == o.buffers; }
  bool operator!=(const GraphKey& o) const { return !(*this == o); }
};

class CudaStepGraph {
 public:
  // `name` names the graph in errors; max_captures < 0: re-capture on every key change;
  // otherwise at most that many captures (1: a key change is refused).
  CudaStepGraph(std::string name, CudaRuntime& rt, int max_captures = -1);
  ~CudaStepGraph();
  CudaStepGraph(const CudaStepGraph&) = delete;
  CudaStepGraph& operator=(const CudaStepGraph&) = delete;

  // The work of body() on the runtime's stream, as a graph launch: replayed when `key` is the
  // held graph's key (body is not called), else captured from body() and launched. Returns
  // asynchronously like the ops it replaces. An error names the graph (see the top).
  absl::Status run(const GraphKey& key, const std::function<void()>& body);

  const std::string& name() const { return name_; }
  int captures() const { return captures_; }
  int64_t replays() const { return replays_; }  // launches without a capture
  bool holds_graph() const { return exec_ != nullptr; }

 private:
  void drop();
  std::string name_;
  CudaRuntime& rt_;
  int max_captures_;
  GraphKey key_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  int captures_ = 0;
  int64_t replays_ = 0;
};

}  // namespace vt
#endif  // VTRAIN_HAS_CUDA
