// SelfCommunicator: the trivial size-1 group; the Communicator base class's Tensor calls (host
// staging) and its bf16-wire sum (pack, the buffer call, unpack).
#include "core/communicator.h"

#include <atomic>
#include <cstring>

#include "core/bf16.h"
#include "core/check.h"
#include "core/ops.h"

namespace vt {

void SelfCommunicator::all_gather(const float* in, float* out, int64_t n) {
  if (in != out) std::memmove(out, in, n * sizeof(float));
}

void SelfCommunicator::reduce_scatter_sum(const float* in, float* out, int64_t n) {
  if (in != out) std::memmove(out, in, n * sizeof(float));
}

void SelfCommunicator::send(const float*, int64_t, int, int) {
  VT_CHECK_MSG(false, "SelfCommunicator has no peer to send to");
}

void SelfCommunicator::recv(float*, int64_t, int, int) {
  VT_CHECK_MSG(false, "SelfCommunicator has no peer to receive from");
}

namespace {

// A host f32 tensor holding t's values (t itself when it already is one).
Tensor host_f32(const Tensor& t, bool load) {
  if (t.on_host() && t.dtype() == DType::kF32) return t;
  Tensor h = Tensor::zeros(t.shape(), DType::kF32, Device::kCPU);
  if (load) ops::copy(h, t);
  return h;
}

// Writes a staged host copy back into t (nothing when t was used directly).
void store_back(const Tensor& t, const Tensor& h) {
  if (h.raw() != t.raw()) ops::copy(t, h);
}

void check_pair(const Tensor& in, const Tensor& out, int64_t factor, const char* op) {
  VT_CHECK_MSG(in.device() == out.device() && in.dtype() == out.dtype(),
               op << ": in and out must share device and dtype");
  VT_CHECK_MSG(in.numel() * (factor > 0 ? factor : 1) ==
                   out.numel() * (factor < 0 ? -factor : 1),
               op << ": sizes " << in.numel() << " and " << out.numel() << " do not match");
}

}  // namespace

void Communicator::all_reduce_sum(const Tensor& t) {
  if (size() == 1 || t.numel() == 0) return;
  Tensor h = host_f32(t, true);
  all_reduce_sum(h.f32(), h.numel());
  store_back(t, h);
}

void Communicator::all_reduce_max(const Tensor& t) {
  if (size() == 1 || t.numel() == 0) return;
  Tensor h = host_f32(t, true);
  all_reduce_max(h.f32(), h.numel());
  store_back(t, h);
}

void Communicator::all_gather(const uint16_t* in, uint16_t* out, int64_t n) {
  VT_CHECK_MSG(size() == 1, "this communicator has no bf16 all-gather for a group of " << size());
  if (in != out) std::memmove(out, in, n * sizeof(uint16_t));
}

void Communicator::all_gather(const Tensor& in, const Tensor& out) {
  check_pair(in, out, size(), "all_gather");
  if (in.dtype() == DType::kBF16) {  // the bits through host memory, 2 bytes a value
    const Tensor hi = in.on_host() ? in : in.to(Device::kCPU);
    const Tensor ho = out.on_host() ? out : Tensor::empty(out.shape(), DType::kBF16, Device::kCPU);
    all_gather(hi.bf16(), ho.bf16(), in.numel());
    if (ho.raw() != out.raw()) out.copy_from(ho);
    return;
  }
  Tensor hi = host_f32(in, true), ho = host_f32(out, false);
  all_gather(hi.f32(), ho.f32(), in.numel());
  store_back(out, ho);
}

void Communicator::reduce_scatter_sum(const Tensor& in, const Tensor& out) {
  check_pair(in, out, -size(), "reduce_scatter_sum");
  Tensor hi = host_f32(in, true), ho = host_f32(out, false);
  reduce_scatter_sum(hi.f32(), ho.f32(), out.numel());
  store_back(out, ho);
}

void Communicator::broadcast(const Tensor& t, int root) {
  if (size() == 1 || t.numel() == 0) return;
  Tensor h = host_f32(t, rank() == root);
  broadcast(h.f32(), h.numel(), root);
  if (rank() != root) store_back(t, h);
}

void Communicator::send(const Tensor& t, int peer, int tag) {
  Tensor h = host_f32(t, true);
  send(h.f32(), h.numel(), peer, tag);
}

void Communicator::send_async(const Tensor& t, int peer, int tag) {
  // The host call copies the data before returning, so the staging buffer may go.
  Tensor h = host_f32(t, true);
  send_async(h.f32(), h.numel(), peer, tag);
}

void Communicator::recv(const Tensor& t, int peer, int tag) {
  Tensor h = host_f32(t, false);
  recv(h.f32(), h.numel(), peer, tag);
  store_back(t, h);
}

void Communicator::all_reduce_sum_bf16(uint16_t*, int64_t n) {
  VT_CHECK_MSG(size() == 1 || n == 0,
               "this communicator has no bf16-wire sum for a group of " << size());
}

void Communicator::all_reduce_sum_bf16(const Tensor& t) {
  VT_CHECK_MSG(t.dtype() == DType::kF32,
               "all_reduce_sum_bf16 sums f32 tensors, got " << dtype_name(t.dtype()));
  if (t.numel() == 0) return;
  if (t.on_host()) {  // one pass each way (ops::copy widens through a buffer on the host)
    const int64_t n = t.numel();
    float* x = t.f32();
    Tensor b = Tensor::empty({n}, DType::kBF16, Device::kCPU);
    uint16_t* w = b.bf16();
    for (int64_t i = 0; i < n; ++i) w[i] = f32_to_bf16(x[i]);
    if (size() > 1) all_reduce_sum_bf16(w, n);
    for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(w[i]);
    return;
  }
  // Round to bf16 where t lives (a cast kernel on a device), send the bf16 values through host
  // memory (half the bytes of the f32 staging), widen back where t lives.
  Tensor b = Tensor::empty(t.shape(), DType::kBF16, t.device());
  ops::copy(b, t);
  if (size() > 1) {
    Tensor h = b.on_host() ? b : b.to(Device::kCPU);
    all_reduce_sum_bf16(h.bf16(), h.numel());
    if (h.raw() != b.raw()) b.copy_from(h);
  }
  ops::copy(t, b);
}

void Communicator::reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) {
  VT_CHECK_MSG(size() == 1, "this communicator has no bf16-wire reduce-scatter for a group of "
                                << size());
  if (in != out) std::memmove(out, in, n * sizeof(uint16_t));
}

void Communicator::reduce_scatter_sum_bf16(const Tensor& in, const Tensor& out) {
  check_pair(in, out, -size(), "reduce_scatter_sum_bf16");
  VT_CHECK_MSG(in.dtype() == DType::kF32,
               "reduce_scatter_sum_bf16 sums f32 tensors, got " << dtype_name(in.dtype()));
  if (out.numel() == 0) return;
  // Rounded where `in` lives (a cast kernel on a device), reduced through host memory, widened
  // back where `out` lives.
  Tensor bi = Tensor::empty({in.numel()}, DType::kBF16, in.device());
  ops::copy(bi, in.flat(0, in.numel()));
  Tensor hi = bi.on_host() ? bi : bi.to(Device::kCPU);
  Tensor ho = Tensor::empty({out.numel()}, DType::kBF16, Device::kCPU);
  reduce_scatter_sum_bf16(hi.bf16(), ho.bf16(), out.numel());
  Tensor bo = out.on_host() ? ho : ho.to(out.device());
  ops::copy(out.flat(0, out.numel()), bo);
}

namespace {
std::atomic<double> g_comm_bytes{0.0};
}  // namespace

double comm_bytes_total() { return g_comm_bytes.load(std::memory_order_relaxed); }

void count_comm_bytes(double bytes) {
  double cur = g_comm_bytes.load(std::memory_order_relaxed);
  while (!g_comm_bytes.compare_exchange_weak(cur, cur + bytes, std::memory_order_relaxed)) {
  }
}

double ring_bytes(CommKind kind, double payload_bytes, int group_size) {
  if (group_size <= 1) return 0.0;
  const double share = static_cast<double>(group_size - 1) / group_size * payload_bytes;
  switch (kind) {
    case CommKind::kAllReduce: return 2.0 * share;
    case CommKind::kSend: return payload_bytes;
    default: return share;
  }
}

void count_collective(CommKind kind, int64_t elements, int64_t elem_bytes, int group_size) {
  count_comm_bytes(ring_bytes(kind, static_cast<double>(elements * elem_bytes), group_size));
}

Communicator* self_communicator() {
  static SelfCommunicator self;
  return &self;
}

}  // namespace vt
