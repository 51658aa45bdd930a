// CUDA AdamW against vt::optim::adamw_update over several steps on random fp32 parameters,
// gradients and states, with weight decay.
#include "kernels/adamw.cuh"

#include "gpu_test_util.h"
#include "optim/adamw.h"

namespace vt::gputest {
namespace {

// The same fp32 operations in the same order; the GPU may contract a*b + c into one FMA, a
// difference of ~1 ulp per operation, compounded over 3 steps: rtol 1e-6 on p (|p| ~ 1) and
// 1e-5 on m, v (which can cancel), with a tiny atol for states near zero.
TEST(GpuAdamW, ThreeStepsMatchCpu) {
  VT_SKIP_WITHOUT_CUDA();
  const int64_t n = 50001;
  optim::AdamWHyper h{0.01, 0.8, 0.95, 0.1, 1e-10};
  auto p = randn(n, 71), m = randn(n, 72, 0.1f), v = uniform(n, 73, 0.0f, 0.02f);
  DeviceBuffer<float> dP(p), dM(m), dV(v), dG(n);
  for (int64_t t = 1; t <= 3; ++t) {
    auto g = randn(n, 80 + t, 0.1f);
    const double lr = h.lr * (1.0 - 0.1 * t);
    optim::adamw_update(p.data(), g.data(), m.data(), v.data(), n, h, lr, t);
    dG.upload(g);
    cuda::adamw_update(dP.get(), dG.get(), dM.get(), dV.get(), n, lr, h.beta1, h.beta2,
                       h.weight_decay, h.eps, t, nullptr);
  }
  EXPECT_TRUE(all_close(dP.download(), p, 1e-6, 1e-7));
  EXPECT_TRUE(all_close(dM.download(), m, 1e-5, 1e-9));
  EXPECT_TRUE(all_close(dV.download(), v, 1e-5, 1e-11));
}

}  // namespace
}  // namespace vt::gputest
