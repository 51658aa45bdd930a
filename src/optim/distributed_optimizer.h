// DistributedOptimizer: the optimizer of a dp x tp x pp layout (docs/design.md "Parallelism": data
// parallel with ZeRO-1, distributed Muon), giving the same updates as its own 1-rank grid run
// to fp32 round-off. Each rank holds its stage's parameters, TP-sliced; gradients are already
// complete (summed over DP by all_reduce_grads, over PP for PP-replicated parameters by the
// trainer).
//
// Global grad norm: every element of the model counted once (grad_sync.h), so clipping matches.
//
// Muon (kMatrix): each matrix of the stage is orthogonalized as a whole exactly once per step,
// by its owner, a stage rank (TP coordinate owner % tp, DP coordinate owner / tp) chosen by
// muon_owners below: the stage's matrices balanced by elements over its tp x dp ranks. Its momentum
// buffer lives only in the owner's DP replica, on the local TP shards of that replica's TP group
// (so a rank keeps and updates about 1/dp of the stage's momentum). That TP group updates the
// momentum of its shards, all-gathers the Nesterov directions (columns reordered for column
// splits), and the owner orthogonalizes the whole matrix. Owners work round by round (a round:
// consecutive matrices, as many as keep each owner's share within kNsBatchElements elements),
// each running its share of a round as one newton_schulz_batched call (same-shape matrices
// batched; each result bitwise newton_schulz's): round r's results are broadcast over the stage
// in matrix order (Communicator::broadcast_start; as bf16 where Newton-Schulz ran in bf16 and the
// stage has several ranks: the same bits) while round r+1 is orthogonalized, and every rank
// applies its own slice of round r with the scale of the GLOBAL shape.
//
// AdamW (everything else) with ZeRO-1: a parameter's local shard of n elements is cut into dp
// contiguous chunks of ceil(n / dp) elements (the last ones shorter or empty); DP rank d keeps
// exp_avg / exp_avg_sq for chunk d only, updates that chunk of the parameter, and the updated
// chunks are all-gathered over DP (padded to equal size, in buckets) so every replica ends with
// the whole updated shard.
//
// Parameters the store keeps in host memory (--table-offload: the value tables) keep their AdamW
// states in host memory too, in gather buckets of their own; the host runs their update (the CPU
// backend's multi-threaded AdamW) on a side thread while the device runs the other updates and
// Muon, and their buckets are gathered after it joins. A CPU store runs them in line.
//
// Gradient sum (the ZeRO stage, --zero): with stage 1 the gradients arrive whole, summed over DP
// by all_reduce_grads / OverlappedGradSync (grad_sync.h). With stage 2, reduce_grads() sums them
// INTO THE OWNERS instead: each bucket of AdamW parameters (the gather buckets below) is packed
// by owner (rank r's chunks at r * bucket size + pack, zero padded: the gather's layout) and
// reduce-scattered, so DP rank d receives the sums of its own chunks; each Muon matrix's local
// shard is reduced (Communicator::reduce_sum) to the DP rank of its owner's replica, the only one
// that keeps its momentum. The rest of the gradient arena keeps this rank's unsummed values,
// which nothing reads: the norm is computed from the owned parts (every element of the model
// counted once: an owned range of a parameter the norm mask counts), the AdamW update reads its
// chunk, the Muon momentum its held matrices. Wire: f32, or the bf16 wire (each rank's values
// rounded to bf16, fp32 additions rounded to bf16; a group of one rounds) as --grad-sync bf16.
// Per rank and step that sends (dp - 1) / dp of the parameters' bytes on the wire (plus the
// AdamW buckets' padding, under dp elements a parameter), against twice that for the all-reduce.
//
// Parameter return (stage 2, docs/design.md "Parallelism"): step() STARTS the all-gathers of the
// updated AdamW chunks (Communicator::all_gather_start, bucket by bucket in parameter order) and
// returns; finish_param_gathers(layer) waits for the buckets that hold a parameter the forward
// reads at `layer` (the trainer's PassHooks::params_needed, right before that layer's first use
// in the next step's forward: -1 the embedding and the shared parameters, kHeadLayer the output
// head) and writes them back, so the gathers run behind the forward layer by layer. What travels:
//   - bf16 for the output head's weight (kLmHead) when the store keeps a bf16 compute copy: every
//     read of it in training is a GEMM on the compute copy, so the owners send bf16(master), the
//     very cast refresh_compute_copy makes, straight into every replica's compute copy (the same
//     bits as one process's). The fp32 master stays on its owner only: a replica's master of the
//     chunks it does not own is stale until sync_master_weights() (an fp32 gather of those
//     chunks; the trainer calls it before a checkpoint or an evaluation reads the masters).
//   - fp32 for every other AdamW parameter: the forward reads them in fp32 (embedding lookups of
//     wte and the value tables, scalars, gains, coefficients, the smear gate's lambda; with
//     --adamw-matrices the block-shape projections read matrices in fp32), so a bf16 copy would
//     change the model. Parameters kept in host memory, and stage 1, gather fp32 inside step().
// Muon's matrices return by the stage broadcast of their orthogonalized updates (bf16 with bf16
// Newton-Schulz; every rank applies the update to its own fp32 master, so no master is stale):
// with stage 2 step() leaves those broadcasts in flight too, and finish_param_gathers(layer)
// waits for the matrices of `layer` and applies them (ops::muon_apply, this step's lr and decay:
// the same floats, later). Newton-Schulz itself still runs inside step().
//
// Collectives: step() on every rank of the grid; gather_state() of any parameter on every rank of
// the DP group, in the same order (AdamW: the chunks' all-gather; Muon: a broadcast from the
// owner's replica). scatter_state() is local (keeps what this rank stores).
//
// Devices: the optimizer runs where the ParamStore lives. The states are f32 tensors on the
// store's device and every step touches parameters, gradients and states only through ops
// (adamw_update, muon_momentum, gemm-based newton_schulz, copy_2d, muon_apply), Tensor copies and
// the communicators' Tensor collectives: no host access for a device store. A CPU store computes
// exactly the floats of the host functions (the CPU backend runs them). A step ends with
// store->refresh_compute_copy(). The updates read the step's values (every group's lr, the bias
// corrections of the step count, Muon's momentum and weight decay, the clip factor, whether to
// apply) from the step's scalars in the store's device memory (ops::StepValues; uploaded from a
// pinned mirror once a step), never as kernel arguments, so a CUDA graph of the step replays them
// with each step's values (begin_step / step_on_device / finish_step below). Checkpoint access (gather_state / scatter_state) uses host
// tensors whatever the store's device.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/staged_tensor.h"
#include "core/tensor.h"
#include "optim/muon.h"
#include "optim/optimizer.h"
#include "parallel/process_grid.h"

namespace vt::optim {

// The owners of a stage's Muon matrices (`elements`: each matrix's global elements, in
// ParamStore order) over `ranks` stage ranks: greedy, largest first (ties in order), each to the
// rank with the fewest elements so far (ties to the lowest rank). Deterministic: every rank, and
// the planner's memory estimate, computes the same owners. Balances the momentum each DP replica
// keeps, the Newton-Schulz work (its FLOPs grow with rows x cols x min(rows, cols); a layer's
// matrices share their smaller side, d) and the bytes each owner broadcasts; round-robin (k mod
// ranks) put every MLP matrix of a d x 4d model on the even ranks at dp 8.
std::vector<int> muon_owners(const std::vector<int64_t>& elements, int ranks);

class DistributedOptimizer {
 public:
  // The store must be finalized and, with the grid, outlive the optimizer. Collective over the
  // grid (checks that the stage's ranks hold the same matrices; finds PP-replicated parameters).
  // Block matrices must be 2-D and split evenly over TP with TP rank r holding slice r.
  // zero_stage: 1 (gradients summed whole before step) or 2 (reduce_grads, see above).
  DistributedOptimizer(ParamStore* store, OptimizerConfig config, const ProcessGrid& grid,
                       int zero_stage = 1);
  // Waits for what step() left in flight (stage 2's parameter return): its buffers die here.
  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  // ZeRO-2's gradient sum over DP into the owners (see above), in the wire format `wire` (kF32
  // or kBF16). Collective over the DP group, after the gradients are final on this rank (summed
  // over PP for PP-replicated parameters). Needs zero_stage 2.
  void reduce_grads(DType wire);
  // The same started during backward (the trainer's hooks, as OverlappedGradSync): once layer
  // `layer`'s gradients are final (after the last micro-batch's backward of the layer), resp.
  // the output head's, starts the reduces of its Muon matrices and of every AdamW bucket whose
  // parameters are then all final (non-blocking: Communicator::reduce_scatter_sum_start,
  // reduce_sum_start and their bf16 forms); reduce_grads() then starts the rest (embedding,
  // parameters shared over the pipeline, kept in host memory), waits for everything and writes
  // the AdamW sums back. Every DP rank calls them in the same order, with the same wire.
  void layer_grads_done(int layer, DType wire);
  void head_grads_done(DType wire);
  int zero_stage() const { return zero_stage_; }
  // Stage 2's parameter return (see above). The layer index of the output head's parameters.
  static constexpr int kHeadLayer = 1 << 30;
  // Waits for (and writes back) the started gathers of every bucket holding a parameter read at
  // `layer` (and every bucket started before them), and the Muon results of that layer's
  // matrices (applied). Collective-free; a no-op when none is pending. kHeadLayer and above:
  // all of them.
  void finish_param_gathers(int layer = kHeadLayer);
  // Every replica's fp32 masters whole again (finish_param_gathers, then the fp32 all-gather of
  // the chunks whose return was bf16). Collective over DP; a no-op when nothing is stale.
  void sync_master_weights();
  // Whether a parameter's updated chunks return in bf16 (into the compute copy).
  bool returns_bf16(const std::string& name) const;
  // Stage 2, after reduce_grads: the whole summed gradient on every DP rank (the parts this rank
  // does not own zeroed, then an f32 all-reduce over DP, which adds zeros to each owned sum),
  // for the non-finite report, which reads the first replica's arena. Collective over DP; a
  // no-op with stage 1 (the gradients are whole already).
  void whole_grads();

  // One update at 0-based step `step_index` of `total_steps` (same schedules, clipping and
  // stats on every layout). Gradients must already be summed over DP (stage 1: whole; stage 2:
  // by reduce_grads). Clipping multiplies each gradient by the clip factor as the update kernels
  // read it (the bits of scaling it in place first); the store's grads are left as they are,
  // not zeroed. With stage 2 (and dp or the stage > 1) the updated parameters are complete only
  // after finish_param_gathers() (the next forward's waits, or the next begin_step), the fp32
  // masters of bf16-returned chunks only after sync_master_weights().
  StepStats step(int64_t step_index, int64_t total_steps);
  // The same with the global grad norm already computed by grad_norm() (the trainer checks it
  // for non-finite values before any weight changes).
  StepStats step(int64_t step_index, int64_t total_steps, double grad_norm);

  // The step split for a CUDA graph (train/graph_optimizer_step.h), on a 1-rank grid whose
  // parameters are all on the store's device: begin_step() is the host's part (the schedule's
  // values for the step written into the step's scalars, the step count advanced; the stats
  // without grad_norm and clip_scale), step_on_device() the device's part, capturable: the
  // scalars' upload, ops::step_guard (the gradient norm, the clip factor and the finite check of
  // the norm and of `losses`, the step's per-token losses, on the device) and the updates, which
  // read it all when they run and leave parameters and states untouched when the guard says the
  // step is not finite. After the device work, finish_step() reads the guard back (one small
  // copy, synchronizing) and completes the stats; *applied says whether the update ran. The same
  // floats as step(): the same schedule values, the norm summed by the same launches, the clip
  // in the same fp64 operations.
  StepStats begin_step(int64_t step_index, int64_t total_steps);
  void step_on_device(const Tensor& losses);
  StepStats finish_step(StepStats s, bool* applied);
  // Why step_on_device cannot run on this optimizer ("" when it can).
  std::string device_step_unsupported() const;
  // The device buffers step_on_device reads or writes that outlive it (a CUDA graph's key).
  std::vector<const void*> device_step_buffers() const;
  // Collective over the grid: the global gradient norm (every element counted once).
  double grad_norm();

  // Checkpoint access by parameter name (local shapes, as on one process for this TP slice):
  // AdamW parameters have "exp_avg", "exp_avg_sq"; Muon parameters "momentum_buffer".
  const std::vector<std::string>& state_kinds(const std::string& name) const;
  // A fresh HOST f32 tensor (Device::kCPU) with the parameter's local shape, copied from the
  // store's device; AdamW states are assembled from the ZeRO chunks (collective over DP).
  Tensor gather_state(const std::string& name, const std::string& kind);
  // The same into `out`, a host f32 tensor of the parameter's local shape (a checkpoint
  // snapshot's buffer, reused from save to save: no fresh pages to fault in).
  void gather_state_into(const std::string& name, const std::string& kind, const Tensor& out);
  // Sets a state from its whole local f32 tensor (host or the store's device), keeping only
  // what this rank stores.
  void scatter_state(const std::string& name, const std::string& kind, const Tensor& local_full);

  int64_t step_count() const { return step_count_; }
  void set_step_count(int64_t t);
  const OptimizerConfig& config() const { return config_; }

  // Floats of optimizer state held by this rank: AdamW exp_avg + exp_avg_sq (only the owned
  // ZeRO chunks, about 2 * numel / dp) and Muon momentum (the local shards of the matrices its DP
  // replica owns, about numel / dp).
  int64_t adamw_state_numel() const { return 2 * (exp_avg_.numel() + exp_avg_host_.numel()); }
  // Of those, the floats kept in host memory (parameters the store keeps there).
  int64_t host_state_numel() const { return 2 * exp_avg_host_.numel(); }
  int64_t muon_state_numel() const { return momentum_.numel(); }
  // Stage rank that orthogonalizes a Muon parameter (diagnostics and tests).
  int muon_owner(const std::string& name) const;

 private:
  struct MatrixPlan {
    int param = 0;          // ParamStore index
    int64_t coefs = 0;      // its MuonApplyCoefs in scalars_
    int owner = 0;          // stage rank running newton_schulz
    int64_t rows = 0, cols = 0;  // global shape
    int64_t state = -1;     // offset in momentum_ (held only)
    int64_t update = -1;    // offset in update_ (held only; see muon_order)
    bool held = false;      // this DP replica keeps its momentum (owner / tp == dp coordinate)
  };
  struct AdamPlan {
    int param = 0;
    int64_t chunk = 0;      // ceil(numel / dp)
    int64_t lo = 0, hi = 0; // owned element range of the local shard
    int64_t state = 0;      // offset in exp_avg_ / exp_avg_sq_ (the _host_ pair when host)
    int64_t pack = 0;       // offset of this parameter's chunk in its gather bucket
    bool host = false;      // the store keeps the parameter in host memory
    bool bf16 = false;      // stage 2 returns it in bf16 into the compute copy (see above)
  };
  struct Bucket {
    int begin = 0, end = 0; // range of adam_ entries
    int64_t size = 0;       // per-rank chunk floats of the bucket
    bool host = false;      // its parameters are kept in host memory
    bool bf16 = false;      // its parameters return in bf16
    int need = kHeadLayer;  // the first layer whose forward reads one of its parameters
  };

  // The updates of the owned chunks of the parameters kept in host memory (host) or not, and
  // the all-gathers of their buckets over DP.
  void adamw_update(bool host);
  void adamw_gather(bool host);
  const Tensor& state_tensor(const AdamPlan& a, const std::string& kind) const;
  // Marks in `fresh_copy` (one flag per parameter) the matrices whose bf16 compute copy its
  // applies wrote (ops::muon_apply's copy), for refresh_compute_copy to skip.
  void muon_step(std::vector<char>& fresh_copy);
  // The updates of a step whose scalars are uploaded (guard included): AdamW, its gathers, Muon,
  // the compute copy.
  void apply_updates();
  // Stage 2's norm parts / stage 1's (grad_norm_parts), in the order the norm sums them.
  void norm_parts(std::vector<Tensor>* device, std::vector<Tensor>* host) const;
  // The coefficients of slot `at` of the step's scalars (host mirror).
  template <class C>
  void write_coefs(int64_t at, const C& c);
  // Muon's rounds (muon_round_begin_) and, within round [lo, hi), the matrices `owner`
  // orthogonalizes, grouped by shape (groups in the order of their first matrix): the order of
  // its newton_schulz_batched list, and of update_ for the held ones, so that each batch's
  // Nesterov directions (without TP) and results lie one after another.
  void plan_muon_rounds();
  std::vector<size_t> muon_order(size_t lo, size_t hi, int owner) const;
  const AdamPlan& adam_plan(int param, const std::string& who) const;
  const MatrixPlan& matrix_plan(int param, const std::string& who) const;

  // Stage 2's norm: the squared owned parts of the counted parameters, summed over the grid.
  double owned_grad_norm() const;
  // Stage 2: starts the reduce of every bucket and matrix whose parameters are all final
  // (final_) and that has not started this step.
  void start_final_reduces(DType wire);
  std::vector<char> final_;           // per parameter: its gradient is final this step
  std::vector<char> bucket_started_;  // per bucket / matrix, this step
  std::vector<char> matrix_started_;
  std::vector<Tensor> reduce_send_, reduce_recv_;  // per bucket: packed input, owned sums
  // Stage 2's parameter return: starts the gathers of the device buckets (end of step()).
  void start_param_gathers();
  // Writes bucket bi's gathered chunks into the masters (fp32) or the compute copy (bf16).
  void unpack_gather(size_t bi, const Tensor& recv, bool into_masters);
  std::vector<Tensor> gather_send_, gather_recv_;  // per bucket, while its gather is in flight
  std::vector<int64_t> gather_mark_;               // per bucket: dp's started_mark() after it
  bool gathers_pending_ = false;  // gathers or Muon results not yet written back
  // Stage 2: a Muon result broadcast in step() and applied by finish_param_gathers.
  struct MuonPending {
    Tensor result;      // the whole orthogonalized matrix (f32 or bf16), in flight until mark
    int64_t mark = 0;   // the stage communicator's started_mark() after its broadcast
  };
  std::vector<MuonPending> muon_pending_;  // per matrix
  // Applies matrix m's orthogonalized whole result x (released) to this rank's slice of the
  // master and its compute copy with the step's lr and decay from the device scalars
  // (begin_step); marks the copy in *fresh_copy when given.
  void muon_apply_result(const MatrixPlan& m, Tensor& x, std::vector<char>* fresh_copy);
  bool masters_stale_ = false;  // bf16 returns since the last sync_master_weights

  ParamStore* store_;
  OptimizerConfig config_;
  int zero_stage_ = 1;
  const ProcessGrid& grid_;
  NsCoefficients coeffs_;
  int64_t step_count_ = 0;
  std::vector<uint8_t> norm_mask_;

  std::vector<MatrixPlan> matrices_;
  std::vector<AdamPlan> adam_;
  std::vector<Bucket> buckets_;
  std::vector<int> plan_of_;  // ParamStore index -> index in matrices_ or adam_
  // f32 states on the store's device (1-D, the offsets of the plans).
  Tensor momentum_;
  Tensor exp_avg_, exp_avg_sq_;
  Tensor exp_avg_host_, exp_avg_sq_host_;  // host memory, for parameters kept there
  Tensor update_;  // Muon's Nesterov directions (MatrixPlan::update), reused every step
  // The step's scalars (ops::StepValues): the guard (core/optim_math.h), then the AdamWCoefs of
  // each AdamW group (adam_coefs_), Muon's MuonMomentumCoefs (momentum_coefs_) and each matrix's
  // MuonApplyCoefs (MatrixPlan::coefs). Written on the host by begin_step, uploaded in the step.
  StagedTensor scalars_;
  std::vector<int64_t> adam_coefs_;  // by ParamGroup value; -1: no AdamW parameter of the group
  int64_t momentum_coefs_ = 0;
  std::vector<size_t> muon_round_begin_;  // first matrix of each Muon round
};

}  // namespace vt::optim
