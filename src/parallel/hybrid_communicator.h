// HybridCommunicator: one group reached two ways. Host memory (the float*/double* calls, and
// Tensor calls on host tensors) goes through `host` (MPI); Tensor calls on device tensors go
// through `device` (NCCL). The trainer wraps each process-grid group in one when a native device
// communicator is in use, so layers keep calling one Communicator per group.
#pragma once
#include <memory>
#include <utility>
#include <vector>

#include "core/communicator.h"

namespace vt {

class HybridCommunicator final : public Communicator {
 public:
  HybridCommunicator(Communicator* host, std::unique_ptr<Communicator> device)
      : host_(host), device_(std::move(device)) {}
  int size() const override { return host_->size(); }
  int rank() const override { return host_->rank(); }
  void all_reduce_sum(float* d, int64_t n) override { host_->all_reduce_sum(d, n); }
  void all_reduce_sum(double* d, int64_t n) override { host_->all_reduce_sum(d, n); }
  void all_reduce_max(float* d, int64_t n) override { host_->all_reduce_max(d, n); }
  void all_gather(const float* in, float* out, int64_t n) override { host_->all_gather(in, out, n); }
  void reduce_scatter_sum(const float* in, float* out, int64_t n) override {
    host_->reduce_scatter_sum(in, out, n);
  }
  void broadcast(float* d, int64_t n, int root) override { host_->broadcast(d, n, root); }
  void send(const float* d, int64_t n, int peer, int tag) override { host_->send(d, n, peer, tag); }
  void recv(float* d, int64_t n, int peer, int tag) override { host_->recv(d, n, peer, tag); }
  void send_async(const float* d, int64_t n, int peer, int tag) override {
    host_->send_async(d, n, peer, tag);
  }
  void wait_sends() override {
    host_->wait_sends();
    device_->wait_sends();
  }
  void barrier() override { host_->barrier(); }

  void all_reduce_sum(const Tensor& t) override { pick(t)->all_reduce_sum(t); }
  void all_reduce_max(const Tensor& t) override { pick(t)->all_reduce_max(t); }
  void all_gather(const Tensor& in, const Tensor& out) override { pick(in)->all_gather(in, out); }
  void reduce_scatter_sum(const Tensor& in, const Tensor& out) override {
    pick(in)->reduce_scatter_sum(in, out);
  }
  void broadcast(const Tensor& t, int root) override { pick(t)->broadcast(t, root); }
  void send(const Tensor& t, int peer, int tag) override { pick(t)->send(t, peer, tag); }
  void send_async(const Tensor& t, int peer, int tag) override {
    pick(t)->send_async(t, peer, tag);
  }
  void recv(const Tensor& t, int peer, int tag) override { pick(t)->recv(t, peer, tag); }
  void all_reduce_sum_start(const Tensor& t) override { pick(t)->all_reduce_sum_start(t); }
  void broadcast_start(const Tensor& t, int root) override { pick(t)->broadcast_start(t, root); }
  void all_reduce_sum_bf16(const Tensor& t) override { pick(t)->all_reduce_sum_bf16(t); }
  void all_reduce_sum_bf16_start(const Tensor& t) override {
    pick(t)->all_reduce_sum_bf16_start(t);
  }
  void all_reduce_sum_bf16(uint16_t* d, int64_t n) override { host_->all_reduce_sum_bf16(d, n); }
  void reduce_scatter_sum_bf16(const Tensor& in, const Tensor& out) override {
    pick(in)->reduce_scatter_sum_bf16(in, out);
  }
  void reduce_scatter_sum_bf16(const uint16_t* in, uint16_t* out, int64_t n) override {
    host_->reduce_scatter_sum_bf16(in, out, n);
  }
  void reduce_sum(const Tensor& t, int root) override { pick(t)->reduce_sum(t, root); }
  void reduce_sum_bf16(const Tensor& t, int root) override { pick(t)->reduce_sum_bf16(t, root); }
  void reduce_scatter_sum_start(const Tensor& in, const Tensor& out) override {
    pick(in)->reduce_scatter_sum_start(in, out);
  }
  void reduce_scatter_sum_bf16_start(const Tensor& in, const Tensor& out) override {
    pick(in)->reduce_scatter_sum_bf16_start(in, out);
  }
  void reduce_sum_start(const Tensor& t, int root) override { pick(t)->reduce_sum_start(t, root); }
  void reduce_sum_bf16_start(const Tensor& t, int root) override {
    pick(t)->reduce_sum_bf16_start(t, root);
  }
  void all_gather(const uint16_t* in, uint16_t* out, int64_t n) override {
    host_->all_gather(in, out, n);
  }
  void all_gather_start(const Tensor& in, const Tensor& out) override {
    pick(in)->all_gather_start(in, out);
  }
  // A mark of this group is the pair of its two sides' marks: marks_ keeps those not yet
  // waited for, mark number base_ + 1 first.
  int64_t started_mark() const override {
    marks_.push_back({host_->started_mark(), device_->started_mark()});
    return base_ + static_cast<int64_t>(marks_.size());
  }
  void all_reduce_wait_until(int64_t mark) override {
    if (mark <= base_) return;  // waited for already
    const int64_t i = mark - base_ - 1;
    if (i >= static_cast<int64_t>(marks_.size())) return all_reduce_wait();
    const auto [h, d] = marks_[static_cast<size_t>(i)];
    host_->all_reduce_wait_until(h);
    device_->all_reduce_wait_until(d);
    marks_.erase(marks_.begin(), marks_.begin() + i + 1);
    base_ = mark;
  }
  void all_reduce_wait() override {
    base_ += static_cast<int64_t>(marks_.size());
    marks_.clear();
    host_->all_reduce_wait();
    device_->all_reduce_wait();
  }

 private:
  Communicator* pick(const Tensor& t) const { return t.on_host() ? host_ : device_.get(); }
  Communicator* host_;
  std::unique_ptr<Communicator> device_;
  mutable std::vector<std::pair<int64_t, int64_t>> marks_;  // (host, device) per mark taken
  int64_t base_ = 0;                                         // marks up to it: waited for
};

}  // namespace vt
