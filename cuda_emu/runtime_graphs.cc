// Emulated CUDA runtime, part 5: stream capture and CUDA graphs (cudaStreamBeginCapture /
// EndCapture / IsCapturing / GetCaptureInfo, cudaThreadExchangeStreamCaptureMode,
// cudaGraphInstantiate / Launch / ExecDestroy / Destroy), and the capture rules the other parts
// of the runtime consult (see runtime.h, "stream capture").
//
// Model. While a stream captures, every operation queued on it (a kernel with its arguments as
// bound at the launch, a memset, a copy between device or pinned memory, a cuBLASLt matmul with
// its host alpha/beta as read at the call, a host function) is recorded instead of queued: it
// does not run. Another stream joins the capture by waiting on an event recorded in it (fork)
// and must be joined back into the origin stream before the capture ends (join), as CUDA
// requires. A graph is the captured operations in the order the host issued them, which is a
// topological order of the captured dependencies; a launch queues them as one operation on the
// launch stream, which runs them in that order. Values are therefore those of an eager run of
// the same calls, bit for bit.
//
// What CUDA refuses during capture is refused here, and the capture is invalidated (its end
// returns cudaErrorStreamCaptureInvalidated): synchronizing or querying a capturing stream,
// synchronous copies and memsets, cudaMalloc / cudaFree / cudaMallocHost / cudaFreeHost and
// cudaDeviceSynchronize while a capture in global mode is under way (any thread) or one in
// thread-local mode on this thread, copies from or to pageable host memory, waits on events
// recorded outside the capture, using the legacy default stream while a blocking stream of its
// device captures, and NCCL calls on a capturing stream (nccl_mpi.cc: collectives are kept
// outside graphs in this emulation).
//
// Memory. cudaMallocAsync on a capturing stream allocates at once (a fixed address, as a graph's
// allocation node has) and records a 0xff fill (poisoning) in its place, so a replay that reads
// before writing reads NaN; the graph owns that memory (freed when the graph and every
// instantiation of it are destroyed and their launches have run). cudaFreeAsync on a capturing
// stream of a block allocated in the same capture records nothing; of any other block it is
// refused (a replay would free it again). A block allocated in the capture must be freed in it:
// CUDA lets such a block outlive the launch (the caller frees it before the next launch), which
// this emulation does not model, so the capture is invalidated instead.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "runtime.h"

namespace vt_emu {

namespace {

// Memory a graph owns; freed when the last graph, instantiation or queued launch lets go.
struct OwnedMemory {
  std::vector<void*> blocks;
  ~OwnedMemory() {
    for (void* p : blocks) free_device_now(p);
  }
};

// A vector clock: for each stream of the capture, how many of its captured operations are
// ordered before the point it describes.
using Clock = std::map<const Stream*, uint64_t>;

struct Capture {
  uint64_t id = 0;
  int device = 0;
  Stream* origin = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;
  std::vector<std::function<void()>> ops;
  std::map<const Stream*, Clock> clocks;  // the member streams and what each is ordered after
  std::shared_ptr<OwnedMemory> memory = std::make_shared<OwnedMemory>();
  std::set<void*> allocated;  // blocks allocated in this capture (owned by its graph)
  std::set<void*> freed;      // those of them freed in it
  std::string invalid;        // why the capture was invalidated; empty while valid
};

struct EventMark {
  uint64_t capture = 0;  // the id of the capture it was recorded in
  const Stream* stream = nullptr;
  Clock clock;
};

struct Captures {
  std::mutex mu;
  uint64_t next_id = 1;
  std::map<const Stream*, Capture*> by_stream;  // member streams of captures under way
  std::set<Capture*> live;
  std::map<cudaEvent_t, EventMark> events;  // events last recorded inside a capture
};

Captures& C() {
  static Captures* c = new Captures;
  return *c;
}

thread_local cudaStreamCaptureMode tl_mode = cudaStreamCaptureModeGlobal;

// Caller holds C().mu.
Capture* capture_of_locked(const Stream* s) {
  auto it = C().by_stream.find(s);
  return it == C().by_stream.end() ? nullptr : it->second;
}

// The live capture with this id, or nullptr when it has ended. Caller holds C().mu.
Capture* live_capture_locked(uint64_t id) {
  for (Capture* c : C().live)
    if (c->id == id) return c;
  return nullptr;
}

void invalidate_locked(Capture* c, const std::string& why) {
  if (c->invalid.empty()) c->invalid = why;
}

}  // namespace

}  // namespace vt_emu

struct CUgraph_st {
  int device = 0;
  std::vector<std::function<void()>> ops;
  std::shared_ptr<vt_emu::OwnedMemory> memory;
};

struct CUgraphExec_st {
  int device = 0;
  std::shared_ptr<const std::vector<std::function<void()>>> ops;
  std::shared_ptr<vt_emu::OwnedMemory> memory;
};

namespace vt_emu {

namespace {

std::mutex g_graph_mu;
std::set<cudaGraph_t>& live_graphs() {
  static auto* s = new std::set<cudaGraph_t>;
  return *s;
}
std::set<cudaGraphExec_t>& live_execs() {
  static auto* s = new std::set<cudaGraphExec_t>;
  return *s;
}

}  // namespace

bool capture_record(Stream* s, std::function<void()>& fn) {
  Captures& cs = C();
  std::lock_guard<std::mutex> lock(cs.mu);
  if (cs.by_stream.empty()) {
    return false;
  }
  if (Capture* c = capture_of_locked(s)) {
    if (!c->invalid.empty()) {
      fail(cudaErrorStreamCaptureInvalidated, "the capture was invalidated: " + c->invalid);
      return true;  // dropped
    }
    c->ops.push_back(std::move(fn));
    ++c->clocks[s][s];
    return true;
  }
  // Work on the legacy default stream while a blocking stream of its device captures: CUDA
  // refuses it (cudaErrorStreamCaptureImplicit) and invalidates the capture.
  if (stream_is_legacy(s)) {
    for (Capture* c : cs.live)
      for (auto& [member, clock] : c->clocks)
        if (stream_device(member) == stream_device(s) && !stream_is_nonblocking(member))
          invalidate_locked(c, "the legacy default stream was used while a blocking stream of "
                               "its device was capturing (cudaErrorStreamCaptureImplicit)");
  }
  return false;
}

bool is_capturing(const Stream* s) {
  std::lock_guard<std::mutex> lock(C().mu);
  return capture_of_locked(s) != nullptr;
}

cudaError_t refuse_if_capturing(const Stream* s, const std::string& api) {
  std::lock_guard<std::mutex> lock(C().mu);
  Capture* c = capture_of_locked(s);
  if (!c) return cudaSuccess;
  const std::string why = api + " on a capturing stream is not allowed during stream capture";
  invalidate_locked(c, why);
  return fail(cudaErrorStreamCaptureUnsupported, why);
}

cudaError_t refuse_if_unsafe(const std::string& api) {
  std::lock_guard<std::mutex> lock(C().mu);
  const std::thread::id me = std::this_thread::get_id();
  for (Capture* c : C().live) {
    const bool prohibits = c->mode == cudaStreamCaptureModeGlobal ||
                           (c->mode == cudaStreamCaptureModeThreadLocal && c->thread == me);
    if (!prohibits) continue;
    const std::string why = api + " is not allowed while a stream capture in " +
                            (c->mode == cudaStreamCaptureModeGlobal ? "global" : "thread-local") +
                            " mode is under way";
    // Only the capturing thread's own capture is invalidated (CUDA invalidates the captures
    // the offending call interferes with; the caller sees the error either way).
    if (c->thread == me) invalidate_locked(c, why);
    return fail(cudaErrorStreamCaptureUnsupported, why);
  }
  return cudaSuccess;
}

cudaError_t capture_event_record(cudaEvent_t e, Stream* s, bool* handled) {
  std::lock_guard<std::mutex> lock(C().mu);
  Capture* c = capture_of_locked(s);
  if (!c) {
    C().events.erase(e);  // recorded outside any capture from now on
    *handled = false;
    return cudaSuccess;
  }
  *handled = true;
  EventMark m;
  m.capture = c->id;
  m.stream = s;
  m.clock = c->clocks[s];
  C().events[e] = std::move(m);
  return cudaSuccess;
}

cudaError_t capture_event_wait(Stream* s, cudaEvent_t e, bool event_recorded, bool* handled) {
  std::lock_guard<std::mutex> lock(C().mu);
  Capture* waiter = capture_of_locked(s);
  auto it = C().events.find(e);
  const bool captured_event = it != C().events.end();
  if (!captured_event) {
    *handled = waiter != nullptr;
    if (!waiter || !event_recorded) return cudaSuccess;  // nothing to wait for when never recorded
    const std::string why =
        "cudaStreamWaitEvent: a capturing stream waits on an event recorded outside the capture";
    invalidate_locked(waiter, why);
    return fail(cudaErrorStreamCaptureIsolation, why);
  }
  *handled = true;
  Capture* c = live_capture_locked(it->second.capture);
  if (!c) {
    return fail(cudaErrorStreamCaptureIsolation,
                "cudaStreamWaitEvent: the event was recorded in a capture that has ended");
  }
  if (waiter && waiter != c) {
    const std::string why = "cudaStreamWaitEvent: the event belongs to another capture";
    invalidate_locked(waiter, why);
    invalidate_locked(c, why);
    return fail(cudaErrorStreamCaptureIsolation, why);
  }
  if (!waiter) {
    if (stream_device(s) != c->device || stream_is_legacy(s))
      return fail(cudaErrorStreamCaptureIsolation,
                  "cudaStreamWaitEvent: the stream cannot join a capture of another device or "
                  "as the legacy default stream");
    C().by_stream[s] = c;  // fork: s joins the capture
  }
  Clock& mine = c->clocks[s];
  mine[s] += 0;  // a member from now on, even before it records anything
  for (auto& [stream, n] : it->second.clock) mine[stream] = std::max(mine[stream], n);
  return cudaSuccess;
}

bool event_in_live_capture(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(C().mu);
  auto it = C().events.find(e);
  return it != C().events.end() && live_capture_locked(it->second.capture) != nullptr;
}

void capture_note_allocation(Stream* s, void* p, size_t bytes) {
  std::function<void()> poison;
  if (poison_enabled()) poison = [p, bytes] { std::memset(p, 0xff, bytes); };
  std::lock_guard<std::mutex> lock(C().mu);
  Capture* c = capture_of_locked(s);
  if (!c) return;
  c->allocated.insert(p);
  c->memory->blocks.push_back(p);
  if (poison && c->invalid.empty()) {
    c->ops.push_back(std::move(poison));
    ++c->clocks[s][s];
  }
}

cudaError_t capture_free(Stream* s, void* p, bool* handled) {
  std::lock_guard<std::mutex> lock(C().mu);
  Capture* c = capture_of_locked(s);
  *handled = c != nullptr;
  if (!c) return cudaSuccess;
  if (c->allocated.count(p)) {  // the graph owns it; freed with the graph
    c->freed.insert(p);
    return cudaSuccess;
  }
  const std::string why =
      "cudaFreeAsync on a capturing stream of memory allocated outside the capture (each replay "
      "would free it again)";
  invalidate_locked(c, why);
  return fail(cudaErrorStreamCaptureUnsupported, why);
}

}  // namespace vt_emu

using namespace vt_emu;

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t h, cudaStreamCaptureMode mode) {
  if (cudaError_t e = api_begin()) return e;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamBeginCapture: not a live stream");
  if (stream_is_legacy(s))
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaStreamBeginCapture: the legacy default stream cannot be captured");
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue, "cudaStreamBeginCapture: unknown mode");
  std::lock_guard<std::mutex> lock(C().mu);
  if (capture_of_locked(s))
    return fail(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
  auto* c = new Capture;
  c->id = C().next_id++;
  c->device = stream_device(s);
  c->origin = s;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->clocks[s];
  C().live.insert(c);
  C().by_stream[s] = c;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t h, cudaGraph_t* graph) {
  if (!graph) return fail(cudaErrorInvalidValue, "cudaStreamEndCapture: graph pointer is null");
  *graph = nullptr;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamEndCapture: not a live stream");
  Capture* c = nullptr;
  {
    std::lock_guard<std::mutex> lock(C().mu);
    c = capture_of_locked(s);
    if (!c) return fail(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
    if (c->origin != s) {
      invalidate_locked(c, "cudaStreamEndCapture called on a stream that joined the capture");
      return fail(cudaErrorStreamCaptureUnmatched,
                  "cudaStreamEndCapture: not the stream the capture began on");
    }
    if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id()) {
      invalidate_locked(c, "cudaStreamEndCapture from another thread");
      return fail(cudaErrorStreamCaptureWrongThread,
                  "cudaStreamEndCapture: called from another thread than the capture began on");
    }
    // Every stream that joined must be joined back into the origin: the origin must have
    // waited on an event recorded on it after its last captured operation.
    std::string unjoined;
    const Clock origin_clock = c->clocks[s];
    for (auto& [member, clock] : c->clocks) {
      if (member == s) continue;
      auto o = origin_clock.find(member);
      if (o == origin_clock.end() || o->second < clock.at(member))
        unjoined = "a stream forked into the capture was not joined back into the origin stream";
    }
    if (c->freed.size() != c->allocated.size())
      invalidate_locked(c, std::to_string(c->allocated.size() - c->freed.size()) +
                               " block(s) allocated in the capture are not freed in it (the "
                               "emulation keeps no graph allocation beyond a launch: allocate "
                               "what outlives the step before capturing)");
    for (auto it = C().by_stream.begin(); it != C().by_stream.end();)
      it = it->second == c ? C().by_stream.erase(it) : std::next(it);
    C().live.erase(c);
    if (!unjoined.empty() && c->invalid.empty()) {
      delete c;
      return fail(cudaErrorStreamCaptureUnjoined, "cudaStreamEndCapture: " + unjoined);
    }
  }
  std::unique_ptr<Capture> owned(c);
  if (!c->invalid.empty())
    return fail(cudaErrorStreamCaptureInvalidated,
                "cudaStreamEndCapture: the capture was invalidated: " + c->invalid);
  auto* g = new CUgraph_st;
  g->device = c->device;
  g->ops = std::move(c->ops);
  g->memory = c->memory;
  std::lock_guard<std::mutex> lock(g_graph_mu);
  live_graphs().insert(g);
  *graph = g;
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t h, cudaStreamCaptureStatus* status) {
  if (!status) return fail(cudaErrorInvalidValue, "cudaStreamIsCapturing: status is null");
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamIsCapturing: not a live stream");
  std::lock_guard<std::mutex> lock(C().mu);
  Capture* c = capture_of_locked(s);
  *status = !c ? cudaStreamCaptureStatusNone
               : c->invalid.empty() ? cudaStreamCaptureStatusActive
                                    : cudaStreamCaptureStatusInvalidated;
  return cudaSuccess;
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t h, cudaStreamCaptureStatus* status,
                                     unsigned long long* id, cudaGraph_t* graph,
                                     const cudaGraphNode_t** deps, const cudaGraphEdgeData** edges,
                                     size_t* num_deps) {
  if (!status) return fail(cudaErrorInvalidValue, "cudaStreamGetCaptureInfo: status is null");
  if (graph || deps || edges)
    return fail(cudaErrorNotSupported,
                "cudaStreamGetCaptureInfo: the graph and its nodes are not emulated (status and "
                "id are)");
  if (num_deps) *num_deps = 0;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamGetCaptureInfo: not a live stream");
  std::lock_guard<std::mutex> lock(C().mu);
  Capture* c = capture_of_locked(s);
  *status = !c ? cudaStreamCaptureStatusNone
               : c->invalid.empty() ? cudaStreamCaptureStatusActive
                                    : cudaStreamCaptureStatusInvalidated;
  if (id) *id = c ? c->id : 0;
  return cudaSuccess;
}

cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode) {
  if (!mode) return fail(cudaErrorInvalidValue, "cudaThreadExchangeStreamCaptureMode: null");
  std::swap(*mode, tl_mode);
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags) {
  if (cudaError_t e = api_begin()) return e;
  if (!exec) return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: exec pointer is null");
  if (flags != 0)
    return fail(cudaErrorInvalidValue, "cudaGraphInstantiate: only flags 0 are emulated");
  std::lock_guard<std::mutex> lock(g_graph_mu);
  if (!live_graphs().count(graph))
    return fail(cudaErrorInvalidResourceHandle, "cudaGraphInstantiate: not a live graph");
  auto* x = new CUgraphExec_st;
  x->device = graph->device;
  x->ops = std::make_shared<const std::vector<std::function<void()>>>(graph->ops);
  x->memory = graph->memory;
  live_execs().insert(x);
  *exec = x;
  return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t h) {
  if (cudaError_t e = api_begin()) return e;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: not a live stream");
  std::shared_ptr<const std::vector<std::function<void()>>> ops;
  std::shared_ptr<OwnedMemory> memory;
  int dev = 0;
  {
    std::lock_guard<std::mutex> lock(g_graph_mu);
    if (!live_execs().count(exec))
      return fail(cudaErrorInvalidResourceHandle, "cudaGraphLaunch: not a live graph exec");
    ops = exec->ops;
    memory = exec->memory;
    dev = exec->device;
  }
  if (stream_device(s) != dev)
    return fail(cudaErrorInvalidValue,
                "cudaGraphLaunch: the stream is on another device than the graph");
  // One operation on the stream: the captured operations in the order they were issued; a
  // fault stops the rest, as the device's sticky error stops every later operation.
  enqueue(s, [ops, memory, dev] {
    for (const auto& op : *ops) {
      if (sticky(dev) != cudaSuccess) return;
      op();
    }
  });
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  std::lock_guard<std::mutex> lock(g_graph_mu);
  if (!live_execs().erase(exec))
    return fail(cudaErrorInvalidResourceHandle, "cudaGraphExecDestroy: not a live graph exec");
  delete exec;  // queued launches hold their own references to the operations and memory
  return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  std::lock_guard<std::mutex> lock(g_graph_mu);
  if (!live_graphs().erase(graph))
    return fail(cudaErrorInvalidResourceHandle, "cudaGraphDestroy: not a live graph");
  delete graph;
  return cudaSuccess;
}

}  // extern "C"
