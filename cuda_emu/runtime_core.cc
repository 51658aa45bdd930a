// Emulated CUDA runtime, part 1: configuration, devices and errors (cudaGetDeviceCount,
// cudaSetDevice, cudaGetLastError, cudaGetErrorString, ...). See runtime.h.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "runtime.h"

namespace vt_emu {

namespace {

size_t parse_bytes(const char* s, const char* name) {
  char* end = nullptr;
  const double v = std::strtod(s, &end);
  double mul = 1.0;
  if (end && *end) {
    switch (*end) {
      case 'k': case 'K': mul = 1024.0; break;
      case 'm': case 'M': mul = 1024.0 * 1024; break;
      case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
      default:
        std::fprintf(stderr, "vt_emu: %s: cannot read '%s' as bytes (use e.g. 16G)\n", name, s);
        std::abort();
    }
  }
  if (!(v >= 0)) {
    std::fprintf(stderr, "vt_emu: %s must be >= 0, got '%s'\n", name, s);
    std::abort();
  }
  return size_t(v * mul);
}

struct Config {
  int devices = 1;
  size_t memory = 0;
  bool poison = true;
  Config() {
    if (const char* e = std::getenv("VT_EMU_DEVICES")) {
      devices = std::atoi(e);
      if (devices < 0 || devices > 64) {
        std::fprintf(stderr, "vt_emu: VT_EMU_DEVICES must be 0..64, got '%s'\n", e);
        std::abort();
      }
    }
    // CUDA_VISIBLE_DEVICES hides devices as with a real driver: the listed ordinals that exist,
    // up to the first invalid one ("" hides every device).
    if (const char* e = std::getenv("CUDA_VISIBLE_DEVICES")) {
      int visible = 0;
      std::string list(e);
      size_t pos = 0;
      while (pos <= list.size() && !list.empty()) {
        const size_t comma = list.find(',', pos);
        const std::string item = list.substr(pos, comma == std::string::npos ? std::string::npos
                                                                             : comma - pos);
        char* end = nullptr;
        const long d = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || d < 0 || d >= devices) break;
        ++visible;
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
      devices = visible;
    }
    const size_t host = size_t(sysconf(_SC_PHYS_PAGES)) * size_t(sysconf(_SC_PAGESIZE));
    memory = std::min<size_t>(size_t(80) << 30, host);
    if (const char* e = std::getenv("VT_EMU_DEVICE_MEMORY")) memory = parse_bytes(e, "VT_EMU_DEVICE_MEMORY");
    if (const char* e = std::getenv("VT_EMU_POISON")) poison = std::strcmp(e, "0") != 0;
  }
};

const Config& config() {
  static const Config c;
  return c;
}

thread_local int tl_device = 0;
thread_local cudaError_t tl_last = cudaSuccess;
thread_local std::string tl_detail;
thread_local cudaError_t tl_detail_code = cudaSuccess;

struct StickyState {
  std::mutex mu;
  std::vector<cudaError_t> err;
  std::vector<std::string> detail;
};
StickyState& sticky_state() {
  static StickyState* s = [] {
    auto* st = new StickyState;
    st->err.assign(size_t(std::max(1, config().devices)), cudaSuccess);
    st->detail.resize(st->err.size());
    return st;
  }();
  return *s;
}

struct ErrorText {
  cudaError_t code;
  const char* name;
  const char* text;
};
const ErrorText kErrors[] = {
    {cudaSuccess, "cudaSuccess", "no error"},
    {cudaErrorInvalidValue, "cudaErrorInvalidValue", "invalid argument"},
    {cudaErrorMemoryAllocation, "cudaErrorMemoryAllocation", "out of memory"},
    {cudaErrorInitializationError, "cudaErrorInitializationError", "initialization error"},
    {cudaErrorCudartUnloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {cudaErrorInvalidConfiguration, "cudaErrorInvalidConfiguration",
     "invalid configuration argument"},
    {cudaErrorInvalidMemcpyDirection, "cudaErrorInvalidMemcpyDirection",
     "invalid copy direction for memcpy"},
    {cudaErrorInvalidDevicePointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {cudaErrorInvalidDevice, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {cudaErrorInvalidResourceHandle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {cudaErrorNotReady, "cudaErrorNotReady", "device not ready"},
    {cudaErrorNoDevice, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {cudaErrorIllegalAddress, "cudaErrorIllegalAddress",
     "an illegal memory access was encountered"},
    {cudaErrorLaunchOutOfResources, "cudaErrorLaunchOutOfResources",
     "too many resources requested for launch"},
    {cudaErrorLaunchFailure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {cudaErrorInvalidDeviceFunction, "cudaErrorInvalidDeviceFunction",
     "invalid device function"},
    {cudaErrorNotSupported, "cudaErrorNotSupported", "operation not supported"},
    {cudaErrorUnknown, "cudaErrorUnknown", "unknown error"},
    {cudaErrorIllegalState, "cudaErrorIllegalState", "the operation is not permitted in the current state"},
    {cudaErrorStreamCaptureUnsupported, "cudaErrorStreamCaptureUnsupported",
     "operation not permitted when stream is capturing"},
    {cudaErrorStreamCaptureInvalidated, "cudaErrorStreamCaptureInvalidated",
     "operation failed due to a previous error during capture"},
    {cudaErrorStreamCaptureUnmatched, "cudaErrorStreamCaptureUnmatched",
     "capture was not initiated in this stream"},
    {cudaErrorStreamCaptureUnjoined, "cudaErrorStreamCaptureUnjoined",
     "capturing stream has unjoined work"},
    {cudaErrorStreamCaptureIsolation, "cudaErrorStreamCaptureIsolation",
     "dependency created on uncaptured work in another stream"},
    {cudaErrorStreamCaptureImplicit, "cudaErrorStreamCaptureImplicit",
     "operation would make the legacy stream depend on a capturing blocking stream"},
    {cudaErrorStreamCaptureWrongThread, "cudaErrorStreamCaptureWrongThread",
     "attempt to terminate a thread-local capture sequence from another thread"},
};

const ErrorText* find_error(cudaError_t e) {
  for (const ErrorText& t : kErrors)
    if (t.code == e) return &t;
  return nullptr;
}

}  // namespace

int device_count() { return config().devices; }
size_t device_memory_bytes() { return config().memory; }
bool poison_enabled() { return config().poison; }
int current_device() { return tl_device; }
void set_current_device(int d) { tl_device = d; }

cudaError_t fail(cudaError_t err, const std::string& detail) {
  if (err == cudaSuccess) return err;
  tl_last = err;
  tl_detail = detail;
  tl_detail_code = err;
  return err;
}

cudaError_t sticky(int d) {
  StickyState& s = sticky_state();
  std::lock_guard<std::mutex> lock(s.mu);
  return d >= 0 && size_t(d) < s.err.size() ? s.err[size_t(d)] : cudaSuccess;
}

void set_sticky(int d, cudaError_t err, const std::string& detail) {
  StickyState& s = sticky_state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (d < 0 || size_t(d) >= s.err.size() || s.err[size_t(d)] != cudaSuccess) return;
  s.err[size_t(d)] = err;
  s.detail[size_t(d)] = detail;
}

void clear_last_error() {
  tl_last = cudaSuccess;
  tl_detail.clear();
  tl_detail_code = cudaSuccess;
}

void clear_sticky(int d) {
  StickyState& s = sticky_state();
  std::lock_guard<std::mutex> lock(s.mu);
  if (d < 0 || size_t(d) >= s.err.size()) return;
  s.err[size_t(d)] = cudaSuccess;
  s.detail[size_t(d)].clear();
}

cudaError_t api_begin() {
  const cudaError_t e = sticky(tl_device);
  if (e != cudaSuccess) tl_last = e;
  return e;
}

std::string error_detail(cudaError_t err) {
  if (err == tl_detail_code && !tl_detail.empty()) return tl_detail;
  StickyState& s = sticky_state();
  std::lock_guard<std::mutex> lock(s.mu);
  const size_t d = size_t(tl_device);
  if (d < s.err.size() && s.err[d] == err) return s.detail[d];
  return "";
}

}  // namespace vt_emu

using namespace vt_emu;

extern "C" {

cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return fail(cudaErrorInvalidValue, "cudaGetDeviceCount: count is null");
  *count = device_count();
  if (*count == 0)
    return fail(cudaErrorNoDevice, "VT_EMU_DEVICES=0: the emulation presents no device");
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(device) + "): " +
                                            std::to_string(device_count()) +
                                            " emulated device(s) (VT_EMU_DEVICES)");
  set_current_device(device);
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* device) {
  if (!device) return fail(cudaErrorInvalidValue, "cudaGetDevice: device is null");
  if (device_count() == 0) return fail(cudaErrorNoDevice, "VT_EMU_DEVICES=0");
  *device = current_device();
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  const cudaError_t s = sticky(current_device());
  if (s != cudaSuccess) return s;
  const cudaError_t e = tl_last;
  tl_last = cudaSuccess;
  return e;
}

cudaError_t cudaPeekAtLastError(void) {
  const cudaError_t s = sticky(current_device());
  return s != cudaSuccess ? s : tl_last;
}

const char* cudaGetErrorName(cudaError_t error) {
  const ErrorText* t = find_error(error);
  return t ? t->name : "cudaErrorUnknown";
}

// The runtime's fixed text, followed by what the emulation knows about the failing call.
const char* cudaGetErrorString(cudaError_t error) {
  static thread_local std::string s;
  const ErrorText* t = find_error(error);
  s = t ? t->text : "unrecognized error code";
  const std::string d = error_detail(error);
  if (!d.empty()) s += " [vt_emu: " + d + "]";
  return s.c_str();
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue, "cudaRuntimeGetVersion: null");
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (!v) return fail(cudaErrorInvalidValue, "cudaDriverGetVersion: null");
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  if (cudaError_t e = api_begin()) return e;
  if (cudaError_t e = refuse_if_unsafe("cudaDeviceSynchronize")) return e;
  synchronize_device(current_device());
  return api_begin();
}

cudaError_t cudaDeviceCanAccessPeer(int* can, int device, int peer) {
  if (!can) return fail(cudaErrorInvalidValue, "cudaDeviceCanAccessPeer: null");
  if (device < 0 || device >= device_count() || peer < 0 || peer >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaDeviceCanAccessPeer: device out of range");
  *can = device != peer;
  return cudaSuccess;
}

cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags) {
  if (peer < 0 || peer >= device_count() || flags != 0)
    return fail(cudaErrorInvalidValue, "cudaDeviceEnablePeerAccess: bad peer or flags");
  return cudaSuccess;
}

}  // extern "C"
