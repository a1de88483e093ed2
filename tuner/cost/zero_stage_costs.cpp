// The second step of op_costs (op_costs.hpp): what the plan's ZeRO stage and offload add to its
// pass costs. The data-parallel collectives of each stage's parameters (ZeRO 0-3, layered
// reduction, EmbRace's sparse rows), the optimizer step and its offload (ZeRO-Offload), the
// activation copies (KARMA), and the F, B and W op costs those put together with the passes.
#include "tuner/cost/op_costs.hpp"

#include <algorithm>
#include <string>

#include "engine/errors.hpp"
#include "tuner/cost/as_double.hpp"
#include "tuner/cost/fault_costs.hpp"
#include "tuner/cost/rank_links.hpp"
#include "tuner/cost/sparse_embedding_cost.hpp"

namespace pipetune::tuner {

namespace {

// Bytes/s a copy between a device and host memory reaches. SpecError naming `plan_key` and the
// hardware's key when the hardware does not say (0 = unknown).
double host_link_rate(const spec::HardwareSpec& hw, const char* plan_key) {
  if (hw.host_bandwidth > 0.0 && hw.efficiency.host_link > 0.0)
    return hw.host_bandwidth * hw.efficiency.host_link;
  // The messages are built only here: every offloading plan's costs ask for the rate.
  const std::string offload = plan_key;
  const std::string which = hw.name.empty() ? "this hardware" : "hardware " + hw.name;
  if (!(hw.host_bandwidth > 0.0))
    throw SpecError({offload, "hardware.host_bandwidth"},
                    offload + " needs the hardware's host_bandwidth (bytes/s over PCIe), which " +
                        which + " does not give");
  throw SpecError({offload, "hardware.efficiency.host_link"},
                  offload + " needs a positive efficiency.host_link (the share of " +
                      "host_bandwidth copies reach), which " + which + " does not give");
}

// The optimizer step over `shard` parameters. On the device: its memory traffic at the
// element-wise rate. Offloaded (ZeRO-Offload): the gradients go down and the updated weights
// come up over the host link, and the update streams host memory at host_update_bandwidth.
double optimizer_step_time(double shard, const spec::ParallelPlan& plan,
                           const spec::HardwareSpec& hw, const ExecutionOptions& exec) {
  const double device_rate = hw.efficiency.memory * hw.hbm_bandwidth;
  if (!plan.offload_optimizer) return shard * kOptimizerBytesPerParameter / device_rate;
  const double link = host_link_rate(hw, "plan.offload_optimizer");
  const double copies = shard * (exec.gradient_reduce_bytes + exec.activation_bytes) / link;
  const double host_rate =
      exec.host_update_bandwidth > 0.0 ? exec.host_update_bandwidth : device_rate;
  return copies + shard * kOptimizerBytesPerParameter / host_rate;
}

// Offload tier (KARMA): each stage's copy, each way, of one chunk's activations of one micro-
// batch (the bytes its recomputation keeps), and whether the copies hold the compute stream.
void set_offload_costs(OpCosts& out, const spec::ParallelPlan& plan, const spec::HardwareSpec& hw,
                       const ExecutionOptions& exec) {
  out.table.copies_block_compute = exec.copies_block_compute;
  if (!plan.offload_activations) return;
  const double link = host_link_rate(hw, "plan.offload_activations");
  for (std::size_t i = 0; i < out.table.stages.size(); ++i)
    out.table.stages[i].offload = out.activation_bytes_per_microbatch[i] / plan.chunks / link;
}

// Data parallelism over the stage's parameters: the gradient reduction and parameter gathers
// of its ZeRO stage, and the optimizer step over the parameters the rank keeps.
// `touched_rows`: with the sparse embedding gradient (EmbRace), the rows of the stage's input
// table shard a replica touches an iteration, `width` wide; 0 otherwise.
void set_data_parallel_costs(StageCost& st, const StageParameters& sp,
                             const spec::ParallelPlan& plan, const StageLinks& links,
                             const spec::HardwareSpec& hw, const ExecutionOptions& exec,
                             double touched_rows, double width) {
  const double param_bytes = exec.activation_bytes;  // bf16 / fp16 weights
  const double grad_bytes = exec.gradient_reduce_bytes;
  const double shared = sp.dense + sp.vocabulary;
  // The sparse gradient leaves the input table out of the dense reduction: its touched rows are
  // all-gathered without ZeRO, sent to their owners under ZeRO (per micro-batch under ZeRO-2
  // and 3, `touched_rows` then being a micro-batch's).
  const bool sparse = plan.sparse_embedding_gradient && sp.input_table > 0.0;
  const double sparse_time =
      !sparse ? 0.0
      : plan.zero_stage == 0
          ? sparse_rows_reduce_time(touched_rows, width, grad_bytes, plan.dp, links.dp)
          : sparse_rows_scatter_time(touched_rows, width, grad_bytes, plan.dp, links.dp);
  const double dense_shared = sparse ? shared - sp.input_table : shared;
  st.parameters = sp.total();
  const int edp = plan.dp / plan.ep;
  const double gather =
      collective_time(Collective::AllGather, shared * param_bytes, links.dp) +
      collective_time(Collective::AllGather, sp.expert * param_bytes, links.expert_dp);
  const double scatter =
      collective_time(Collective::ReduceScatter, dense_shared * grad_bytes, links.dp) +
      collective_time(Collective::ReduceScatter, sp.expert * grad_bytes, links.expert_dp) +
      (plan.zero_stage >= 1 ? sparse_time : 0.0);
  if (plan.zero_stage >= 2 && spec::reduces_per_group(plan)) {
    // Layered reduction paired with ZeRO (engine/schedule/group_holds.hpp): a layer group's
    // gradients are held over its micro-batches and reduce-scattered once, by its R op; under
    // ZeRO-3 its values are gathered once per run of its ops (StageCosts::run_gather). The ops
    // still gather and reduce-scatter the vocabulary tables each time.
    const double v = plan.chunks;
    const double tables_gather =
        collective_time(Collective::AllGather, sp.vocabulary * param_bytes, links.dp);
    const double tables_scatter =
        collective_time(Collective::ReduceScatter, (dense_shared - sp.dense) * grad_bytes,
                        links.dp) +
        sparse_time;
    st.group_reduce =
        collective_time(Collective::ReduceScatter, sp.dense / v * grad_bytes, links.dp) +
        collective_time(Collective::ReduceScatter, sp.expert / v * grad_bytes, links.expert_dp);
    if (plan.zero_stage >= 3) {
      st.group_gather =
          collective_time(Collective::AllGather, sp.dense / v * param_bytes, links.dp) +
          collective_time(Collective::AllGather, sp.expert / v * param_bytes, links.expert_dp);
      st.sharded_forward_comm = tables_gather;
      st.sharded_backward_comm = tables_gather + tables_scatter;
    } else {
      st.sharded_backward_comm = tables_scatter;
      st.param_gather = gather;
    }
  } else if (plan.zero_stage >= 3) {
    st.sharded_forward_comm = gather;
    st.sharded_backward_comm = gather + scatter;
  } else if (plan.zero_stage == 2) {
    // Sharded gradients are reduce-scattered as each micro-batch's backward computes them, layer
    // by layer (DeepSpeed's ZeRO-2, pipetune's engine): no full gradient outlives its layer's
    // pass. The updated parameters are all-gathered once per iteration.
    st.sharded_backward_comm = scatter;
    st.param_gather = gather;
  } else if (plan.zero_stage == 1) {
    st.grad_reduce = scatter;
    st.param_gather = gather;
  } else {
    st.grad_reduce =
        collective_time(Collective::AllReduce, dense_shared * grad_bytes, links.dp) +
        collective_time(Collective::AllReduce, sp.expert * grad_bytes, links.expert_dp) +
        sparse_time;
    if (spec::reduces_per_group(plan)) {
      // The rank's chunks hold near-equal shares of its layers (spec::layer_split).
      const double v = plan.chunks;
      st.group_reduce =
          collective_time(Collective::AllReduce, sp.dense / v * grad_bytes, links.dp) +
          collective_time(Collective::AllReduce, sp.expert / v * grad_bytes, links.expert_dp);
      st.tables_reduce =
          collective_time(Collective::AllReduce,
                          (sparse ? sp.vocabulary - sp.input_table : sp.vocabulary) * grad_bytes,
                          links.dp) +
          sparse_time;
    }
  }
  st.optimizer_shard = plan.zero_stage >= 1 ? shared / plan.dp + sp.expert / edp : sp.total();
  st.optimizer = optimizer_step_time(st.optimizer_shard, plan, hw, exec);
}

// The F, B and W costs of one layer group: the stage's pass times with its ZeRO-2/3
// communication, beside the pass or in series, split over the rank's chunks.
void set_pass_op_costs(OpCosts& out, const spec::ParallelPlan& plan, const ExecutionOptions& exec) {
  const int v = plan.chunks;
  for (int r = 0; r < plan.pp; ++r) {
    const auto i = static_cast<std::size_t>(r);
    const StageCost& st = out.stages[i];
    double f = st.forward.total(), b = st.input_grad.total(), w = st.weight_grad.total();
    if (exec.overlap_sharded_comm) {
      // ZeRO-2 and 3 communication runs beside the pass (prefetched or reduced layer by layer).
      f = std::max(f, st.sharded_forward_comm);
      if (plan.zero_stage == 2)
        w = std::max(w, st.sharded_backward_comm);  // each layer reduced as W computes the next
      else
        b += std::max(0.0, st.sharded_backward_comm - (b + w));
    } else {
      // In series: F gathers each layer's values (ZeRO-3); B gathers them again, W reduce-
      // scatters the gradients it computed (ZeRO-3's backward: a gather, F's, and a scatter).
      f += st.sharded_forward_comm;
      b += st.sharded_forward_comm;
      w += st.sharded_backward_comm - st.sharded_forward_comm;
    }
    auto& c = out.table.stages[i];
    c[schedule::OpKind::F] = f / v;
    c[schedule::OpKind::B] = b / v;
    c[schedule::OpKind::W] = w / v;
    c[schedule::OpKind::BW] = 0.0;             // B + W
    c[schedule::OpKind::R] = st.group_reduce;  // all communication
    c.comm[static_cast<std::size_t>(schedule::OpKind::R)] = st.group_reduce;
    // A held group's gather (ZeRO-3 under layered reduction) in series before its run's first
    // op (the engine); prefetched where the ZeRO communication overlaps, behind the op before
    // it, about one chunk's forward.
    c.run_gather = exec.overlap_sharded_comm
                       ? std::max(0.0, st.group_gather - st.forward.total() / v)
                       : st.group_gather;
    // What is not the pass's own compute is communication inside the op: an overlapped pair
    // hides it behind the other op's compute.
    const auto comm = [&](double cost, const WorkTime& pass) {
      return std::max(0.0, cost - (pass.gemm + pass.attention + pass.memory)) / v;
    };
    c.comm[static_cast<std::size_t>(schedule::OpKind::F)] = comm(f, st.forward);
    c.comm[static_cast<std::size_t>(schedule::OpKind::B)] = comm(b, st.input_grad);
    c.comm[static_cast<std::size_t>(schedule::OpKind::W)] = comm(w, st.weight_grad);
    // Token slices (CostTable::slice_cost): each pass's attention, and what it pays whatever its
    // tokens: its fixed part, and ZeRO-3's gathers and scatters in series (a layer's values and
    // gradients are the same size for any slice).
    const bool serial = !exec.overlap_sharded_comm;
    const auto parts = [&](schedule::OpKind kind, double cost, const WorkTime& pass,
                           double sharded) {
      const auto k = static_cast<std::size_t>(kind);
      c.attention[k] = std::min(cost, pass.attention / v);
      c.fixed[k] =
          std::clamp((pass.fixed + (serial ? sharded : 0.0)) / v, 0.0, cost - c.attention[k]);
    };
    parts(schedule::OpKind::F, f / v, st.forward, st.sharded_forward_comm);
    parts(schedule::OpKind::B, b / v, st.input_grad, st.sharded_forward_comm);
    parts(schedule::OpKind::W, w / v, st.weight_grad,
          std::max(0.0, st.sharded_backward_comm - st.sharded_forward_comm));
  }
}

}  // namespace

spec::ParallelPlan without_offload(const spec::ParallelPlan& plan) {
  spec::ParallelPlan p = plan;
  p.offload_activations = false;
  p.offload_optimizer = false;
  return p;
}

void apply_offload(OpCosts& costs, const spec::ParallelPlan& plan, const spec::HardwareSpec& hw,
                   const ExecutionOptions& exec) {
  set_offload_costs(costs, plan, hw, exec);
  if (plan.offload_optimizer)
    for (StageCost& st : costs.stages)
      st.optimizer = optimizer_step_time(st.optimizer_shard, plan, hw, exec);
}

void undo_offload(OpCosts& costs, const OpCosts& base) {
  if (costs.stages.size() != base.stages.size() ||
      costs.table.stages.size() != base.table.stages.size())
    throw SpecError("undo_offload: costs of another pipeline");
  // What apply_offload writes (set_offload_costs, the optimizer step), back to the base's.
  costs.table.copies_block_compute = base.table.copies_block_compute;
  for (std::size_t i = 0; i < costs.stages.size(); ++i) {
    costs.table.stages[i].offload = base.table.stages[i].offload;
    costs.stages[i].optimizer = base.stages[i].optimizer;
  }
}

OpCosts op_costs(const PassCosts& passes, const spec::ModelSpec& model,
                 const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                 const ExecutionOptions& exec, const std::vector<StageParameters>& params) {
  OpCosts out;
  op_costs(out, passes, model, cluster, plan, exec, params);
  return out;
}

void op_costs(OpCosts& out, const PassCosts& passes, const spec::ModelSpec& model,
              const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
              const ExecutionOptions& exec, const std::vector<StageParameters>& params) {
  const int p = plan.pp;
  if (passes.costs.stages.size() != static_cast<std::size_t>(p) ||
      params.size() != static_cast<std::size_t>(p))
    throw SpecError("op_costs: pass costs or stage parameters of another pipeline than pp=" +
                    std::to_string(p));
  const spec::HardwareSpec& hw = cluster.hardware;
  out = passes.costs;  // into out's buffers
  for (int r = 0; r < p; ++r) {
    const auto i = static_cast<std::size_t>(r);
    if (passes.like_previous[i]) {
      // Its data-parallel costs too. (Only a stage with no embedding, output or tied sync is
      // like the one before it, and so are the vocabulary passes' flops each stage adds.)
      out.stages[i] = out.stages[i - 1];
      continue;
    }
    double touched = 0.0;  // EmbRace: the input table's rows a replica touches
    if (plan.sparse_embedding_gradient && params[i].input_table > 0.0)
      touched = measured_touched_rows(params[i].input_table / as_d(model.hidden), as_d(model.vocab),
                                      tokens_per_exchange(model, plan), exec.embedding_rows_factor);
    set_data_parallel_costs(out.stages[i], params[i], plan, passes.links[i], hw, exec, touched,
                            as_d(model.hidden));
  }
  set_pass_op_costs(out, plan, exec);
  out.table.held_reductions = plan.zero_stage >= 2 && spec::reduces_per_group(plan);
  apply_offload(out, plan, hw, exec);
  set_fault_costs(out.table, cluster, plan, exec);
  // Weight-gradient GEMMs keep their inputs until W: nearly all of a layer's activations.
  out.table.w_free_fraction = 1.0;
}

}  // namespace pipetune::tuner
