// Internal interface of the emulated CUDA runtime, shared by its parts (runtime_*.cc) and by the
// emulated cuBLASLt and NCCL: devices and their configuration, the per-thread last error and the
// per-device sticky error, the registry of device and pinned allocations, and the stream queues.
//
// Execution model: every stream has a FIFO of operations and one worker thread that runs them
// in order; cross-stream order comes from dependencies (cudaStreamWaitEvent, and the implicit
// synchronization of the legacy default stream with blocking streams). Host calls return as the
// CUDA runtime documents (asynchronous calls return at once, synchronous ones wait for their
// operation), so host code that forgets to synchronize reads stale data here as on a GPU.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace vt_emu {

// --- configuration (environment, read once) --------------------------------------------------
// VT_EMU_DEVICES: emulated devices per process (default 1; 0 emulates a machine without GPU).
// VT_EMU_DEVICE_MEMORY: bytes per device (suffix K, M or G; default min(80 GiB, host memory)).
// VT_EMU_POISON: 1 (default) fills fresh and freed device memory with 0xff bytes (NaN floats).
int device_count();
size_t device_memory_bytes();
bool poison_enabled();

// The current device of the calling host thread.
int current_device();
void set_current_device(int d);

// --- errors ------------------------------------------------------------------------------------
// Records err (with a detail string for cudaGetErrorString) as the calling thread's last error
// and returns it. err == cudaSuccess returns cudaSuccess and records nothing.
cudaError_t fail(cudaError_t err, const std::string& detail);
// The sticky error of device d (cudaSuccess when none): set when a kernel faults; every later
// call that touches the device returns it.
cudaError_t sticky(int d);
void set_sticky(int d, cudaError_t err, const std::string& detail);
void clear_sticky(int d);  // cudaDeviceReset
void clear_last_error();
// Start of most API calls: the sticky error of the current device, recorded as last error.
cudaError_t api_begin();
// The detail recorded for err on this thread or as the device's sticky error, or "".
std::string error_detail(cudaError_t err);

// --- memory registry ---------------------------------------------------------------------------
enum class MemKind : uint8_t { kDevice, kPinned };
struct Region {
  bool known = false;  // inside a registered allocation
  MemKind kind = MemKind::kDevice;
  int device = 0;
  uintptr_t base = 0;
  size_t size = 0;
};
// Where [p, p + bytes) lies: known only when it is entirely inside one registered allocation
// (bytes == 0: p may also be one past the end).
Region classify(const void* p, size_t bytes);
// A description such as "device memory of device 0" / "pageable host memory" for messages.
std::string describe(const Region& r);

// --- streams -------------------------------------------------------------------------------------
struct Stream;
struct Dep {
  Stream* stream = nullptr;
  uint64_t seq = 0;  // satisfied once stream has completed `seq` operations
};
// The stream for a handle on device `device` (nullptr / cudaStreamLegacy: that device's legacy
// default stream). nullptr when the handle is not a live stream.
Stream* resolve(cudaStream_t s);
int stream_device(const Stream* s);
bool stream_is_legacy(const Stream* s);
bool stream_is_nonblocking(const Stream* s);
// Queues fn on s after `deps` (plus the implicit legacy-stream order); returns its sequence
// number. fn runs on the stream's worker thread; it is skipped when the device has a sticky
// error. On a capturing stream fn is recorded into the capture instead (it does not run; deps
// are implied by the capture's order) and 0 is returned.
uint64_t enqueue(Stream* s, std::function<void()> fn, std::vector<Dep> deps = {});
// Blocks until s has completed operation `seq`.
void wait_for(Stream* s, uint64_t seq);
bool completed(const Stream* s, uint64_t seq);
// Operations queued on s so far.
uint64_t submitted(const Stream* s);
// Waits for every stream of device d.
void synchronize_device(int d);
// Waits for every stream of every device (MPI_Finalize does this before finalizing).
void synchronize_all();

// Unregisters and frees the device allocation at p now (no synchronization; errors ignored).
void free_device_now(void* p);

// --- stream capture (runtime_graphs.cc; the model is described there) -------------------------
// When s is capturing: records fn (moved from) into its capture and returns true. Also notes
// work on a legacy stream that invalidates a capture of a blocking stream.
bool capture_record(Stream* s, std::function<void()>& fn);
bool is_capturing(const Stream* s);
// A call that would wait for s: cudaErrorStreamCaptureUnsupported (and the capture invalidated)
// when s is capturing, else cudaSuccess.
cudaError_t refuse_if_capturing(const Stream* s, const std::string& api);
// A "potentially unsafe" call (cudaMalloc, cudaFree, synchronous copies, cudaDeviceSynchronize):
// cudaErrorStreamCaptureUnsupported while a global-mode capture is under way on any thread or a
// thread-local one on this thread, else cudaSuccess.
cudaError_t refuse_if_unsafe(const std::string& api);
// cudaEventRecord on s: *handled when s is capturing (the event then marks a point of the
// capture and no operation is queued).
cudaError_t capture_event_record(cudaEvent_t e, Stream* s, bool* handled);
// cudaStreamWaitEvent(s, e): *handled when the wait is part of a capture (s capturing, or e
// recorded in a capture: s joins it). Errors for waits that cross a capture's boundary.
cudaError_t capture_event_wait(Stream* s, cudaEvent_t e, bool event_recorded, bool* handled);
// Whether e was last recorded in a capture still under way (host waits on it are refused).
bool event_in_live_capture(cudaEvent_t e);
// cudaMallocAsync of p (rounded size `bytes`) on capturing s: the graph owns p.
void capture_note_allocation(Stream* s, void* p, size_t bytes);
// cudaFreeAsync of p on s: *handled when s is capturing (nothing to do for a block of the same
// capture; refused for any other).
cudaError_t capture_free(Stream* s, void* p, bool* handled);

}  // namespace vt_emu
