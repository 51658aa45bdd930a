// gemm_bench: the GEMM ceiling of a vtrain training step on one device. Times vtrain's own
// cuBLASLt GEMM (src/core/cuda_gemm.cc, bf16 inputs, fp32 accumulation, bf16 output: what the
// bf16 training path calls) at the shapes one layer of a preset launches, forward, input
// gradient (dx) and weight gradient (dW), and prints TFLOP/s per shape and the FLOP-weighted
// whole. For the GPU window (scripts/device_window.sh, stage gemm), where bench/gemm_torch.py
// times torch's bf16 matmul at the same shapes beside it.
//
// Linked from the GEMM and kernel files alone (CMakeLists.txt: `vtrain-tool: kernels`), not from
// the engine, so it runs where the rest of the bundle (MPI, HDF5, OpenBLAS) does not load.
//
//   gemm_bench [--dim 1536] [--tokens 32768] [--vocab 32768] [--mlp 4] [--iters 20] [--warmup 5]
//              [--json FILE] [--fp8]
//
// --fp8 (issue 44) adds, for each block linear GEMM (not the lm head, which --fp8 e4m3 keeps in
// bf16), the FP8 GEMM of --fp8 e4m3 on codes already quantized (cuda::Gemm::fp8, TN, E4M3
// activations and weights, E5M2 gradients: fwd E4M3 x E4M3, dx E5M2 x E4M3, dW E5M2 x E4M3)
// and the quantization it needs (kernels/fp8.cu: amax and codes of op(A) and op(B)^T from bf16),
// each timed alone, and the ratio of bf16's time to FP8's with its quantization.
//
// A linear layer y = x W^T with x (tokens, in) and W (out, in) as the engine stores it:
//   fwd  y  = x W^T     M tokens, N out, K in
//   dx   dx = dy W      M tokens, N in,  K out
//   dW   dW = dy^T x    M out,    N in,  K tokens
// Shapes: qkv (in d, out 3d), attn_out (d, d), fc (d, mlp d), mlp_out (mlp d, d), lm_head (d, V).
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/cuda_gemm.h"
#include "kernels/cuda_check.cuh"
#include "kernels/fp8.cuh"
#include "tools/bench_fill.h"

namespace {

using bf16 = __nv_bfloat16;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "gemm_bench: %s\nusage: gemm_bench [--dim N] [--tokens N] [--vocab N] [--mlp N] "
               "[--iters N] [--warmup N] [--json FILE] [--fp8]\n",
               why.c_str());
  std::exit(2);
}

long long number(const std::string& flag, const char* v, long long least = 1) {
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (!end || *end || x < least || x > (1LL << 34))
    usage(flag + " takes an integer from " + std::to_string(least) + " to 2^34");
  return x;
}

struct Shape {
  std::string name;
  bool ta = false, tb = false;
  long long M = 0, N = 0, K = 0;
};

// The three GEMMs of a linear layer with `in` inputs and `out` outputs over `tokens` rows, in the
// row-major convention of vt::cuda::Gemm (C(M,N) = op(A) op(B)).
void linear(std::vector<Shape>& v, const std::string& name, long long tokens, long long in,
            long long out) {
  v.push_back({name + ".fwd", false, true, tokens, out, in});  // x (T,in) . W(out,in)^T
  v.push_back({name + ".dx", false, false, tokens, in, out});  // dy (T,out) . W (out,in)
  v.push_back({name + ".dW", true, false, out, in, tokens});   // dy^T (out,T) . x (T,in)
}

}  // namespace

int main(int argc, char** argv) {
  bool fp8 = false;
  long long dim = 1536, tokens = 32768, vocab = 32768, mlp = 4;
  int iters = 20, warmup = 5;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--fp8") {
      fp8 = true;
      continue;
    }
    if (i + 1 >= argc) usage("missing value after " + a);
    const char* v = argv[++i];
    if (a == "--dim") dim = number(a, v);
    else if (a == "--tokens") tokens = number(a, v);
    else if (a == "--vocab") vocab = number(a, v);
    else if (a == "--mlp") mlp = number(a, v);
    else if (a == "--iters") iters = int(number(a, v));
    else if (a == "--warmup") warmup = int(number(a, v, 0));
    else if (a == "--json") json = v;
    else usage("unknown flag " + a);
  }
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows as they come, also into a log file
  if (vt::cuda::cuda_device_count() == 0) {
    std::fprintf(stderr, "gemm_bench: no CUDA device\n");
    return 1;
  }
  cudaDeviceProp prop{};
  VT_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::vector<Shape> shapes;
  linear(shapes, "qkv", tokens, dim, 3 * dim);
  linear(shapes, "attn_out", tokens, dim, dim);
  linear(shapes, "fc", tokens, dim, mlp * dim);
  linear(shapes, "mlp_out", tokens, mlp * dim, dim);
  linear(shapes, "lm_head", tokens, dim, vocab);

  size_t most = 0;  // elements of the largest operand
  for (const Shape& s : shapes)
    most = std::max({most, size_t(s.M * s.K), size_t(s.K * s.N), size_t(s.M * s.N)});
  bf16 *A = nullptr, *B = nullptr, *C = nullptr;
  VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&A), most * sizeof(bf16)));
  VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&B), most * sizeof(bf16)));
  VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&C), most * sizeof(bf16)));
  vt::bench::fill_random_bf16(A, most, 1);
  vt::bench::fill_random_bf16(B, most, 2);
  cudaStream_t stream = nullptr;
  VT_CUDA_CHECK(cudaStreamCreate(&stream));
  vt::cuda::Gemm gemm;
  cudaEvent_t e0, e1;
  VT_CUDA_CHECK(cudaEventCreate(&e0));
  VT_CUDA_CHECK(cudaEventCreate(&e1));

  std::printf("device: %s\ngemm_bench: d %lld, tokens %lld, vocab %lld, mlp %lldx; bf16 in, fp32 "
              "accumulate, bf16 out; %d iterations after %d warm-up\n",
              prop.name, dim, tokens, vocab, mlp, iters, warmup);
  std::printf("%-14s %7s %7s %7s %10s %9s\n", "gemm", "M", "N", "K", "ms", "TFLOP/s");
  std::string js = "{\"device\": \"" + std::string(prop.name) + "\", \"rows\": [";
  double flops_all = 0, ms_all = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const Shape& s = shapes[i];
    const long long lda = s.ta ? s.M : s.K, ldb = s.tb ? s.K : s.N;
    auto call = [&] {
      gemm(s.ta, s.tb, s.M, s.N, s.K, 1.0f, A, lda, B, ldb, 0.0f, C, s.N, stream);
    };
    for (int w = 0; w < warmup; ++w) call();
    VT_CUDA_CHECK(cudaEventRecord(e0, stream));
    for (int it = 0; it < iters; ++it) call();
    VT_CUDA_CHECK(cudaEventRecord(e1, stream));
    VT_CUDA_CHECK(cudaEventSynchronize(e1));
    float ms = 0;
    VT_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
    const double per = double(ms) / iters;
    const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
    flops_all += flops;
    ms_all += per;
    const double tflops = flops / (per * 1e-3) / 1e12;
    std::printf("%-14s %7lld %7lld %7lld %10.4f %9.1f\n", s.name.c_str(), s.M, s.N, s.K, per,
                tflops);
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "%s{\"name\": \"%s\", \"trans_a\": %s, \"trans_b\": %s, \"M\": %lld, \"N\": %lld, "
                  "\"K\": %lld, \"ms\": %.5f, \"vtrain_tflops\": %.3f",
                  i ? ", " : "", s.name.c_str(), s.ta ? "true" : "false",
                  s.tb ? "true" : "false", s.M, s.N, s.K, per, tflops);
    js += buf;
    if (fp8 && s.name.rfind("lm_head", 0) != 0) {
      // The --fp8 e4m3 formats: the gradient operand (dx's A = dy, dW's A = dy^T) in E5M2.
      const bool grad_a = s.name.find(".fwd") == std::string::npos;
      const vt::Fp8Format fa = grad_a ? vt::Fp8Format::kE5M2 : vt::Fp8Format::kE4M3;
      const vt::Fp8Format fb = vt::Fp8Format::kE4M3;
      auto type = [](vt::Fp8Format f) { return f == vt::Fp8Format::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; };
      uint8_t *qa = nullptr, *qb = nullptr;
      vt::cuda::Fp8QuantState* st = nullptr;
      VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&qa), size_t(s.M * s.K)));
      VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&qb), size_t(s.N * s.K)));
      VT_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&st), 2 * sizeof(*st)));
      auto quantize = [&] {  // op(A) (M,K) rows; op(B)^T (N,K) rows, as gemm_fp8.cc does
        VT_CUDA_CHECK(cudaMemsetAsync(st, 0, 2 * sizeof(*st), stream));
        vt::cuda::fp8_amax(A, s.M, s.K, lda, s.ta, &st[0], stream);
        vt::cuda::fp8_quantize(A, s.M, s.K, lda, s.ta, fa, qa, &st[0], stream);
        vt::cuda::fp8_amax(B, s.N, s.K, ldb, !s.tb, &st[1], stream);
        vt::cuda::fp8_quantize(B, s.N, s.K, ldb, !s.tb, fb, qb, &st[1], stream);
      };
      auto mm = [&] {
        gemm.fp8(s.M, s.N, s.K, 1.0f, qa, type(fa), s.K, &st[0].scale_inv, qb, type(fb), s.K,
                 &st[1].scale_inv, 0.0f, C, CUDA_R_16BF, s.N, stream);
      };
      auto time = [&](auto&& f) {
        for (int w = 0; w < warmup; ++w) f();
        VT_CUDA_CHECK(cudaEventRecord(e0, stream));
        for (int it = 0; it < iters; ++it) f();
        VT_CUDA_CHECK(cudaEventRecord(e1, stream));
        VT_CUDA_CHECK(cudaEventSynchronize(e1));
        float t = 0;
        VT_CUDA_CHECK(cudaEventElapsedTime(&t, e0, e1));
        return double(t) / iters;
      };
      quantize();
      const double q_ms = time(quantize), f_ms = time(mm);
      std::printf("%-14s %7s %7s %7s %10.4f %9.1f   fp8 gemm; quantization %.4f ms; bf16 / "
                  "(fp8 + quantization) %.2fx\n",
                  (s.name + ".fp8").c_str(), "", "", "", f_ms, flops / (f_ms * 1e-3) / 1e12, q_ms,
                  per / (f_ms + q_ms));
      std::snprintf(buf, sizeof buf,
                    ", \"fp8_ms\": %.5f, \"fp8_tflops\": %.3f, \"fp8_quant_ms\": %.5f",
                    f_ms, flops / (f_ms * 1e-3) / 1e12, q_ms);
      js += buf;
      cudaFree(qa);
      cudaFree(qb);
      cudaFree(st);
    }
    js += "}";
  }
  const double whole = flops_all / (ms_all * 1e-3) / 1e12;
  std::printf("%-14s %7s %7s %7s %10.4f %9.1f   (FLOP-weighted: one layer's GEMMs + lm_head)\n",
              "all", "", "", "", ms_all, whole);
  char tail[128];
  std::snprintf(tail, sizeof tail, "], \"all_tflops\": %.3f, \"plans\": %zu}\n", whole,
                gemm.plans());
  js += tail;
  if (!json.empty()) {
    FILE* f = std::fopen(json.c_str(), "w");
    if (!f) usage("cannot write " + json);
    std::fputs(js.c_str(), f);
    std::fclose(f);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaStreamDestroy(stream);
  cudaFree(A);
  cudaFree(B);
  cudaFree(C);
  return 0;
}
