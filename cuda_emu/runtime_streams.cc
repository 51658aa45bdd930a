// Emulated CUDA runtime, part 2: streams, their worker threads, events, and the legacy default
// stream's implicit synchronization (see runtime.h for the model).
//
// One mutex and one condition variable guard every queue: simple and obviously correct, and the
// emulation is never limited by queue traffic (kernels run for far longer than a lock is held).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "runtime.h"

struct CUstream_st {
  int device = 0;
  bool legacy = false;       // the NULL stream of its device
  bool nonblocking = false;  // cudaStreamNonBlocking: no implicit order with the NULL stream
  bool destroyed = false;
  int priority = 0;
  struct Op {
    std::function<void()> fn;
    std::vector<vt_emu::Dep> deps;
  };
  std::deque<Op> queue;
  uint64_t submitted = 0, completed = 0;
  bool worker_started = false;
};

struct CUevent_st {
  int device = 0;
  bool timing = true;
  CUstream_st* stream = nullptr;  // nullptr: never recorded
  uint64_t seq = 0;
  double time_ms = 0.0;  // when the record operation ran
};

namespace vt_emu {

struct Stream : CUstream_st {};

namespace {

struct Streams {
  std::mutex mu;
  std::condition_variable cv;
  std::set<CUstream_st*> live;                  // created and not yet destroyed
  std::map<int, std::vector<CUstream_st*>> by_device;  // with work possibly pending
  std::map<int, CUstream_st*> legacy;
  std::set<CUevent_st*> events;
};

Streams& S() {
  static Streams* s = new Streams;  // never destroyed: workers may outlive static destruction
  return *s;
}

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

bool deps_ready(const CUstream_st::Op& op) {
  for (const Dep& d : op.deps)
    if (d.stream->completed < d.seq) return false;
  return true;
}

void worker_loop(CUstream_st* s) {
  Streams& st = S();
  std::unique_lock<std::mutex> lock(st.mu);
  for (;;) {
    st.cv.wait(lock, [&] {
      return (!s->queue.empty() && deps_ready(s->queue.front())) ||
             (s->destroyed && s->queue.empty());
    });
    if (s->queue.empty()) break;  // destroyed and drained
    CUstream_st::Op op = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    if (sticky(s->device) == cudaSuccess) op.fn();
    op.fn = nullptr;  // destroy captures outside the lock
    lock.lock();
    ++s->completed;
    st.cv.notify_all();
  }
  auto& v = st.by_device[s->device];
  v.erase(std::remove(v.begin(), v.end(), s), v.end());
}

CUstream_st* legacy_stream(int device) {
  Streams& st = S();
  auto it = st.legacy.find(device);
  if (it != st.legacy.end()) return it->second;
  auto* s = new Stream;
  s->device = device;
  s->legacy = true;
  st.legacy[device] = s;
  st.live.insert(s);
  st.by_device[device].push_back(s);
  return s;
}

// Caller holds st.mu.
uint64_t enqueue_locked(CUstream_st* s, std::function<void()> fn, std::vector<Dep> deps) {
  Streams& st = S();
  if (s->legacy) {
    // The NULL stream waits for all work queued so far on the device's blocking streams.
    for (CUstream_st* o : st.by_device[s->device])
      if (o != s && !o->nonblocking && o->submitted > o->completed)
        deps.push_back(Dep{static_cast<Stream*>(o), o->submitted});
  } else if (!s->nonblocking) {
    // A blocking stream waits for all work queued so far on the NULL stream.
    CUstream_st* l = legacy_stream(s->device);
    if (l->submitted > l->completed) deps.push_back(Dep{static_cast<Stream*>(l), l->submitted});
  }
  s->queue.push_back(CUstream_st::Op{std::move(fn), std::move(deps)});
  const uint64_t seq = ++s->submitted;
  if (!s->worker_started) {
    s->worker_started = true;
    std::thread(worker_loop, s).detach();
  }
  st.cv.notify_all();
  return seq;
}

}  // namespace

Stream* resolve(cudaStream_t h) {
  Streams& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
    return static_cast<Stream*>(legacy_stream(current_device()));
  return st.live.count(h) ? static_cast<Stream*>(h) : nullptr;
}

int stream_device(const Stream* s) { return s->device; }
bool stream_is_legacy(const Stream* s) { return s->legacy; }
bool stream_is_nonblocking(const Stream* s) { return s->nonblocking; }

uint64_t enqueue(Stream* s, std::function<void()> fn, std::vector<Dep> deps) {
  if (capture_record(s, fn)) return 0;
  std::lock_guard<std::mutex> lock(S().mu);
  return enqueue_locked(s, std::move(fn), std::move(deps));
}

void wait_for(Stream* s, uint64_t seq) {
  Streams& st = S();
  std::unique_lock<std::mutex> lock(st.mu);
  st.cv.wait(lock, [&] { return s->completed >= seq; });
}

bool completed(const Stream* s, uint64_t seq) {
  std::lock_guard<std::mutex> lock(S().mu);
  return s->completed >= seq;
}

uint64_t submitted(const Stream* s) {
  std::lock_guard<std::mutex> lock(S().mu);
  return s->submitted;
}

void synchronize_device(int d) {
  Streams& st = S();
  std::unique_lock<std::mutex> lock(st.mu);
  std::vector<std::pair<CUstream_st*, uint64_t>> targets;
  for (CUstream_st* s : st.by_device[d]) targets.emplace_back(s, s->submitted);
  st.cv.wait(lock, [&] {
    for (auto& [s, seq] : targets)
      if (s->completed < seq) return false;
    return true;
  });
}

void synchronize_all() {
  std::vector<int> devs;
  {
    std::lock_guard<std::mutex> lock(S().mu);
    for (auto& [d, v] : S().by_device) devs.push_back(d);
  }
  for (int d : devs) synchronize_device(d);
}

}  // namespace vt_emu

using namespace vt_emu;

namespace {

cudaError_t create_stream(cudaStream_t* out, unsigned flags, int priority) {
  if (cudaError_t e = api_begin()) return e;
  if (!out) return fail(cudaErrorInvalidValue, "cudaStreamCreate: stream pointer is null");
  if (flags & ~unsigned(cudaStreamNonBlocking))
    return fail(cudaErrorInvalidValue, "cudaStreamCreate: unknown flags");
  if (device_count() == 0) return fail(cudaErrorNoDevice, "VT_EMU_DEVICES=0");
  auto* s = new Stream;
  s->device = current_device();
  s->nonblocking = (flags & cudaStreamNonBlocking) != 0;
  s->priority = priority;
  Streams& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  st.live.insert(s);
  st.by_device[s->device].push_back(s);
  *out = s;
  return cudaSuccess;
}

CUevent_st* live_event(cudaEvent_t e) {
  std::lock_guard<std::mutex> lock(S().mu);
  return S().events.count(e) ? e : nullptr;
}

}  // namespace

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* s) { return create_stream(s, 0, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  return create_stream(s, flags, 0);
}
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* s, unsigned int flags, int priority) {
  return create_stream(s, flags, priority);
}

cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (least) *least = 0;
  if (greatest) *greatest = -5;
  return cudaSuccess;
}

// Work still queued runs to the end; the stream's resources go with its worker.
cudaError_t cudaStreamDestroy(cudaStream_t h) {
  if (h == nullptr || h == cudaStreamLegacy || h == cudaStreamPerThread)
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: the default stream");
  Streams& st = S();
  std::lock_guard<std::mutex> lock(st.mu);
  if (!st.live.count(h))
    return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: not a live stream");
  if (cudaError_t e = refuse_if_capturing(static_cast<Stream*>(h), "cudaStreamDestroy")) return e;
  st.live.erase(h);
  h->destroyed = true;
  if (!h->worker_started) {
    auto& v = st.by_device[h->device];
    v.erase(std::remove(v.begin(), v.end(), h), v.end());
  }
  st.cv.notify_all();
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t h) {
  if (cudaError_t e = api_begin()) return e;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamSynchronize: not a live stream");
  if (cudaError_t e = refuse_if_capturing(s, "cudaStreamSynchronize")) return e;
  wait_for(s, submitted(s));
  return fail(sticky(stream_device(s)), error_detail(sticky(stream_device(s))));
}

cudaError_t cudaStreamQuery(cudaStream_t h) {
  if (cudaError_t e = api_begin()) return e;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamQuery: not a live stream");
  if (cudaError_t e = refuse_if_capturing(s, "cudaStreamQuery")) return e;
  return completed(s, submitted(s)) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetFlags(cudaStream_t h, unsigned int* flags) {
  Stream* s = resolve(h);
  if (!s || !flags) return fail(cudaErrorInvalidResourceHandle, "cudaStreamGetFlags");
  *flags = s->nonblocking ? cudaStreamNonBlocking : cudaStreamDefault;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t ev, unsigned int flags) {
  if (cudaError_t e = api_begin()) return e;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live stream");
  CUevent_st* e = live_event(ev);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent: not a live event");
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaStreamWaitEvent: flags must be 0");
  bool recorded;
  {
    std::lock_guard<std::mutex> lock(S().mu);
    recorded = e->stream != nullptr;
  }
  bool handled = false;
  if (cudaError_t err = capture_event_wait(s, ev, recorded, &handled)) return err;
  if (handled) return cudaSuccess;
  std::lock_guard<std::mutex> lock(S().mu);
  if (e->stream == nullptr) return cudaSuccess;  // never recorded: nothing to wait for
  enqueue_locked(s, [] {}, {Dep{static_cast<Stream*>(e->stream), e->seq}});
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t h, cudaHostFn_t fn, void* data) {
  if (cudaError_t e = api_begin()) return e;
  Stream* s = resolve(h);
  if (!s || !fn) return fail(cudaErrorInvalidResourceHandle, "cudaLaunchHostFunc");
  enqueue(s, [fn, data] { fn(data); });
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, 0); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* out, unsigned int flags) {
  if (cudaError_t e = api_begin()) return e;
  if (!out) return fail(cudaErrorInvalidValue, "cudaEventCreate: event pointer is null");
  auto* e = new CUevent_st;
  e->device = current_device();
  e->timing = (flags & cudaEventDisableTiming) == 0;
  std::lock_guard<std::mutex> lock(S().mu);
  S().events.insert(e);
  *out = e;
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t ev) {
  std::lock_guard<std::mutex> lock(S().mu);
  if (!S().events.erase(ev))
    return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: not a live event");
  // The object stays allocated: a queued record operation may still write its time.
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t h) {
  if (cudaError_t e = api_begin()) return e;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live stream");
  CUevent_st* e = live_event(ev);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventRecord: not a live event");
  bool handled = false;
  if (cudaError_t err = capture_event_record(ev, s, &handled)) return err;
  if (handled) return cudaSuccess;
  std::lock_guard<std::mutex> lock(S().mu);
  e->stream = s;
  e->seq = enqueue_locked(s, [e] { e->time_ms = now_ms(); }, {});
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t ev) {
  CUevent_st* e = live_event(ev);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventQuery: not a live event");
  if (event_in_live_capture(ev))
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaEventQuery: the event was recorded in a capture under way");
  if (e->stream == nullptr) return cudaSuccess;
  return completed(static_cast<Stream*>(e->stream), e->seq) ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t ev) {
  if (cudaError_t e = api_begin()) return e;
  CUevent_st* e = live_event(ev);
  if (!e) return fail(cudaErrorInvalidResourceHandle, "cudaEventSynchronize: not a live event");
  if (event_in_live_capture(ev))
    return fail(cudaErrorStreamCaptureUnsupported,
                "cudaEventSynchronize: the event was recorded in a capture under way");
  if (e->stream) wait_for(static_cast<Stream*>(e->stream), e->seq);
  return api_begin();
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  CUevent_st* a = live_event(start);
  CUevent_st* b = live_event(end);
  if (!ms || !a || !b) return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime");
  if (!a->timing || !b->timing || !a->stream || !b->stream)
    return fail(cudaErrorInvalidResourceHandle,
                "cudaEventElapsedTime: an event was not recorded or has timing disabled");
  if (!completed(static_cast<Stream*>(a->stream), a->seq) ||
      !completed(static_cast<Stream*>(b->stream), b->seq))
    return cudaErrorNotReady;
  *ms = float(b->time_ms - a->time_ms);
  return cudaSuccess;
}

}  // extern "C"
