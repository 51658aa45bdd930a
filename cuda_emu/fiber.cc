// Fiber stacks and the first frame of a fiber (see fiber.h).
#include "fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
extern "C" void vt_emu_fiber_switch(void** save_sp, void* load_sp);
extern "C" void vt_emu_fiber_start();
#endif

namespace vt_emu {

FiberStack::FiberStack(size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  size_ = (bytes + page - 1) / page * page;
  map_bytes_ = size_ + page;
  void* m = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "vt_emu: cannot map a %zu-byte fiber stack\n", map_bytes_);
    std::abort();
  }
  map_ = static_cast<char*>(m);
  mprotect(map_, page, PROT_NONE);  // guard page at the low end (stacks grow down)
  base_ = map_ + page;
}

FiberStack::FiberStack(FiberStack&& o) noexcept
    : map_(o.map_), base_(o.base_), map_bytes_(o.map_bytes_), size_(o.size_) {
  o.map_ = nullptr;
  o.base_ = nullptr;
}

FiberStack::~FiberStack() {
  if (map_) munmap(map_, map_bytes_);
}

#if defined(__x86_64__)

void fiber_init(FiberContext* ctx, const FiberStack& stack, void (*entry)(void*), void* arg) {
  // The frame vt_emu_fiber_switch pops: r15 r14 r13 r12 rbx rbp, then the return address. After
  // the pops and `ret`, rsp = frame + 56 must be 16-byte aligned so that the `call` in
  // vt_emu_fiber_start leaves the entry function with the ABI's alignment.
  const uintptr_t top = reinterpret_cast<uintptr_t>(stack.base() + stack.size()) & ~uintptr_t(15);
  uint64_t* frame = reinterpret_cast<uint64_t*>(top - 16 - 56);
  frame[0] = 0;                                                // r15
  frame[1] = 0;                                                // r14
  frame[2] = reinterpret_cast<uint64_t>(arg);                  // r13
  frame[3] = reinterpret_cast<uint64_t>(entry);                // r12
  frame[4] = 0;                                                // rbx
  frame[5] = 0;                                                // rbp
  frame[6] = reinterpret_cast<uint64_t>(&vt_emu_fiber_start);  // return address
  ctx->sp = frame;
}

void fiber_switch(FiberContext* from, FiberContext* to) { vt_emu_fiber_switch(&from->sp, to->sp); }

#else  // ucontext fallback

namespace {
void trampoline(unsigned hi, unsigned lo, unsigned ehi, unsigned elo) {
  void* arg = reinterpret_cast<void*>((uintptr_t(hi) << 32) | lo);
  auto entry = reinterpret_cast<void (*)(void*)>((uintptr_t(ehi) << 32) | elo);
  entry(arg);
  std::abort();
}
}  // namespace

void fiber_init(FiberContext* ctx, const FiberStack& stack, void (*entry)(void*), void* arg) {
  getcontext(&ctx->uc);
  ctx->uc.uc_stack.ss_sp = stack.base();
  ctx->uc.uc_stack.ss_size = stack.size();
  ctx->uc.uc_link = nullptr;
  const uintptr_t a = reinterpret_cast<uintptr_t>(arg), e = reinterpret_cast<uintptr_t>(entry);
  makecontext(&ctx->uc, reinterpret_cast<void (*)()>(trampoline), 4, unsigned(a >> 32),
              unsigned(a), unsigned(e >> 32), unsigned(e));
}

void fiber_switch(FiberContext* from, FiberContext* to) { swapcontext(&from->uc, &to->uc); }

#endif

}  // namespace vt_emu
