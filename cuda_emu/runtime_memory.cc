// Emulated CUDA runtime, part 3: device and pinned host memory, stream-ordered allocation and
// memory pools, copies and memsets. Device memory is host memory registered with its device;
// every copy checks that its pointers are what its kind says (device memory of some device,
// pinned or pageable host memory) and that the whole range lies inside one allocation.
//
// Copy semantics follow the CUDA runtime's "API synchronization behavior" page: cudaMemcpy
// returns when the copy is done; cudaMemcpyAsync from pageable host memory takes a staging copy
// of the source before returning, and to pageable host memory waits for the copy; with pinned
// host memory or device-to-device it only queues. Fresh and freed device memory is filled with
// 0xff bytes (VT_EMU_POISON=0 turns that off), so reading memory nobody wrote gives NaN.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "runtime.h"

struct CUmemPoolHandle_st {
  int device = 0;
  uint64_t release_threshold = 0;
  uint64_t used = 0, used_high = 0, reserved = 0, reserved_high = 0;
};

namespace vt_emu {

namespace {

constexpr size_t kDeviceAlign = 256;  // what cudaMalloc guarantees

struct Alloc {
  size_t size = 0;
  MemKind kind = MemKind::kDevice;
  int device = 0;
  bool owned = true;      // false for cudaHostRegister'ed ranges
  bool from_pool = false; // cudaMallocAsync
};

struct Memory {
  std::mutex mu;
  std::map<uintptr_t, Alloc> allocs;  // by base address
  std::vector<size_t> used;           // device bytes in use, per device
  std::vector<CUmemPoolHandle_st> pools;
  Memory() {
    used.assign(size_t(std::max(1, device_count())), 0);
    pools.resize(used.size());
    for (size_t d = 0; d < pools.size(); ++d) pools[d].device = int(d);
  }
};

Memory& M() {
  static Memory* m = new Memory;  // never destroyed: stream workers may free after main returns
  return *m;
}

std::string hex(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

// Caller holds M().mu.
Region classify_locked(const void* p, size_t bytes) {
  Region r;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  auto& allocs = M().allocs;
  auto it = allocs.upper_bound(a);
  if (it == allocs.begin()) return r;
  --it;
  const uintptr_t base = it->first;
  const Alloc& al = it->second;
  const bool inside = bytes == 0 ? a <= base + al.size : a + bytes <= base + al.size;
  if (!inside) return r;
  r.known = true;
  r.kind = al.kind;
  r.device = al.device;
  r.base = base;
  r.size = al.size;
  return r;
}

cudaError_t device_alloc(void** out, size_t bytes, bool from_pool, const char* api) {
  if (cudaError_t e = api_begin()) return e;
  if (!out) return fail(cudaErrorInvalidValue, std::string(api) + ": pointer is null");
  if (device_count() == 0) return fail(cudaErrorNoDevice, "VT_EMU_DEVICES=0");
  *out = nullptr;
  if (bytes == 0) return cudaSuccess;
  const int d = current_device();
  const size_t rounded = (bytes + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign;
  {
    Memory& m = M();
    std::lock_guard<std::mutex> lock(m.mu);
    if (m.used[size_t(d)] + rounded > device_memory_bytes())
      return fail(cudaErrorMemoryAllocation,
                  std::string(api) + ": " + std::to_string(bytes) + " bytes do not fit: " +
                      std::to_string(m.used[size_t(d)]) + " of " +
                      std::to_string(device_memory_bytes()) +
                      " bytes of the emulated device are in use (VT_EMU_DEVICE_MEMORY)");
  }
  void* p = std::aligned_alloc(kDeviceAlign, rounded);
  if (!p)
    return fail(cudaErrorMemoryAllocation,
                std::string(api) + ": the host has no " + std::to_string(rounded) + " bytes left");
  if (poison_enabled()) std::memset(p, 0xff, rounded);
  Memory& m = M();
  std::lock_guard<std::mutex> lock(m.mu);
  m.allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{rounded, MemKind::kDevice, d, true, from_pool};
  m.used[size_t(d)] += rounded;
  if (from_pool) {
    CUmemPoolHandle_st& pool = m.pools[size_t(d)];
    pool.used += rounded;
    pool.reserved += rounded;
    pool.used_high = std::max(pool.used_high, pool.used);
    pool.reserved_high = std::max(pool.reserved_high, pool.reserved);
  }
  *out = p;
  return cudaSuccess;
}

// Unregisters a device allocation; the caller frees it (after poisoning) outside the lock.
cudaError_t take_device(void* p, bool /*from_pool_ok*/, const char* api, size_t* size) {
  Memory& m = M();
  std::lock_guard<std::mutex> lock(m.mu);
  auto it = m.allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == m.allocs.end() || it->second.kind != MemKind::kDevice)
    return fail(cudaErrorInvalidValue,
                std::string(api) + ": " + hex(p) + " is not the start of a device allocation "
                                                  "(freed twice, or never allocated)");
  const Alloc al = it->second;
  m.allocs.erase(it);
  m.used[size_t(al.device)] -= al.size;
  if (al.from_pool) {
    m.pools[size_t(al.device)].used -= al.size;
    m.pools[size_t(al.device)].reserved -= al.size;
  }
  *size = al.size;
  return cudaSuccess;
}

void release_bytes(void* p, size_t size) {
  if (poison_enabled()) std::memset(p, 0xff, size);
  std::free(p);
}

enum class Side { kHostPageable, kHostPinned, kDevice };

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "cudaMemcpyHostToHost";
    case cudaMemcpyHostToDevice: return "cudaMemcpyHostToDevice";
    case cudaMemcpyDeviceToHost: return "cudaMemcpyDeviceToHost";
    case cudaMemcpyDeviceToDevice: return "cudaMemcpyDeviceToDevice";
    case cudaMemcpyDefault: return "cudaMemcpyDefault";
  }
  return "an unknown cudaMemcpyKind";
}

// Checks one side of a copy: [p, p + span) must be device memory when `device`, host memory
// otherwise (cudaMemcpyDefault: whatever it is). Sets *side.
cudaError_t check_side(const void* p, size_t span, int want /*1 device, 0 host, -1 any*/,
                       const char* what, const std::string& api, cudaMemcpyKind kind,
                       Side* side) {
  if (p == nullptr) return fail(cudaErrorInvalidValue, api + ": " + what + " is null");
  Region r;
  {
    std::lock_guard<std::mutex> lock(M().mu);
    r = classify_locked(p, span);
  }
  if (!r.known) {
    // Not inside one allocation: pageable host memory, unless it overlaps device memory.
    Region head;
    {
      std::lock_guard<std::mutex> lock(M().mu);
      head = classify_locked(p, 1);
    }
    if (head.known)
      return fail(cudaErrorInvalidValue,
                  api + ": " + what + " range [" + hex(p) + ", +" + std::to_string(span) +
                      ") runs past the end of its allocation (" + describe(head) + ", " +
                      std::to_string(head.size) + " bytes at " +
                      hex(reinterpret_cast<void*>(head.base)) + ")");
    if (want == 1)
      return fail(cudaErrorInvalidValue, api + ": " + what + " " + hex(p) +
                                             " is not device memory (kind " + kind_name(kind) +
                                             ")");
    *side = Side::kHostPageable;
    return cudaSuccess;
  }
  if (r.kind == MemKind::kPinned) {
    if (want == 1)
      return fail(cudaErrorInvalidValue, api + ": " + what + " " + hex(p) +
                                             " is pinned host memory, not device memory (kind " +
                                             kind_name(kind) + ")");
    *side = Side::kHostPinned;
    return cudaSuccess;
  }
  if (want == 0)
    return fail(cudaErrorInvalidValue, api + ": " + what + " " + hex(p) + " is " + describe(r) +
                                           ", not host memory (kind " + kind_name(kind) + ")");
  *side = Side::kDevice;
  return cudaSuccess;
}

struct CopyPlan {
  Side dst = Side::kDevice, src = Side::kDevice;
};

cudaError_t check_copy(void* dst, size_t dspan, const void* src, size_t sspan,
                       cudaMemcpyKind kind, const std::string& api, CopyPlan* plan) {
  int want_dst = -1, want_src = -1;
  switch (kind) {
    case cudaMemcpyHostToHost: want_dst = 0; want_src = 0; break;
    case cudaMemcpyHostToDevice: want_dst = 1; want_src = 0; break;
    case cudaMemcpyDeviceToHost: want_dst = 0; want_src = 1; break;
    case cudaMemcpyDeviceToDevice: want_dst = 1; want_src = 1; break;
    case cudaMemcpyDefault: break;
    default: return fail(cudaErrorInvalidMemcpyDirection, api + ": unknown cudaMemcpyKind");
  }
  if (cudaError_t e = check_side(dst, dspan, want_dst, "destination", api, kind, &plan->dst))
    return e;
  return check_side(src, sspan, want_src, "source", api, kind, &plan->src);
}

// Queues a copy on `h` with the documented synchronization; `copy` does the bytes.
cudaError_t run_copy(cudaStream_t h, const CopyPlan& plan, bool sync_call, const void* src,
                     size_t staged_bytes, std::function<void(const void*)> copy,
                     const std::string& api) {
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, api + ": not a live stream");
  if (sync_call) {
    if (cudaError_t e = refuse_if_unsafe(api)) return e;
  } else if ((plan.src == Side::kHostPageable || plan.dst == Side::kHostPageable) &&
             is_capturing(s)) {
    // A graph cannot copy from or to pageable memory (the runtime stages or waits for those).
    return refuse_if_capturing(s, api + " from or to pageable host memory");
  }
  std::shared_ptr<std::vector<unsigned char>> staging;
  const void* from = src;
  if (!sync_call && plan.src == Side::kHostPageable && plan.dst != Side::kHostPageable) {
    // Pageable source: the runtime takes a staging copy before returning.
    staging = std::make_shared<std::vector<unsigned char>>(
        static_cast<const unsigned char*>(src), static_cast<const unsigned char*>(src) + staged_bytes);
    from = staging->data();
  }
  const uint64_t seq = enqueue(s, [copy, from, staging] { copy(from); });
  const bool wait = sync_call || plan.dst == Side::kHostPageable ||
                    (plan.src == Side::kHostPageable && plan.dst == Side::kHostPageable);
  if (wait) {
    wait_for(s, seq);
    return api_begin();
  }
  return cudaSuccess;
}

cudaError_t memcpy_impl(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                        cudaStream_t h, bool sync_call, const char* api) {
  if (cudaError_t e = api_begin()) return e;
  if (n == 0) return cudaSuccess;
  CopyPlan plan;
  if (cudaError_t e = check_copy(dst, n, src, n, kind, api, &plan)) return e;
  return run_copy(h, plan, sync_call, src, n,
                  [dst, n](const void* from) { std::memmove(dst, from, n); }, api);
}

cudaError_t memcpy2d_impl(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                          size_t height, cudaMemcpyKind kind, cudaStream_t h, bool sync_call,
                          const char* api) {
  if (cudaError_t e = api_begin()) return e;
  if (width == 0 || height == 0) return cudaSuccess;
  if (width > dpitch || width > spitch)
    return fail(cudaErrorInvalidValue, std::string(api) + ": width exceeds a pitch");
  const size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  CopyPlan plan;
  if (cudaError_t e = check_copy(dst, dspan, src, sspan, kind, api, &plan)) return e;
  return run_copy(h, plan, sync_call, src, sspan,
                  [=](const void* from) {
                    for (size_t r = 0; r < height; ++r)
                      std::memmove(static_cast<char*>(dst) + r * dpitch,
                                   static_cast<const char*>(from) + r * spitch, width);
                  },
                  api);
}

cudaError_t memset_impl(void* p, int value, size_t n, cudaStream_t h, bool legacy_call, const char* api) {
  if (cudaError_t e = api_begin()) return e;
  if (n == 0) return cudaSuccess;
  Side side;
  if (cudaError_t e = check_side(p, n, 1, "destination", api, cudaMemcpyHostToDevice, &side))
    return e;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, std::string(api) + ": not a live stream");
  if (legacy_call)  // cudaMemset: on the legacy stream, an unsafe call during capture
    if (cudaError_t e = refuse_if_unsafe(api)) return e;
  enqueue(s, [p, value, n] { std::memset(p, value, n); });
  return cudaSuccess;
}

}  // namespace

void free_device_now(void* p) {
  {
    Memory& m = M();
    std::lock_guard<std::mutex> lock(m.mu);
    if (!m.allocs.count(reinterpret_cast<uintptr_t>(p))) return;  // freed already: no error
  }
  size_t size = 0;
  if (take_device(p, true, "free_device_now", &size) == cudaSuccess) release_bytes(p, size);
}

Region classify(const void* p, size_t bytes) {
  std::lock_guard<std::mutex> lock(M().mu);
  return classify_locked(p, bytes);
}

std::string describe(const Region& r) {
  if (!r.known) return "pageable host memory";
  if (r.kind == MemKind::kPinned) return "pinned host memory";
  return "device memory of device " + std::to_string(r.device);
}

}  // namespace vt_emu

using namespace vt_emu;

extern "C" {

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (cudaError_t e = refuse_if_unsafe("cudaMalloc")) return e;
  return device_alloc(p, bytes, false, "cudaMalloc");
}

// cudaFree synchronizes the device before it frees, as the CUDA runtime does.
cudaError_t cudaFree(void* p) {
  if (p == nullptr) return cudaSuccess;
  if (cudaError_t e = api_begin()) return e;
  if (cudaError_t e = refuse_if_unsafe("cudaFree")) return e;
  synchronize_device(current_device());
  size_t size = 0;
  if (cudaError_t e = take_device(p, true, "cudaFree", &size)) return e;
  release_bytes(p, size);
  return cudaSuccess;
}

// Waits for the device's queued work (a faulted device runs none), frees every device allocation
// of the current device and clears its sticky error. Pointers into freed memory are invalid.
cudaError_t cudaDeviceReset(void) {
  const int d = current_device();
  synchronize_device(d);
  std::vector<std::pair<void*, size_t>> freed;
  {
    Memory& m = M();
    std::lock_guard<std::mutex> lock(m.mu);
    for (auto it = m.allocs.begin(); it != m.allocs.end();) {
      if (it->second.kind == MemKind::kDevice && it->second.device == d) {
        freed.emplace_back(reinterpret_cast<void*>(it->first), it->second.size);
        it = m.allocs.erase(it);
      } else {
        ++it;
      }
    }
    m.used[size_t(d)] = 0;
    m.pools[size_t(d)].used = m.pools[size_t(d)].reserved = 0;
  }
  for (auto& [p, size] : freed) release_bytes(p, size);
  clear_sticky(d);
  clear_last_error();
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t h) {
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaMallocAsync: not a live stream");
  const cudaError_t e = device_alloc(p, bytes, true, "cudaMallocAsync");
  if (e == cudaSuccess && *p && is_capturing(s))
    capture_note_allocation(s, *p, (bytes + kDeviceAlign - 1) / kDeviceAlign * kDeviceAlign);
  return e;
}

// The block goes back only after the work queued before on the stream has run.
cudaError_t cudaFreeAsync(void* p, cudaStream_t h) {
  if (p == nullptr) return cudaSuccess;
  if (cudaError_t e = api_begin()) return e;
  Stream* s = resolve(h);
  if (!s) return fail(cudaErrorInvalidResourceHandle, "cudaFreeAsync: not a live stream");
  bool in_capture = false;
  if (cudaError_t e = capture_free(s, p, &in_capture)) return e;
  if (in_capture) return cudaSuccess;  // a block of the capture: its graph frees it
  // Unregistered now (a later use is an error), released after the queued work has run.
  size_t size = 0;
  if (cudaError_t e = take_device(p, true, "cudaFreeAsync", &size)) return e;
  enqueue(s, [p, size] { release_bytes(p, size); });
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) {
  return cudaHostAlloc(p, bytes, cudaHostAllocDefault);
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags) {
  if (cudaError_t e = refuse_if_unsafe("cudaHostAlloc")) return e;
  if (cudaError_t e = api_begin()) return e;
  if (!p) return fail(cudaErrorInvalidValue, "cudaHostAlloc: pointer is null");
  (void)flags;
  const size_t rounded = std::max<size_t>(4096, (bytes + 4095) / 4096 * 4096);
  void* q = std::aligned_alloc(4096, rounded);
  if (!q) return fail(cudaErrorMemoryAllocation, "cudaHostAlloc: out of host memory");
  std::lock_guard<std::mutex> lock(M().mu);
  M().allocs[reinterpret_cast<uintptr_t>(q)] = Alloc{rounded, MemKind::kPinned, current_device(), true, false};
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* p) {
  if (cudaError_t e = refuse_if_unsafe("cudaFreeHost")) return e;
  if (p == nullptr) return cudaSuccess;
  if (cudaError_t e = api_begin()) return e;
  synchronize_device(current_device());
  std::lock_guard<std::mutex> lock(M().mu);
  auto it = M().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == M().allocs.end() || it->second.kind != MemKind::kPinned || !it->second.owned)
    return fail(cudaErrorInvalidValue, "cudaFreeHost: not memory from cudaMallocHost/cudaHostAlloc");
  M().allocs.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaHostRegister(void* p, size_t bytes, unsigned int flags) {
  (void)flags;
  if (!p || bytes == 0) return fail(cudaErrorInvalidValue, "cudaHostRegister: empty range");
  std::lock_guard<std::mutex> lock(M().mu);
  if (classify_locked(p, 1).known)
    return fail(cudaErrorHostMemoryAlreadyRegistered, "cudaHostRegister: already registered");
  M().allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{bytes, MemKind::kPinned, 0, false, false};
  return cudaSuccess;
}

cudaError_t cudaHostUnregister(void* p) {
  std::lock_guard<std::mutex> lock(M().mu);
  auto it = M().allocs.find(reinterpret_cast<uintptr_t>(p));
  if (it == M().allocs.end() || it->second.owned)
    return fail(cudaErrorHostMemoryNotRegistered, "cudaHostUnregister: not registered");
  M().allocs.erase(it);
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* a, const void* p) {
  if (!a) return fail(cudaErrorInvalidValue, "cudaPointerGetAttributes: null");
  const Region r = classify(p, 0);
  std::memset(a, 0, sizeof(*a));
  if (!r.known) {
    a->type = cudaMemoryTypeUnregistered;
    a->device = -2;
    a->hostPointer = const_cast<void*>(p);
    return cudaSuccess;
  }
  a->type = r.kind == MemKind::kPinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
  a->device = r.device;
  a->devicePointer = const_cast<void*>(p);
  a->hostPointer = r.kind == MemKind::kPinned ? const_cast<void*>(p) : nullptr;
  return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_b, size_t* total_b) {
  if (cudaError_t e = api_begin()) return e;
  std::lock_guard<std::mutex> lock(M().mu);
  const size_t used = M().used[size_t(current_device())];
  if (total_b) *total_b = device_memory_bytes();
  if (free_b) *free_b = device_memory_bytes() - std::min(used, device_memory_bytes());
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (!pool || device < 0 || device >= device_count())
    return fail(cudaErrorInvalidDevice, "cudaDeviceGetDefaultMemPool: bad device");
  *pool = &M().pools[size_t(device)];
  return cudaSuccess;
}

cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device) {
  return cudaDeviceGetDefaultMemPool(pool, device);
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (!pool || !value) return fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: null");
  std::lock_guard<std::mutex> lock(M().mu);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold:
      pool->release_threshold = *static_cast<uint64_t*>(value);
      return cudaSuccess;
    case cudaMemPoolAttrUsedMemHigh:
      pool->used_high = pool->used;
      return cudaSuccess;
    case cudaMemPoolAttrReservedMemHigh:
      pool->reserved_high = pool->reserved;
      return cudaSuccess;
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies:
      return cudaSuccess;
    default:
      return fail(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: attribute not emulated");
  }
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  if (!pool || !value) return fail(cudaErrorInvalidValue, "cudaMemPoolGetAttribute: null");
  std::lock_guard<std::mutex> lock(M().mu);
  uint64_t v = 0;
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: v = pool->release_threshold; break;
    case cudaMemPoolAttrUsedMemCurrent: v = pool->used; break;
    case cudaMemPoolAttrUsedMemHigh: v = pool->used_high; break;
    case cudaMemPoolAttrReservedMemCurrent: v = pool->reserved; break;
    case cudaMemPoolAttrReservedMemHigh: v = pool->reserved_high; break;
    default: return fail(cudaErrorInvalidValue, "cudaMemPoolGetAttribute: attribute not emulated");
  }
  *static_cast<uint64_t*>(value) = v;
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t) {
  return pool ? cudaSuccess : fail(cudaErrorInvalidValue, "cudaMemPoolTrimTo: null pool");
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  return memcpy_impl(dst, src, n, kind, nullptr, true, "cudaMemcpy");
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind kind,
                            cudaStream_t s) {
  return memcpy_impl(dst, src, n, kind, s, false, "cudaMemcpyAsync");
}
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                         size_t height, cudaMemcpyKind kind) {
  return memcpy2d_impl(dst, dpitch, src, spitch, width, height, kind, nullptr, true,
                       "cudaMemcpy2D");
}
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch,
                              size_t width, size_t height, cudaMemcpyKind kind, cudaStream_t s) {
  return memcpy2d_impl(dst, dpitch, src, spitch, width, height, kind, s, false,
                       "cudaMemcpy2DAsync");
}
cudaError_t cudaMemcpyPeer(void* dst, int, const void* src, int, size_t n) {
  return memcpy_impl(dst, src, n, cudaMemcpyDeviceToDevice, nullptr, true, "cudaMemcpyPeer");
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int, const void* src, int, size_t n, cudaStream_t s) {
  return memcpy_impl(dst, src, n, cudaMemcpyDeviceToDevice, s, false, "cudaMemcpyPeerAsync");
}

// cudaMemset is asynchronous with respect to the host for device memory (it runs on the NULL
// stream), like cudaMemsetAsync on a stream.
cudaError_t cudaMemset(void* p, int value, size_t n) {
  return memset_impl(p, value, n, nullptr, true, "cudaMemset");
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
  return memset_impl(p, value, n, s, false, "cudaMemsetAsync");
}

}  // extern "C"
