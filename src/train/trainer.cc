// The training loop (see trainer.h).
#include "train/trainer.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkpoint/checkpoint.h"
#include "core/arena.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "model/flops.h"
#include "model/gpt.h"
#include "optim/optimizer.h"
#include "train/evaluate.h"
#include "train/metrics.h"

namespace vt {

namespace fs = std::filesystem;

namespace {

double now_seconds() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

// Peak fp32 FLOP/s used for MFU on the CPU backend: VTRAIN_PEAK_FLOPS, or cores x 2 AVX2 FMA
// units x 8 lanes x 2 flops x 2.5 GHz (a nominal figure, stated in the README).
double cpu_peak_flops() {
  if (const char* env = std::getenv("VTRAIN_PEAK_FLOPS")) return std::atof(env);
  const double cores = std::max(1u, std::thread::hardware_concurrency());
  return cores * 32.0 * 2.5e9;
}

std::string checkpoint_name(int64_t step) { return absl::StrFormat("step_%08d.h5", step); }

// Resolves --resume to a checkpoint path, or "" to start fresh.
absl::StatusOr<std::string> resume_path(const TrainOptions& o) {
  if (o.resume == "none") return std::string();
  if (o.resume != "auto") return o.resume;
  if (o.ckpt_dir.empty()) return absl::InvalidArgumentError("--resume auto needs --ckpt-dir");
  const fs::path latest = fs::path(o.ckpt_dir) / "latest";
  if (!fs::exists(latest)) return std::string();
  std::ifstream in(latest);
  std::string name;
  std::getline(in, name);
  const fs::path p = fs::path(o.ckpt_dir) / name;
  if (name.empty() || !fs::exists(p))
    return absl::DataLossError(absl::StrCat(latest.string(), " names '", name,
                                            "', which does not exist"));
  return p.string();
}

std::vector<NamedTensor> optimizer_tensors(const ParamStore& store, const optim::Optimizer& opt) {
  std::vector<NamedTensor> out;
  for (const ParamInfo& info : store.infos())
    for (const std::string& kind : opt.state_kinds(info.name))
      out.push_back({"/optim/" + info.name + "/" + kind, opt.state(info.name, kind)});
  return out;
}

}  // namespace

absl::Status run_train(const TrainOptions& o) {
  if (o.tp != 1 || o.pp != 1)
    return absl::UnimplementedError(
        "--tp/--pp > 1 need the distributed engine, which this build does not have yet; "
        "run with --tp 1 --pp 1");
  const ModelConfig& cfg = o.model;
  ParamStore store;
  GPT model(cfg);
  model.register_params(store);
  store.finalize();
  model.init_params(o.seed);

  optim::OptimizerConfig oc = optim::OptimizerConfig::defaults(cfg.n_embd);
  oc.muon.lr = o.matrix_lr * o.lr_scale;
  for (optim::AdamWHyper* h : {&oc.adamw.embedding, &oc.adamw.lm_head, &oc.adamw.value_table,
                               &oc.adamw.scalar})
    h->lr *= o.lr_scale;
  oc.schedule.warmup_steps = o.warmup_steps;
  oc.schedule.warmdown_frac = o.warmdown_frac;
  oc.max_grad_norm = o.max_grad_norm;
  if (o.polar_express) oc.muon.ns = optim::NsKind::kPolarExpress;
  optim::Optimizer opt(&store, oc);

  data::LoaderOptions lo;
  lo.vocab_size = cfg.vocab_size;
  lo.seed = o.seed;
  VT_ASSIGN_OR_RETURN(data::DataLoader train, data::DataLoader::open(o.data_dir, "train", lo));
  VT_ASSIGN_OR_RETURN(auto tokenizer, data::load_tokenizer(o.data_dir));
  const std::vector<int32_t> token_bytes = data::token_bytes_table(*tokenizer);

  int64_t start_step = 0, tokens_seen = 0;
  VT_ASSIGN_OR_RETURN(std::string resume_from, resume_path(o));
  if (!resume_from.empty()) {
    VT_ASSIGN_OR_RETURN(ModelConfig saved, read_checkpoint_config(resume_from));
    if (saved.to_json() != cfg.to_json())
      return absl::InvalidArgumentError(absl::StrCat(
          "checkpoint ", resume_from, " was trained with another model config:\n  saved: ",
          saved.to_json().dump(), "\n  asked: ", cfg.to_json().dump()));
    VT_RETURN_IF_ERROR(load_checkpoint_params(resume_from, store));
    VT_RETURN_IF_ERROR(load_checkpoint_tensors(resume_from, optimizer_tensors(store, opt)));
    VT_ASSIGN_OR_RETURN(CheckpointMeta meta, read_checkpoint_meta(resume_from));
    start_step = meta.step;
    tokens_seen = meta.tokens;
    opt.set_step_count(meta.step);
    VT_RETURN_IF_ERROR(train.load_state_json(meta.loader_state));
    std::printf("resumed from %s at step %lld\n", resume_from.c_str(),
                static_cast<long long>(start_step));
  }
  if (!o.ckpt_dir.empty()) {
    std::error_code ec;
    fs::create_directories(o.ckpt_dir, ec);
    if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create --ckpt-dir ", o.ckpt_dir, ": ", ec.message()));
    VT_RETURN_IF_ERROR(tokenizer->save((fs::path(o.ckpt_dir) / "tokenizer.json").string()));
  }
  MetricsLog metrics;
  VT_RETURN_IF_ERROR(metrics.open(o.metrics_path, start_step > 0));

  const int64_t params = store.total_numel();
  const double fpt = flops_per_token(cfg);
  const double peak = cpu_peak_flops();
  std::printf("model: %s, %d layers, d=%d, %d heads (%d kv), T=%d, vocab %d | %.2fM params | "
              "value mode %s\n",
              cfg.value_mode == ValueMode::kBaseline ? "baseline" : "value-residual", cfg.n_layer,
              cfg.n_embd, cfg.n_head, cfg.n_kv_head, cfg.seq_len, cfg.vocab_size, params / 1e6,
              value_mode_name(cfg.value_mode));
  std::printf("batch: %lld tokens/step = %d rows x %d tokens x %lld accumulation steps; %lld steps\n",
              static_cast<long long>(o.global_batch), o.micro_batch, cfg.seq_len,
              static_cast<long long>(o.grad_accum()), static_cast<long long>(o.steps));
  std::fflush(stdout);

  auto save = [&](int64_t step) -> absl::Status {
    if (o.ckpt_dir.empty()) return absl::OkStatus();
    CheckpointMeta meta;
    meta.step = step;
    meta.tokens = tokens_seen;
    meta.loader_state = train.state_json();
    meta.extra = o.to_json();
    const fs::path p = fs::path(o.ckpt_dir) / checkpoint_name(step);
    VT_RETURN_IF_ERROR(save_checkpoint(p.string(), cfg, store, meta, optimizer_tensors(store, opt)));
    const fs::path latest = fs::path(o.ckpt_dir) / "latest";
    {
      std::ofstream out(latest.string() + ".tmp");
      out << checkpoint_name(step) << "\n";
    }
    fs::rename(latest.string() + ".tmp", latest);
    std::printf("saved checkpoint %s\n", p.c_str());
    return absl::OkStatus();
  };
  auto run_eval = [&](int64_t step) -> absl::Status {
    VT_ASSIGN_OR_RETURN(EvalResult r, evaluate(model, o.data_dir, o.micro_batch, o.eval_tokens, token_bytes));
    std::printf("eval step %lld | val loss %.4f | val bpb %.4f (%lld tokens)\n",
                static_cast<long long>(step), r.loss, r.bpb, static_cast<long long>(r.tokens));
    metrics.write({{"step", step}, {"val_loss", r.loss}, {"val_bpb", r.bpb}});
    std::fflush(stdout);
    return absl::OkStatus();
  };

  const int64_t B = o.micro_batch, T = cfg.seq_len, accum = o.grad_accum();
  std::vector<int32_t> in(B * T), tg(B * T);
  const double t_start = now_seconds();
  double t_last = t_start;
  int64_t tokens_since = 0;
  if (start_step == 0 && o.eval_every > 0) VT_RETURN_IF_ERROR(run_eval(0));
  for (int64_t step = start_step; step < o.steps; ++step) {
    store.zero_grads();
    double loss_sum = 0;
    const float grad_scale = 1.0f / static_cast<float>(o.global_batch);
    for (int64_t m = 0; m < accum; ++m) {
      VT_RETURN_IF_ERROR(train.next_batch_into(B, T, 0, 1, in.data(), tg.data()));
      loss_sum += model.forward_backward(in.data(), tg.data(), static_cast<int>(B), grad_scale);
    }
    const double loss = loss_sum / static_cast<double>(o.global_batch);
    if (!std::isfinite(loss))
      return absl::InternalError(absl::StrCat("loss became ", loss, " at step ", step + 1,
                                              "; lower the learning rate (--lr-scale) or enable "
                                              "--max-grad-norm"));
    optim::StepStats st = opt.step(step, o.steps);
    tokens_seen += o.global_batch;
    tokens_since += o.global_batch;
    const int64_t done = step + 1;
    const double t = now_seconds();
    const double tok_per_s = tokens_since / std::max(1e-9, t - t_last);
    const double mfu = fpt * tok_per_s / peak;
    metrics.write({{"step", done},
                   {"loss", loss},
                   {"lr", st.matrix_lr},
                   {"tokens", tokens_seen},
                   {"tok_per_s", tok_per_s},
                   {"mfu", mfu},
                   {"grad_norm", st.grad_norm}});
    if (done % o.log_every == 0 || done == o.steps || done == start_step + 1) {
      const double elapsed = t - t_start;
      const double eta = elapsed / (done - start_step) * (o.steps - done);
      std::printf("%s\n", progress_line(done, o.steps, loss, st.matrix_lr, tok_per_s, mfu, eta).c_str());
      std::fflush(stdout);
    }
    t_last = t;
    tokens_since = 0;
    if (o.eval_every > 0 && done % o.eval_every == 0 && done != o.steps)
      VT_RETURN_IF_ERROR(run_eval(done));
    if (o.sample_every > 0 && done % o.sample_every == 0) {
      SampleOptions so;
      so.max_tokens = 48;
      so.temperature = 0;
      std::vector<int32_t> prompt = {tokenizer->bos_id()};
      auto text = tokenizer->decode(sample(model, prompt, so));
      std::printf("sample: %s\n", text.ok() ? text->c_str() : "<undecodable>");
    }
    if (o.ckpt_every > 0 && done % o.ckpt_every == 0 && done != o.steps) VT_RETURN_IF_ERROR(save(done));
  }
  VT_RETURN_IF_ERROR(run_eval(o.steps));
  VT_RETURN_IF_ERROR(save(o.steps));
  return absl::OkStatus();
}

}  // namespace vt
