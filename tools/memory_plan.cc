// memory_plan: the start-up memory estimate of `vtrain train` (src/train/memory_estimate.cc)
// for any preset and layout, without allocating the model: for planning runs (which micro-batch
// fits, whether --recompute is needed) and for the numbers in bench/README.md.
//   memory_plan PRESET B T [--tp N] [--pp N] [--dp N] [--vocab V] [--value MODE] [--recompute]
//               [--act-dtype bf16|f32]
// Prints one line per pipeline stage (the estimate of that stage's ranks).
#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/arena.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/value_mode.h"
#include "parallel/process_grid.h"
#include "train/memory_estimate.h"

namespace {

// A communicator that only reports a size (registration asks for the TP rank and size).
class SizeOnly final : public vt::Communicator {
 public:
  SizeOnly(int size, int rank) : size_(size), rank_(rank) {}
  int size() const override { return size_; }
  int rank() const override { return rank_; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_reduce_sum(double*, int64_t) override {}
  void all_reduce_max(float*, int64_t) override {}
  void all_gather(const float*, float*, int64_t) override {}
  void reduce_scatter_sum(const float*, float*, int64_t) override {}
  void broadcast(float*, int64_t, int) override {}
  void send(const float*, int64_t, int, int) override {}
  void recv(float*, int64_t, int, int) override {}
  void barrier() override {}

 private:
  int size_, rank_;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr,
                 "usage: memory_plan PRESET B T [--tp N] [--pp N] [--dp N] [--vocab V] "
                 "[--value MODE] [--recompute] [--act-dtype bf16|f32]\n");
    return 2;
  }
  auto cfg_or = vt::preset_config(argv[1]);
  if (!cfg_or.ok()) {
    std::fprintf(stderr, "%s\n", std::string(cfg_or.status().message()).c_str());
    return 2;
  }
  vt::ModelConfig cfg = *cfg_or;
  const int B = std::atoi(argv[2]);
  cfg.seq_len = std::atoi(argv[3]);
  vt::GridShape shape;
  bool recompute = false;
  vt::DType act = vt::DType::kBF16;
  cfg.vocab_size = 32768;
  for (int i = 4; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--tp") shape.tp = std::atoi(next().c_str());
    else if (a == "--pp") shape.pp = std::atoi(next().c_str());
    else if (a == "--dp") shape.dp = std::atoi(next().c_str());
    else if (a == "--vocab") cfg.vocab_size = std::atoi(next().c_str());
    else if (a == "--value") {
      auto m = vt::parse_value_mode(next());
      if (!m.ok()) { std::fprintf(stderr, "%s\n", std::string(m.status().message()).c_str()); return 2; }
      cfg.value_mode = *m;
    } else if (a == "--recompute") recompute = true;
    else if (a == "--act-dtype") act = next() == "f32" ? vt::DType::kF32 : vt::DType::kBF16;
    else { std::fprintf(stderr, "unknown option %s\n", a.c_str()); return 2; }
  }
  if (auto st = cfg.finalize(); !st.ok()) {
    std::fprintf(stderr, "%s\n", std::string(st.message()).c_str());
    return 2;
  }
  SizeOnly tp(shape.tp, 0);
  for (int stage = 0; stage < shape.pp; ++stage) {
    auto [begin, end] = vt::stage_layers(cfg.n_layer, shape.pp, stage);
    vt::ModelParallel par;
    par.tp = &tp;
    par.layer_begin = begin;
    par.layer_end = end;
    vt::GPT model(cfg, par);
    vt::ParamStore store;  // registration only: nothing is allocated
    model.register_params(store);
    vt::GridCoords coords;
    coords.pp = stage;
    const vt::MemoryEstimate m =
        vt::estimate_memory(cfg, store, shape, coords, end - begin, B, act, recompute);
    std::printf("%s %s B=%d T=%d tp=%d pp=%d dp=%d%s stage %d (layers %d..%d): %s\n", argv[1],
                vt::value_mode_name(cfg.value_mode), B, cfg.seq_len, shape.tp, shape.pp,
                shape.dp, recompute ? " recompute" : "", stage, begin, end - 1,
                m.to_string().c_str());
  }
  return 0;
}
