// attention_bench: times the CUDA attention kernels on one device, the tensor-core flash kernels
// (kernels/attention_tc.cuh) against the reference kernels (kernels/attention.cuh) in the same
// run, bf16, forward and backward, and prints milliseconds per call, TFLOP/s and the ratio. The
// forward and backward also run as attention_tc_forward_v1 / attention_tc_backward_v1, the
// kernels the 2026-11-26 window measured (176 / 152 TFLOP/s at W 2048 on an H200), so old and new
// are compared on the same GPU in the same call.
// For the GPU window (docs/gpu-session.md, scripts/device_window.sh); on the CUDA emulation
// it runs too (tiny shapes only: the numbers then say nothing about a GPU). After the timings it
// compares the two kernels' outputs (forward out; backward dq, dk, dv) on the same inputs and
// prints the largest difference, absolute and relative to the largest reference value.
// vtrain-tool: kernels (linked without the engine: CMakeLists.txt)
//
//   attention_bench [--B 16] [--T 2048] [--H 12] [--Hkv 12] [--hd 128] [--window 2048,512]
//                   [--iters 10] [--warmup 3] [--json FILE]
//
// TFLOP/s counts the useful work, FlashAttention's convention: forward 4 B H hd sum_t
// min(t + 1, W) (Q K^T and P V over the visible keys), backward 2.5 times that.
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/attention.cuh"
#include "kernels/attention_tc.cuh"
#include "kernels/cuda_check.cuh"
#include "tools/bench_fill.h"

namespace {

using bf16 = __nv_bfloat16;

struct Buf {
  void* p = nullptr;
  explicit Buf(size_t bytes) { VT_CUDA_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
  ~Buf() { cudaFree(p); }
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// The largest |a - b| over n elements, and the largest |b| (the scale it is relative to).
struct Diff {
  double max_abs = 0, ref_max = 0;
  double rel() const { return ref_max > 0 ? max_abs / ref_max : max_abs; }
};
Diff diff(const bf16* a_dev, const bf16* b_dev, size_t n) {
  std::vector<bf16> a(n), b(n);
  VT_CUDA_CHECK(cudaMemcpy(a.data(), a_dev, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  VT_CUDA_CHECK(cudaMemcpy(b.data(), b_dev, n * sizeof(bf16), cudaMemcpyDeviceToHost));
  Diff d;
  for (size_t i = 0; i < n; ++i) {
    const double x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      d.max_abs = INFINITY;
      continue;
    }
    d.max_abs = std::max(d.max_abs, std::fabs(x - y));
    d.ref_max = std::max(d.ref_max, std::fabs(y));
  }
  return d;
}

// Milliseconds per call of f, over `iters` calls after `warmup`.
template <class F>
double time_ms(F f, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) f();
  cudaEvent_t a, b;
  VT_CUDA_CHECK(cudaEventCreate(&a));
  VT_CUDA_CHECK(cudaEventCreate(&b));
  VT_CUDA_CHECK(cudaEventRecord(a, nullptr));
  for (int i = 0; i < iters; ++i) f();
  VT_CUDA_CHECK(cudaEventRecord(b, nullptr));
  VT_CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  VT_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms) / iters;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "attention_bench: %s\nusage: attention_bench [--B N] [--T N] [--H N] [--Hkv N] "
               "[--hd 32|64|128] [--window W[,W...]] [--iters N] [--warmup N] [--json FILE]\n",
               why);
  std::exit(2);
}

long long number(const char* flag, const char* v) {
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (!end || *end || x < 1) usage((std::string(flag) + " takes a positive integer").c_str());
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  vt::cpu::AttnShape s;
  s.B = 16, s.T = 2048, s.H = 12, s.Hkv = 12, s.hd = 128;
  std::vector<long long> windows = {2048, 512};
  int iters = 10, warmup = 3;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const char* v = argv[++i];
    if (a == "--B") s.B = number("--B", v);
    else if (a == "--T") s.T = number("--T", v);
    else if (a == "--H") s.H = number("--H", v);
    else if (a == "--Hkv") s.Hkv = number("--Hkv", v);
    else if (a == "--hd") s.hd = number("--hd", v);
    else if (a == "--iters") iters = int(number("--iters", v));
    else if (a == "--warmup") warmup = int(number("--warmup", v));
    else if (a == "--json") json = v;
    else if (a == "--window") {
      windows.clear();
      std::stringstream ss(v);
      std::string w;
      while (std::getline(ss, w, ',')) windows.push_back(number("--window", w.c_str()));
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  if (s.H % s.Hkv != 0) usage("--H must be a multiple of --Hkv");
  if (!vt::cuda::attention_tc_supported(s)) usage("--hd must be 32, 64 or 128");
  if (vt::cuda::cuda_device_count() == 0) {
    std::fprintf(stderr, "attention_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  VT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s\nB %lld T %lld H %lld Hkv %lld hd %lld, bf16, %d iterations\n",
              prop.name, (long long)s.B, (long long)s.T, (long long)s.H, (long long)s.Hkv,
              (long long)s.hd, iters);

  const size_t nq = size_t(s.B * s.T * s.H * s.hd), nk = size_t(s.B * s.T * s.Hkv * s.hd);
  Buf q(nq * 2), k(nk * 2), v(nk * 2), dout(nq * 2), out(nq * 2), dq(nq * 2), dk(nk * 2),
      dv(nk * 2), lse(size_t(s.B * s.H * s.T) * 4);
  Buf ws(std::max(vt::cuda::attention_backward_workspace_bytes(s),
                  vt::cuda::attention_tc_backward_workspace_bytes(s)));
  vt::bench::fill_random_bf16(q.as<bf16>(), nq, 1);
  vt::bench::fill_random_bf16(k.as<bf16>(), nk, 2);
  vt::bench::fill_random_bf16(v.as<bf16>(), nk, 3);
  vt::bench::fill_random_bf16(dout.as<bf16>(), nq, 4);
  const float scale = 1.0f / std::sqrt(float(s.hd));

  std::string js = "{\"device\": \"" + std::string(prop.name) + "\", \"windows\": {";
  std::printf("%-8s %-10s %12s %12s %10s\n", "window", "pass", "tensor ms", "reference ms",
              "ref / tc");
  bool first_window = true;
  for (long long W : windows) {
    s.window = W;
    double useful = 0;  // forward FLOPs over the visible keys
    for (int64_t t = 0; t < s.T; ++t) useful += double(std::min<int64_t>(t + 1, W));
    useful *= 4.0 * double(s.B) * double(s.H) * double(s.hd);
    auto fwd_tc = [&] {
      vt::cuda::attention_tc_forward(q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                                     lse.as<float>(), s, scale, nullptr);
    };
    auto fwd_v1 = [&] {
      vt::cuda::attention_tc_forward_v1(q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                                        lse.as<float>(), s, scale, nullptr);
    };
    auto fwd_ref = [&] {
      vt::cuda::attention_forward(q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                                  lse.as<float>(), s, scale, nullptr);
    };
    auto bwd_tc = [&] {
      vt::cuda::attention_tc_backward(q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                                      lse.as<float>(), dout.as<bf16>(), dq.as<bf16>(),
                                      dk.as<bf16>(), dv.as<bf16>(), s, scale, ws.p, nullptr);
    };
    auto bwd_v1 = [&] {
      vt::cuda::attention_tc_backward_v1(q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                                         lse.as<float>(), dout.as<bf16>(), dq.as<bf16>(),
                                         dk.as<bf16>(), dv.as<bf16>(), s, scale, ws.p, nullptr);
    };
    auto bwd_ref = [&] {
      vt::cuda::attention_backward(q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                                   lse.as<float>(), dout.as<bf16>(), dq.as<bf16>(),
                                   dk.as<bf16>(), dv.as<bf16>(), s, scale, ws.p, nullptr);
    };
    const double f_tc = time_ms(fwd_tc, warmup, iters), f_ref = time_ms(fwd_ref, warmup, iters);
    const double f_v1 = time_ms(fwd_v1, warmup, iters);
    fwd_tc();  // backward reads the tensor-core forward's out and lse
    const double b_tc = time_ms(bwd_tc, warmup, iters), b_ref = time_ms(bwd_ref, warmup, iters);
    const double b_v1 = time_ms(bwd_v1, warmup, iters);
    const double tf = useful / 1e9;  // ms -> TFLOP/s: flops / (ms * 1e-3) / 1e12
    std::printf("%-8lld %-10s %8.3f (%5.1f TF/s) %8.3f (%5.1f TF/s) %8.2fx\n", W, "forward", f_tc,
                tf / f_tc, f_ref, tf / f_ref, f_ref / f_tc);
    std::printf("%-8lld %-10s %8.3f (%5.1f TF/s)  the 2026-11-26 forward; new forward %.2fx\n", W,
                "forward v1", f_v1, tf / f_v1, f_v1 / f_tc);
    std::printf("%-8lld %-10s %8.3f (%5.1f TF/s) %8.3f (%5.1f TF/s) %8.2fx\n", W, "backward", b_tc,
                2.5 * tf / b_tc, b_ref, 2.5 * tf / b_ref, b_ref / b_tc);
    std::printf("%-8lld %-10s %8.3f (%5.1f TF/s)  the 2026-11-26 backward; new backward %.2fx\n", W,
                "backward v1", b_v1, 2.5 * tf / b_v1, b_v1 / b_tc);
    // The error between them: both kernels on the same inputs; the backward of each from its
    // own forward's out and lse.
    Buf out_tc(nq * 2), dq_tc(nq * 2), dk_tc(nk * 2), dv_tc(nk * 2);
    fwd_tc();
    bwd_tc();
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    VT_CUDA_CHECK(cudaMemcpy(out_tc.p, out.p, nq * 2, cudaMemcpyDeviceToDevice));
    VT_CUDA_CHECK(cudaMemcpy(dq_tc.p, dq.p, nq * 2, cudaMemcpyDeviceToDevice));
    VT_CUDA_CHECK(cudaMemcpy(dk_tc.p, dk.p, nk * 2, cudaMemcpyDeviceToDevice));
    VT_CUDA_CHECK(cudaMemcpy(dv_tc.p, dv.p, nk * 2, cudaMemcpyDeviceToDevice));
    fwd_v1();
    bwd_v1();
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    const Diff d_v1 = diff(out.as<bf16>(), out_tc.as<bf16>(), nq);  // v1 against the new kernels
    Diff d_v1_grad = diff(dq.as<bf16>(), dq_tc.as<bf16>(), nq);
    for (const Diff& d : {diff(dk.as<bf16>(), dk_tc.as<bf16>(), nk),
                          diff(dv.as<bf16>(), dv_tc.as<bf16>(), nk)}) {
      if (d.rel() > d_v1_grad.rel()) d_v1_grad = d;
    }
    fwd_ref();
    bwd_ref();
    VT_CUDA_CHECK(cudaDeviceSynchronize());
    const Diff d_out = diff(out_tc.as<bf16>(), out.as<bf16>(), nq);
    Diff d_grad = diff(dq_tc.as<bf16>(), dq.as<bf16>(), nq);
    for (const Diff& d : {diff(dk_tc.as<bf16>(), dk.as<bf16>(), nk),
                          diff(dv_tc.as<bf16>(), dv.as<bf16>(), nk)}) {
      if (d.rel() > d_grad.rel()) d_grad = d;
    }
    std::printf("%-8lld %-10s max |tc - ref| out %.3g (%.2e of max |ref|), grads %.3g (%.2e)\n",
                W, "error", d_out.max_abs, d_out.rel(), d_grad.max_abs, d_grad.rel());
    std::printf("%-8lld %-10s max |v1 - tc| out %.3g (%.2e of max |tc|), grads %.3g (%.2e)\n", W,
                "error", d_v1.max_abs, d_v1.rel(), d_v1_grad.max_abs, d_v1_grad.rel());
    char buf[768];
    std::snprintf(buf, sizeof buf,
                  "%s\"%lld\": {\"fwd_tc_ms\": %.4f, \"fwd_ref_ms\": %.4f, \"bwd_tc_ms\": %.4f, "
                  "\"bwd_ref_ms\": %.4f, \"fwd_v1_ms\": %.4f, \"bwd_v1_ms\": %.4f, "
                  "\"fwd_tc_tflops\": %.2f, \"fwd_ref_tflops\": %.2f, \"fwd_v1_tflops\": %.2f, "
                  "\"bwd_v1_tflops\": %.2f, "
                  "\"bwd_tc_tflops\": %.2f, \"bwd_ref_tflops\": %.2f, \"out_max_abs_err\": %.4g, "
                  "\"out_rel_err\": %.4g, \"grad_max_abs_err\": %.4g, \"grad_rel_err\": %.4g, "
                  "\"out_v1_rel_err\": %.4g, \"grad_v1_rel_err\": %.4g}",
                  first_window ? "" : ", ", W, f_tc, f_ref, b_tc, b_ref, f_v1, b_v1, tf / f_tc,
                  tf / f_ref, tf / f_v1, 2.5 * tf / b_v1, 2.5 * tf / b_tc, 2.5 * tf / b_ref,
                  d_out.max_abs, d_out.rel(), d_grad.max_abs, d_grad.rel(), d_v1.rel(),
                  d_v1_grad.rel());
    js += buf;
    first_window = false;
  }
  js += "}}\n";
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) usage(("cannot write " + json).c_str());
    std::fputs(js.c_str(), f);
    std::fclose(f);
  }
  return 0;
}
