// Fibers: the cooperative threads that emulate the GPU threads of one block. A fiber runs on its
// own stack until it switches back to the scheduler (at a barrier, a warp collective or its end);
// all fibers of a block run on one OS thread, so block-shared state can live in thread_local
// storage. x86-64 uses a hand-written switch (fiber_switch_x86_64.S, ~55 ns per switch); other
// architectures fall back to ucontext (about ten times slower).
#pragma once
#include <cstddef>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace vt_emu {

// A fiber stack: an anonymous mapping with an inaccessible guard page below it, so a stack
// overflow faults instead of corrupting the neighbouring stack.
class FiberStack {
 public:
  explicit FiberStack(size_t bytes);
  ~FiberStack();
  FiberStack(const FiberStack&) = delete;
  FiberStack& operator=(const FiberStack&) = delete;
  FiberStack(FiberStack&& o) noexcept;
  FiberStack& operator=(FiberStack&&) = delete;
  char* base() const { return base_; }
  size_t size() const { return size_; }

 private:
  char* map_ = nullptr;  // guard page + stack
  char* base_ = nullptr;
  size_t map_bytes_ = 0, size_ = 0;
};

// The saved state of a suspended fiber (or of the scheduler while a fiber runs).
struct FiberContext {
#if defined(__x86_64__)
  void* sp = nullptr;
#else
  ucontext_t uc;
#endif
};

// Prepares `ctx` so that the first fiber_switch into it calls entry(arg) on `stack`. entry must
// never return (it switches away for the last time instead).
void fiber_init(FiberContext* ctx, const FiberStack& stack, void (*entry)(void*), void* arg);

// Saves the running context in `from` and resumes `to`.
void fiber_switch(FiberContext* from, FiberContext* to);

}  // namespace vt_emu
