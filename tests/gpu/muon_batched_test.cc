// Muon's batched Newton-Schulz (optim/muon.h newton_schulz_batched) on the CUDA backend (the
// emulated one without a GPU) and on CPU tensors: every matrix bit for bit what
// newton_schulz_ops gives it alone on the same backend (f32 and bf16 iterations, standard and
// Polar Express coefficients, wide, tall and square matrices mixed so that a wide and a tall one
// of the same working shape share a batch, batch caps that cut a group into several batches),
// and on CPU tensors also the host newton_schulz bit for bit (f32). Inputs are left as they were.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "backend_pair.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "gpu_test_util.h"
#include "optim/muon.h"

namespace vt::gputest {
namespace {

using optim::NsCoefficients;
using optim::NsMatrix;

class MuonBatched : public WithCudaBackend<::testing::Test> {};

TEST_F(MuonBatched, EachMatrixIsItsUnbatchedNewtonSchulz) {
  const std::vector<std::pair<int, int>> shapes = {{16, 32}, {12, 12}, {32, 16}, {9, 6},
                                                   {12, 12}, {16, 32}, {6, 9},   {12, 12}};
  uint64_t seed = 500;
  std::vector<std::vector<float>> inputs;
  for (const auto& [r, c] : shapes) inputs.push_back(randn(size_t(r) * c, seed++, 0.3f));
  for (const NsCoefficients& co : {NsCoefficients::standard(), NsCoefficients::polar_express()}) {
    for (DType compute : {kF32, kBF16}) {
      // Caps: everything of one shape in one batch; two 16 x 32 per batch; one matrix per batch.
      for (int64_t cap : {optim::kNsBatchElements, int64_t{2 * 16 * 32}, int64_t{1}}) {
        for (Device dev : {kCPU, kGPU}) {
          SCOPED_TRACE(testing::Message() << (dev == kGPU ? "device" : "cpu") << " "
                                          << name_of(compute) << " cap " << cap << " a "
                                          << co.abc[0][0]);
          std::vector<NsMatrix> ms;
          std::vector<Tensor> want;
          for (size_t i = 0; i < shapes.size(); ++i) {
            const auto [r, c] = shapes[i];
            const Tensor in = host(inputs[i], {r * c}).to(dev);
            // Outputs start as NaN: any element the batch leaves unwritten shows.
            const Tensor out = host(std::vector<float>(inputs[i].size(), std::nanf("")),
                                    {r * c}).to(dev);
            ms.push_back({in, r, c, out});
            const Tensor ref = Tensor::zeros({r * c}, kF32, dev);
            optim::newton_schulz_ops(in, r, c, ref, 5, co, compute);
            want.push_back(ref);
          }
          optim::newton_schulz_batched(ms, 5, co, compute, cap);
          for (size_t i = 0; i < shapes.size(); ++i) {
            SCOPED_TRACE(testing::Message() << "matrix " << i << " " << shapes[i].first << "x"
                                            << shapes[i].second);
            EXPECT_EQ(vals(ms[i].out), vals(want[i]));
            EXPECT_EQ(vals(ms[i].in), inputs[i]) << "input written";
            if (dev == kCPU && compute == kF32) {  // the host function too
              std::vector<float> h(inputs[i].size());
              optim::newton_schulz(inputs[i].data(), shapes[i].first, shapes[i].second, h.data(),
                                   5, co);
              EXPECT_EQ(vals(ms[i].out), h);
            }
          }
        }
      }
    }
  }
}

// The refusals of the per-matrix function hold for each matrix of a batch (host tensors: a
// death test's child must not touch the emulated device's threads).
TEST_F(MuonBatched, RefusesBadMatrices) {
  const Tensor in = host(randn(12, 1), {12}), out = Tensor::zeros({12});
  EXPECT_DEATH(optim::newton_schulz_batched({{in, 3, 5, out}}, 5, NsCoefficients::standard()),
               "3x5 needs tensors of 15 elements");
  EXPECT_DEATH(optim::newton_schulz_batched({{in, 3, 4, in}}, 5, NsCoefficients::standard()),
               "out may not alias G");
}

}  // namespace
}  // namespace vt::gputest
