// The tuner's cost model: (model, cluster, plan) -> seconds of every schedule op on every
// pipeline rank, plus what happens once per iteration (data-parallel gradient reduction,
// parameter gathers, the optimizer step). Work (work.hpp) becomes time through the hardware's
// efficiency curves (spec::HardwareEfficiency) and the collectives' latency-bandwidth costs over
// the cluster's topology (collectives.hpp):
//
//   GEMMs            (FLOPs + gemm_half_flops per GEMM) / (gemm * peak_flops)
//   fused attention  FLOPs / (attention * peak_flops)
//   (fp32_peak_flops instead of peak_flops where ExecutionOptions::fp32_gemms / fp32_attention)
//   element-wise     bytes / (memory * hbm_bandwidth) + exps / special_function_rate (where
//                    the hardware has one: a CPU, whose cross-entropy the exps bound)
//   TP collectives   inside F and B, over the stage's TP group; with tp_comm_overlap only the
//                    part longer than the pass's GEMMs is exposed
//   EP all-to-all    inside F and B, over the expert-parallel group
//   PP send/recv     the simulator's point-to-point transfer (the slowest pipeline hop)
//   vocabulary       S/T/IF/IB shards on every rank; barrier = all-reduces + broadcast of the
//                    last stage's output over the pipeline group
//   ZeRO-3           parameter all-gathers (forward, backward) and gradient reduce-scatter per
//                    micro-batch, overlapped with the pass: it costs max(compute, communication)
//   DP (ZeRO 0-2)    per iteration: all-reduce (0) or reduce-scatter + parameter all-gather
//                    (1, 2) of the stage's gradients over its DP group; experts over dp / ep
//   optimizer        the shard's kOptimizerBytesPerParameter / (memory * hbm_bandwidth); under
//                    offload_optimizer (ZeRO-Offload) (gradient + weight bytes) over the host
//                    link, host_bandwidth * host_link, plus kOptimizerBytesPerParameter /
//                    ExecutionOptions::host_update_bandwidth
//   offload          offload_activations: one copy each way of one chunk's activations of one
//                    micro-batch (what recomputation keeps) over the host link, on the
//                    simulator's copy streams (CostTable::copies_block_compute on a CPU)
#pragma once

#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/rank_links.hpp"
#include "tuner/cost/work.hpp"
#include "tuner/memory/memory_model.hpp"

namespace pipetune::tuner {

// Seconds of one pass's Work, by what the time goes to.
struct WorkTime {
  double gemm = 0.0;
  double attention = 0.0;
  double memory = 0.0;
  double tp_comm = 0.0;     // all TP collectives of the pass
  double tp_exposed = 0.0;  // the part not hidden behind GEMMs (= tp_comm without overlap)
  double ep_comm = 0.0;
  // Of ep_comm, the time past the experts' GEMMs: all of it in series; with the all-to-all in k
  // chunks overlapping the experts' GEMMs (ParallelPlan::moe_chunks), a pipeline of k chunks
  // through two resources, all-to-all A and expert GEMMs X: the pair takes max(A, X) +
  // min(A, X) / k, so max(A, X) + min(A, X) / k - X of A is exposed.
  double ep_exposed = 0.0;
  // Of the above, what does not shrink with the tokens (token slices, StageCosts::fixed): each
  // GEMM's fixed overhead (HardwareEfficiency::gemm_half_flops) and the exposed collectives'
  // latency.
  double fixed = 0.0;
  double total() const { return gemm + attention + memory + tp_exposed + ep_exposed; }
};

// The FLOP/s of a device's fp32 units: a CPU's peak_flops, a GPU's fp32_peak_flops (SpecError
// naming the hardware when its file has none).
double fp32_peak_flops(const spec::HardwareSpec& hardware);

WorkTime work_time(const Work& work, const spec::HardwareSpec& hardware, const GroupLink& tp,
                   const GroupLink& ep, const ExecutionOptions& exec);

// One pipeline rank. Pass times are for one micro-batch through all of the rank's chunks.
struct StageCost {
  WorkTime forward, input_grad, weight_grad;
  // Per micro-batch, beside the passes: ZeRO-3's parameter all-gather (forward), and in the
  // backward ZeRO-3's all-gather and gradient reduce-scatter, ZeRO-2's reduce-scatter alone.
  double sharded_forward_comm = 0.0;
  double sharded_backward_comm = 0.0;
  // Once per iteration (seconds).
  double grad_reduce = 0.0;  // DP all-reduce (ZeRO 0) or reduce-scatter (ZeRO 1)
  // Layered gradient reduction (ZeRO 0): one layer group's all-reduce (the schedule's R op, of
  // the rank's layer parameters over its chunks), and the all-reduce of what no group holds (the
  // vocabulary tables), left after the pipeline. 0 for plans that reduce after the pipeline.
  double group_reduce = 0.0;
  double tables_reduce = 0.0;
  // Layered reduction under ZeRO-2 and 3: group_reduce is one group's reduce-scatter of its held
  // gradients; under ZeRO-3, gathering one group's values, once per run of its ops
  // (engine/schedule/group_holds.hpp; the ops' sharded comm is then the tables' alone).
  double group_gather = 0.0;
  double param_gather = 0.0;     // ZeRO 1, 2: all-gather of the updated bf16 parameters
  double embedding_sync = 0.0;   // tied embeddings: gradient all-reduce of first and last stage
  double optimizer = 0.0;        // Adam step over this device's parameter shard (see above)
  double optimizer_shard = 0.0;  // the parameters that step updates (after ZeRO sharding)
  double parameters = 0.0;       // parameters this device holds (before ZeRO sharding)
  double executed_flops = 0.0;   // FLOPs this device executes per micro-batch (all passes)
};

struct OpCosts {
  schedule::CostTable table;  // per rank and op kind, one chunk, one micro-batch (seconds)
  std::vector<StageCost> stages;
  // Activations one micro-batch leaves on each rank (the simulator's units), and bytes each
  // rank holds once on top of its peak (the logits of the micro-batch being finished).
  std::vector<double> activation_bytes_per_microbatch;
  std::vector<double> transient_activation_bytes;
};

// Throws SpecError when the plan's layer split does not match pp * chunks groups, or when the
// plan offloads and the hardware has no host_bandwidth (naming both keys). Expects a plan that
// passed spec::validate.
OpCosts op_costs(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                 const spec::ParallelPlan& plan, schedule::Placement placement,
                 const ExecutionOptions& exec = {});
// The same with the plan's stage_parameters given (a StageParameterMemo's).
OpCosts op_costs(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                 const spec::ParallelPlan& plan, schedule::Placement placement,
                 const ExecutionOptions& exec, const std::vector<StageParameters>& params);

// op_costs in two steps. What it works out before the plan's ZeRO stage enters: each stage's
// passes, activations and groups; plans that differ in their ZeRO stage alone share it (a search
// prices every ZeRO stage of a plan from one).
struct PassCosts {
  OpCosts costs;                    // the passes' times and activations; no data-parallel costs
  std::vector<StageLinks> links;    // each stage's groups (where not like_previous)
  std::vector<char> like_previous;  // a stage whose costs are the previous stage's
};
PassCosts pass_costs(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                     const spec::ParallelPlan& plan, schedule::Placement placement,
                     const ExecutionOptions& exec, const std::vector<StageParameters>& params);
// Then the rest, for `plan` at its ZeRO stage: `passes` of it at any ZeRO stage. The same costs
// as op_costs(plan).
OpCosts op_costs(const PassCosts& passes, const spec::ModelSpec& model,
                 const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                 const ExecutionOptions& exec, const std::vector<StageParameters>& params);
// The same into `out`, whose buffers it reuses.
void op_costs(OpCosts& out, const PassCosts& passes, const spec::ModelSpec& model,
              const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
              const ExecutionOptions& exec, const std::vector<StageParameters>& params);

// `plan` keeping its activations and optimizer state on the device: the plan apply_offload
// prices an offload variant from.
spec::ParallelPlan without_offload(const spec::ParallelPlan& plan);

// The costs of `plan` from those of the same plan without offload (op_costs of it): offloading
// changes the copies and the optimizer step, not the passes. A search prices each offload
// variant from its plan's costs this way. Throws as op_costs does.
void apply_offload(OpCosts& costs, const spec::ParallelPlan& plan,
                   const spec::HardwareSpec& hardware, const ExecutionOptions& exec = {});
// `costs`, once `base` with apply_offload (whole or in part), back to `base`: a search prices
// a plan's offload variants one after another in one copy of its costs.
void undo_offload(OpCosts& costs, const OpCosts& base);

// Bytes of memory traffic per parameter of one Adam step over fp32 master weights: read the
// fp32 gradient (4), read and write master weights, m and v (24), write the bf16 weights (2),
// read the gradient again for the norm (4), zero the gradient buffer (4).
inline constexpr double kOptimizerBytesPerParameter = 38.0;

}  // namespace pipetune::tuner
