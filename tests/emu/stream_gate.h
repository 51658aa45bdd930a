// A gate a stream waits on (enqueued with cudaLaunchHostFunc) until the test opens it: holds a
// stream's later work back so that a test can look at the host side before the device runs it.
#pragma once

#include <condition_variable>
#include <mutex>

struct StreamGate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  static void wait(void* p) {
    auto* g = static_cast<StreamGate*>(p);
    std::unique_lock<std::mutex> lock(g->mu);
    g->cv.wait(lock, [&] { return g->open; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu);
    open = true;
    cv.notify_all();
  }
};
