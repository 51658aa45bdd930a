// Emulated CUDA runtime, part 4: kernel launches (configuration checks, pointer-argument checks,
// queueing on the stream), function attributes, and what the emulated device reports about
// itself (cudaGetDeviceProperties, cudaDeviceGetAttribute). The device presents the limits of an
// H100 SXM (compute capability 9.0, 132 SMs, 227 KiB of opt-in shared memory per block), so a
// launch that an H100 refuses is refused here, under a name that says it is emulated.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <map>
#include <mutex>
#include <string>

#include "runtime.h"
#include "simt_exec.h"
#include "vt_emu/launch.h"

namespace vt_emu {

namespace {

constexpr int kMaxThreadsPerBlock = 1024;
constexpr size_t kDefaultSmem = 48 * 1024;        // without opting in
constexpr size_t kOptinSmem = 227 * 1024;         // sharedMemPerBlockOptin of an H100
constexpr size_t kSmemPerSm = 228 * 1024;
constexpr int kSms = 132;
constexpr const char* kName = "vtrain CUDA emulation (SIMT on the CPU, H100 limits)";

struct FuncAttrs {
  int max_dynamic_smem = int(kDefaultSmem);
  int carveout = -1;
};

std::mutex g_func_mu;
std::map<const void*, FuncAttrs>& func_attrs() {
  static auto* m = new std::map<const void*, FuncAttrs>;
  return *m;
}

// VT_EMU_PROFILE=1: time per kernel, printed to stderr at exit (where the emulation spends its
// time; the numbers say nothing about a GPU).
struct KernelProfile {
  uint64_t launches = 0, threads = 0;
  double seconds = 0;
};
std::mutex g_prof_mu;
std::map<std::string, KernelProfile>* g_prof = nullptr;

void print_profile() {
  std::lock_guard<std::mutex> lock(g_prof_mu);
  std::vector<std::pair<std::string, KernelProfile>> rows(g_prof->begin(), g_prof->end());
  std::sort(rows.begin(), rows.end(),
            [](auto& a, auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (auto& r : rows) total += r.second.seconds;
  std::fprintf(stderr, "vt_emu profile: %.3f s in kernels\n%-48s %9s %12s %9s %6s\n", total,
               "kernel", "launches", "threads", "seconds", "share");
  for (auto& [name, p] : rows)
    std::fprintf(stderr, "%-48s %9llu %12llu %9.3f %5.1f%%\n", name.c_str(),
                 (unsigned long long)p.launches, (unsigned long long)p.threads, p.seconds,
                 total > 0 ? 100.0 * p.seconds / total : 0.0);
}

bool profiling() {
  static const bool on = [] {
    const char* e = std::getenv("VT_EMU_PROFILE");
    if (!e || std::strcmp(e, "1") != 0) return false;
    g_prof = new std::map<std::string, KernelProfile>;
    std::atexit(print_profile);
    return true;
  }();
  return on;
}

std::string dims(dim3 d) {
  // snprintf, not `"(" + std::to_string(...) + ...`: g++ 12 at -O3 warns -Wrestrict on a
  // string literal + std::string there (a false positive, GCC bug 105329).
  char buf[64];
  std::snprintf(buf, sizeof buf, "(%u,%u,%u)", d.x, d.y, d.z);
  return buf;
}

}  // namespace

void submit_kernel(const void* func, const char* name, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, std::function<void()> body,
                   std::vector<const void*> pointer_args) {
  if (api_begin() != cudaSuccess) return;
  const std::string who = std::string("launch of ") + name;
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 ||
      grid.z == 0 || block.x > 1024 || block.y > 1024 || block.z > 64 ||
      threads > uint64_t(kMaxThreadsPerBlock) || grid.y > 65535 || grid.z > 65535) {
    fail(cudaErrorInvalidConfiguration,
         who + ": grid " + dims(grid) + " x block " + dims(block) +
             " is outside the device limits (block <= 1024 threads, (1024,1024,64); grid y,z <= 65535)");
    return;
  }
  int max_smem;
  {
    std::lock_guard<std::mutex> lock(g_func_mu);
    auto it = func_attrs().find(func);
    max_smem = it == func_attrs().end() ? int(kDefaultSmem) : it->second.max_dynamic_smem;
  }
  if (smem > size_t(max_smem)) {
    fail(cudaErrorInvalidValue,
         who + ": " + std::to_string(smem) + " bytes of dynamic shared memory, the function allows " +
             std::to_string(max_smem) +
             " (raise it with cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize))");
    return;
  }
  Stream* s = resolve(stream);
  if (!s) {
    fail(cudaErrorInvalidResourceHandle, who + ": not a live stream");
    return;
  }
  const int dev = stream_device(s);
  for (size_t i = 0; i < pointer_args.size(); ++i) {
    const void* p = pointer_args[i];
    if (p == nullptr) continue;
    const Region r = classify(p, 0);
    const bool ok = r.known && (r.kind == MemKind::kPinned || r.device == dev ||
                                device_count() > 1 /* peer access */);
    if (!ok) {
      // The GPU would fault when the kernel touches it: an asynchronous, sticky error.
      const std::string msg = who + ": pointer argument " + std::to_string(i) + " (" +
                              std::to_string(reinterpret_cast<uintptr_t>(p)) + ") is " +
                              describe(r) + ", which the kernel cannot access on device " +
                              std::to_string(dev);
      std::fprintf(stderr, "vt_emu: kernel fault: %s\n", msg.c_str());
      set_sticky(dev, cudaErrorIllegalAddress, msg);
      return;
    }
  }
  auto run = std::make_shared<KernelRun>();
  run->name = name;
  run->grid = grid;
  run->block = block;
  run->dyn_smem = smem;
  run->body = std::move(body);
  const bool prof = profiling();
  enqueue(s, [run, dev, prof] {
    const auto t0 = std::chrono::steady_clock::now();
    const std::string fault = run_kernel(*run);
    if (prof) {
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::lock_guard<std::mutex> lock(g_prof_mu);
      KernelProfile& p = (*g_prof)[run->name];
      ++p.launches;
      p.threads += uint64_t(run->grid.x) * run->grid.y * run->grid.z * run->block.x *
                   run->block.y * run->block.z;
      p.seconds += sec;
    }
    if (!fault.empty()) {
      std::fprintf(stderr, "vt_emu: kernel fault: %s\n", fault.c_str());
      std::fflush(stderr);
      set_sticky(dev, cudaErrorLaunchFailure, fault);
    }
  });
}

}  // namespace vt_emu

using namespace vt_emu;

extern "C" {

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (cudaError_t e = api_begin()) return e;
  if (!func) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncSetAttribute: null function");
  std::lock_guard<std::mutex> lock(g_func_mu);
  FuncAttrs& a = func_attrs()[func];
  switch (attr) {
    case cudaFuncAttributeMaxDynamicSharedMemorySize:
      if (value < 0 || size_t(value) > kOptinSmem)
        return fail(cudaErrorInvalidValue,
                    "cudaFuncSetAttribute: " + std::to_string(value) +
                        " bytes of dynamic shared memory exceed the device's opt-in limit " +
                        std::to_string(kOptinSmem));
      a.max_dynamic_smem = value;
      return cudaSuccess;
    case cudaFuncAttributePreferredSharedMemoryCarveout:
      a.carveout = value;
      return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue, "cudaFuncSetAttribute: attribute not emulated");
  }
}

cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (!attr || !func) return fail(cudaErrorInvalidDeviceFunction, "cudaFuncGetAttributes: null");
  std::memset(attr, 0, sizeof(*attr));
  std::lock_guard<std::mutex> lock(g_func_mu);
  auto it = func_attrs().find(func);
  attr->maxDynamicSharedSizeBytes = it == func_attrs().end() ? int(kDefaultSmem)
                                                             : it->second.max_dynamic_smem;
  attr->maxThreadsPerBlock = kMaxThreadsPerBlock;
  attr->ptxVersion = 90;
  attr->binaryVersion = 90;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (!value) return fail(cudaErrorInvalidValue, "cudaDeviceGetAttribute: null");
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaDeviceGetAttribute: device " + std::to_string(device));
  switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = kMaxThreadsPerBlock; break;
    case cudaDevAttrMaxBlockDimX: *value = 1024; break;
    case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY: *value = 65535; break;
    case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(kDefaultSmem); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(kOptinSmem); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = int(kSmemPerSm); break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = kSms; break;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMaxRegistersPerBlock: *value = 65536; break;
    case cudaDevAttrMaxThreadsPerMultiProcessor: *value = 2048; break;
    case cudaDevAttrL2CacheSize: *value = 50 * 1024 * 1024; break;
    case cudaDevAttrMemoryPoolsSupported: *value = 1; break;
    case cudaDevAttrUnifiedAddressing: *value = 1; break;
    case cudaDevAttrConcurrentKernels: *value = 1; break;
    case cudaDevAttrIntegrated: *value = 0; break;
    case cudaDevAttrCanMapHostMemory: *value = 1; break;
    default:
      return fail(cudaErrorInvalidValue,
                  "cudaDeviceGetAttribute: attribute " + std::to_string(int(attr)) +
                      " is not emulated (add it to cuda_emu/runtime_launch.cc)");
  }
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (!prop) return fail(cudaErrorInvalidValue, "cudaGetDeviceProperties: null");
  if (device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaGetDeviceProperties: device " + std::to_string(device));
  std::memset(prop, 0, sizeof(*prop));
  std::snprintf(prop->name, sizeof(prop->name), "%s", kName);
  prop->totalGlobalMem = device_memory_bytes();
  prop->sharedMemPerBlock = kDefaultSmem;
  prop->sharedMemPerBlockOptin = kOptinSmem;
  prop->sharedMemPerMultiprocessor = kSmemPerSm;
  prop->regsPerBlock = 65536;
  prop->regsPerMultiprocessor = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = kMaxThreadsPerBlock;
  prop->maxThreadsDim[0] = 1024;
  prop->maxThreadsDim[1] = 1024;
  prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 2147483647;
  prop->maxGridSize[1] = 65535;
  prop->maxGridSize[2] = 65535;
  prop->major = 9;
  prop->minor = 0;
  prop->multiProcessorCount = kSms;
  prop->maxThreadsPerMultiProcessor = 2048;
  prop->l2CacheSize = 50 * 1024 * 1024;
  prop->unifiedAddressing = 1;
  prop->memoryPoolsSupported = 1;
  prop->concurrentKernels = 1;
  prop->canMapHostMemory = 1;
  prop->pciDeviceID = device;
  return cudaSuccess;
}

}  // extern "C"
