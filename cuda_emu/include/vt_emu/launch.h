// Kernel launches in the CUDA emulation: VT_LAUNCH(kernel, grid, block, smem, stream, args...)
// (kernels/launch.cuh) binds the arguments (converted to the kernel's parameter types, as a CUDA launch does) and
// queues the kernel on the stream of the emulated runtime, which checks the configuration the
// way the CUDA runtime does (a bad one sets the error cudaGetLastError returns and runs
// nothing) and that every pointer argument is device memory (or pinned host memory).
// VT_DYNAMIC_SHARED(T, name) is `extern __shared__ T name[]`.
#pragma once
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "vt_emu/simt.h"

namespace vt_emu {

// Implemented by the emulated runtime (cuda_emu/runtime_launch.cc).
void submit_kernel(const void* func, const char* name, dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, std::function<void()> body,
                   std::vector<const void*> pointer_args);

template <class... P>
class Launch {
 public:
  Launch(void (*fn)(P...), const char* name, dim3 grid, dim3 block, size_t smem, cudaStream_t s)
      : fn_(fn), name_(name), grid_(grid), block_(block), smem_(smem), stream_(s) {}

  template <class... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "kernel launched with the wrong number of arguments");
    using Bound = std::tuple<std::decay_t<P>...>;
    auto bound = std::make_shared<Bound>(std::forward<A>(args)...);
    std::vector<const void*> pointers;
    std::apply([&](const auto&... a) { (collect(a, pointers), ...); }, *bound);
    void (*fn)(P...) = fn_;
    submit_kernel(reinterpret_cast<const void*>(fn_), name_, grid_, block_, smem_, stream_,
                  [fn, bound] { std::apply(fn, *bound); }, std::move(pointers));
  }

 private:
  template <class T>
  static void collect(const T& a, std::vector<const void*>& out) {
    if constexpr (std::is_pointer_v<T>) out.push_back(static_cast<const void*>(a));
  }
  void (*fn_)(P...);
  const char* name_;
  dim3 grid_, block_;
  size_t smem_;
  cudaStream_t stream_;
};

template <class... P>
Launch<P...> make_launch(void (*fn)(P...), const char* name, dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream) {
  return Launch<P...>(fn, name, grid, block, smem, stream);
}

}  // namespace vt_emu

#define VT_LAUNCH(kernel, grid, block, smem, stream, ...) \
  ::vt_emu::make_launch(kernel, #kernel, grid, block, smem, stream)(__VA_ARGS__)
#define VT_DYNAMIC_SHARED(T, name) T* const name = ::vt_emu::dynamic_shared<T>()
