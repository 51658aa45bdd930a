// CUDA row-sharded embedding gather / scatter-add against vt::cpu::embedding_forward/backward:
// a local table holding rows [row_begin, row_begin + rows) of a larger vocabulary, ids inside
// and outside it, repeated ids.
#include "kernels/embedding.cuh"

#include "core/cpu_kernels.h"
#include "gpu_test_util.h"

namespace vt::gputest {
namespace {

constexpr int64_t kVocab = 400, kRowBegin = 100, kRows = 150, C = 72, N = 513;

std::vector<int32_t> make_ids() {
  std::mt19937 g(9);
  std::uniform_int_distribution<int32_t> d(0, kVocab - 1);
  std::vector<int32_t> ids(N);
  for (auto& v : ids) v = d(g);
  for (int i = 0; i < 40; ++i) ids[i] = kRowBegin + 3;  // one row hit many times
  ids[40] = kRowBegin;
  ids[41] = kRowBegin + kRows - 1;
  ids[42] = kRowBegin + kRows;  // just outside
  ids[43] = kRowBegin - 1;
  return ids;
}

// Gather is a copy: exact for f32; bf16 output is the single RN rounding of the fp32 row, which
// the host rounding reproduces bit for bit.
TEST(GpuEmbedding, GatherMatchesCpuExactly) {
  VT_SKIP_WITHOUT_CUDA();
  auto table = randn(kRows * C, 41);
  auto ids = make_ids();
  std::vector<float> out(N * C);
  cpu::embedding_forward<float>(table.data(), kRowBegin, kRows, C, ids.data(), N, out.data());
  DeviceBuffer<float> dTab(table), dOut(N * C);
  DeviceBuffer<__nv_bfloat16> dOutB(N * C);
  DeviceBuffer<int32_t> dIds(ids);
  cuda::embedding_forward(dTab.get(), kRowBegin, kRows, C, dIds.get(), N, dOut.get(), nullptr);
  cuda::embedding_forward(dTab.get(), kRowBegin, kRows, C, dIds.get(), N, dOutB.get(), nullptr);
  EXPECT_EQ(dOut.download(), out);
  EXPECT_EQ(dOutB.download<uint16_t>(), to_bf16(out));
}

// Scatter-add: every element adds its terms in id order on both sides (the kernel has one owner
// thread per element, no atomics), so the fp32 results are equal bit for bit. bf16 dout: the
// CPU sums the same bf16-rounded terms in fp32.
TEST(GpuEmbedding, ScatterAddMatchesCpu) {
  VT_SKIP_WITHOUT_CUDA();
  auto ids = make_ids();
  auto dtab0 = randn(kRows * C, 42);
  for (bool bf16 : {false, true}) {
    auto dout = randn(N * C, 43);
    if (bf16) dout = rounded_bf16(dout);
    std::vector<float> dtab = dtab0;
    cpu::embedding_backward<float>(dout.data(), ids.data(), N, kRowBegin, kRows, C, dtab.data());
    DeviceBuffer<float> dTab(dtab0);
    DeviceBuffer<int32_t> dIds(ids);
    if (bf16) {
      DeviceBuffer<__nv_bfloat16> dOut(to_bf16(dout));
      cuda::embedding_backward(dOut.get(), dIds.get(), N, kRowBegin, kRows, C, dTab.get(),
                               nullptr);
      EXPECT_EQ(dTab.download(), dtab) << "bf16 dout";
    } else {
      DeviceBuffer<float> dOut(dout);
      cuda::embedding_backward(dOut.get(), dIds.get(), N, kRowBegin, kRows, C, dTab.get(),
                               nullptr);
      EXPECT_EQ(dTab.download(), dtab) << "f32 dout";
    }
  }
}

}  // namespace
}  // namespace vt::gputest
