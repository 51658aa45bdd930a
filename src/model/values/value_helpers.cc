// Helpers shared by the value modes (declared in model/value_path.h): gradient accumulation,
// scalar gradients summed over the TP group's heads, lookups in vocabulary-sharded tables, and the
// --value-coef option v1 and x0v share.
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/cpu_kernels.h"
#include "core/ops.h"
#include "model/block_shape.h"
#include "model/config.h"
#include "model/gpt.h"
#include "model/init.h"
#include "model/table_rows.h"
#include "model/value_path.h"
#include "parallel/tensor_parallel.h"

namespace vt {

bool ValuePath::keeps_value(const ModelConfig& cfg, int layer) const {
  return reads_v1() && layer == 0 && !cfg.target_layers.empty();
}

ValueSources gather_value_sources(const ValuePath& vp, int layer, int64_t K, const Tensor& n,
                                  const Tensor& ctx, const std::vector<Tensor>& values) {
  auto rows = [K](const Tensor& t) { return t.defined() ? t.reshaped({t.numel() / K, K}) : Tensor(); };
  ValueSources src;
  if (vp.reads_v1() && !values.empty()) src.v1 = rows(values[0]);
  src.ctx = rows(ctx);
  src.gate_in = n;
  if (vp.reads_all_values())
    for (int j = 0; j < layer; ++j) src.values.push_back(rows(values[j]));
  return src;
}

}  // namespace vt

namespace vt::value_ops {

ModelOption value_coef_option() {
  return {no_default(text_flag("value-coef", "learnable",
                               "v1 / x0v: 'learnable' (the gain value.gain, init 1) or a fixed "
                               "coefficient NUMBER (no gain parameter)")),
          [](const Flags& f, ModelConfig& cfg) {
            if (!f.has("value-coef")) return;
            const std::string v = f.get_string("value-coef");
            if (v == "learnable") {
              cfg.value_coef_fixed = false;
              return;
            }
            double x = 0.0;
            cfg.value_coef_fixed = true;
            // Not a number: NaN, which check_value_coef refuses naming the flag.
            cfg.value_coef = absl::SimpleAtod(v, &x) ? x : std::nan("");
          },
          [](const ModelConfig& cfg) { return cfg.value_coef_fixed; }};
}

absl::Status check_value_coef(const ModelConfig& cfg) {
  if (!cfg.value_coef_fixed) return absl::OkStatus();
  const ConfigFieldRange& r = config_field_range("value_coef");
  if (std::isfinite(cfg.value_coef) && cfg.value_coef >= r.lo && cfg.value_coef <= r.hi)
    return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "--value-coef must be 'learnable' or a number in [", r.lo, ", ", r.hi, "] (got ",
      std::isnan(cfg.value_coef) ? std::string("something else") : absl::StrCat(cfg.value_coef),
      ")"));
}

void accumulate(Tensor& grad, const Tensor& dv, float alpha) {
  if (!grad.defined()) grad = Tensor::zeros(dv.shape(), dv.dtype(), dv.device());
  ops::axpy(grad, dv, alpha);
}

void accumulate_coef(Tensor& grad, const Tensor& dv, const Tensor& coef, int64_t elem) {
  if (!grad.defined()) grad = Tensor::zeros(dv.shape(), dv.dtype(), dv.device());
  ops::axpy_coef(grad, dv, coef, elem);
}

void grad_scalar(const ValueLayerCtx& c, int param, int64_t elem, const Tensor& dv,
                 const Tensor& src) {
  Tensor s = Tensor::zeros({1}, DType::kF32, dv.device());
  ops::dot_into(dv, src, s);
  tp::reduce_replicated_grad(c.tp, s);
  ops::axpy(c.store->grad(param).flat(elem, 1), s, 1.0f);
}

double dot_host(const ValueLayerCtx& c, const Tensor& dv, const Tensor& src) {
  return tp::reduce_replicated_grad(c.tp, ops::dot(dv, src));
}

namespace {
// This rank's rows of table `table` (rows [vocab_offset, + rows) of the vocabulary) into
// full (N, K), zero rows for ids of other shards.
void lookup_rows(const ValueLayerCtx& c, int table, const Tensor& full) {
  if (!c.store->info(table).host) {
    ops::embedding(c.store->param(table), c.vocab_offset, c.ids, full);
  } else if (c.table_rows && c.table_rows->holds(table)) {
    ops::embedding(c.table_rows->rows(table), 0, c.table_ids, full);
  } else {  // a host-kept table read without prepared rows (decoding): gathered on the host
    const Tensor host = Tensor::zeros(full.shape(), DType::kF32, Device::kCPU);
    ops::embedding(c.store->param(table), c.vocab_offset, c.ids.to(Device::kCPU), host);
    ops::copy(full, host);
  }
}
void scatter_rows(const ValueLayerCtx& c, int table, const Tensor& full) {
  if (!c.store->info(table).host) {
    ops::embedding_backward(full, c.ids, c.vocab_offset, c.store->grad(table));
    return;
  }
  VT_CHECK_MSG(c.table_rows && c.table_rows->holds(table),
               "the backward of a host-kept value table needs the pass's TableRows");
  ops::embedding_backward(full, c.table_ids, 0, c.table_rows->grad(table));
}
}  // namespace

// Each TP rank looks up the rows it owns (zeros elsewhere), then tp::rows_to_heads sums the
// pieces and leaves each rank its own heads.
void table_lookup(const ValueLayerCtx& c, int table, const Tensor& out) {
  const int64_t N = c.ids.numel(), K = c.store->info(table).shape.back();
  if (c.tp->size() == 1) {
    lookup_rows(c, table, out);
    return;
  }
  Tensor full = Tensor::zeros({N, K}, out.dtype(), out.device());
  lookup_rows(c, table, full);
  tp::rows_to_heads(c.tp, full, out);
}

// Gather every rank's head slice of the gradient, scatter-add the rows this rank owns.
void table_lookup_backward(const ValueLayerCtx& c, const Tensor& de, int table) {
  const int64_t N = c.ids.numel(), K = c.store->info(table).shape.back();
  if (c.tp->size() == 1) {
    scatter_rows(c, table, de);
    return;
  }
  Tensor full = Tensor::zeros({N, K}, de.dtype(), de.device());
  tp::heads_to_rows(c.tp, de, full);
  scatter_rows(c, table, full);
}

std::vector<float> aligned_table_init(const ModelConfig& cfg, int layer, uint64_t seed) {
  const int64_t Vp = cfg.vocab_padded, C = cfg.n_embd, K = cfg.kv_dim();
  std::vector<float> wte = generate_init(GPT::wte_init(), "wte", Vp * C, seed);
  std::vector<float> rstd(Vp);
  cpu::rmsnorm_forward<float>(wte.data(), wte.data(), rstd.data(), Vp, C, 1.0f, cfg.norm_eps);
  std::vector<float> wv = initial_value_projection(cfg, layer, seed);
  std::vector<float> table(Vp * K);
  cpu::gemm<float>(false, false, Vp, K, C, 1.0f, wte.data(), C, wv.data(), K, 0.0f, table.data(),
                   K);
  return table;
}

}  // namespace vt::value_ops
