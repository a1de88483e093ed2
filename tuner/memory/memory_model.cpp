#include "tuner/memory/memory_model.hpp"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "engine/errors.hpp"
#include "tuner/cost/as_double.hpp"

namespace pipetune::tuner {

namespace {

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

// Under ZeRO-2 and 3: the parameters whose full units a device of the stage holds beyond its
// shards at its peak, its largest layer (kept open or for the next layer) and its largest table.
// A unit sharded over a group of d keeps 1/d of it, so the full unit adds (1 - 1/d).
// With layered reduction (held groups, engine/schedule/group_holds.hpp) a run holds its group's
// layers whole instead, and `groups` groups' gradients may be held at once.
double open_unit_parameters(const StageParameters& sp, int dp, int expert_dp, double groups = 0.0) {
  const auto beyond_shard = [](double n, int d) { return d > 1 ? n * (1.0 - 1.0 / d) : 0.0; };
  const auto layer = [&](const StageParameters::Layer& l) {
    return beyond_shard(l.dense, dp) + beyond_shard(l.expert, expert_dp);
  };
  const double largest_layer = std::max(layer(sp.dense_layer), layer(sp.moe_layer));
  const double open =
      groups > 0.0 ? std::max(largest_layer, groups * layer(sp.largest_group)) : largest_layer;
  return open + beyond_shard(sp.largest_table, dp);
}

}  // namespace

int held_gradient_groups(const spec::ParallelPlan& plan) {
  if (plan.zero_stage < 2 || !spec::reduces_per_group(plan)) return 0;
  // The layered schedule accumulates one group while the group before it is reduced; the others
  // reduce every group after the backwards of all of them have begun.
  return plan.schedule == "layered" ? std::min(plan.chunks, 2) : plan.chunks;
}

MemoryModelOptions default_memory_options(const spec::HardwareSpec& hardware) {
  MemoryModelOptions o;
  if (hardware.device == spec::DeviceKind::Cpu) {
    o.weight_bytes = 4.0;
    o.gradient_bytes = 4.0;
    o.optimizer_bytes = 8.0;
    o.framework_overhead_bytes = 0.0;
  }
  return o;
}

BytesPerParameter bytes_per_parameter(int zero_stage, int dp, const MemoryModelOptions& o) {
  const double d = dp > 1 ? dp : 1;
  BytesPerParameter b{o.weight_bytes, o.gradient_bytes, o.optimizer_bytes};
  if (zero_stage >= 1) b.optimizer /= d;
  if (zero_stage >= 2) b.gradients /= d;
  if (zero_stage >= 3) b.weights /= d;
  return b;
}

std::vector<StageParameters> stage_parameters(const spec::ModelSpec& model,
                                              const spec::ParallelPlan& plan,
                                              schedule::Placement placement) {
  const int p = plan.pp, groups = plan.pp * plan.chunks;
  const std::vector<int> split = spec::layer_split(model, plan);
  if (static_cast<int>(split.size()) != groups)
    throw SpecError("layer split has " + std::to_string(split.size()) + " groups, expected " +
                    std::to_string(groups));
  schedule::Schedule where;  // the group -> rank mapping of the placement
  where.stages = p;
  where.chunks = plan.chunks;
  where.placement = placement;

  const double h = as_d(model.hidden);
  const double experts_per_device = as_d(model.experts) / plan.ep;
  const double attention = as_d(spec::attention_parameters(model));
  const double mlp = as_d(spec::mlp_parameters(model));
  const double router = as_d(spec::router_parameters(model));
  const double norms = 2.0 * h;  // replicated on every TP rank
  std::vector<StageParameters> out(static_cast<std::size_t>(p));
  std::int64_t layer = 0;
  // A group's layers are alike but for their experts: one dense and one MoE layer's parameters,
  // counted, rather than each layer's (the search prices the stages of some 10^5 plans).
  for (int g = 0; g < groups; ++g) {
    const int rank = where.rank_of_group(g);
    StageParameters& s = out[static_cast<std::size_t>(rank)];
    const double t = spec::tp_of_stage(plan, rank);  // per-stage layouts shard by their own tp
    const std::int64_t n = split[static_cast<std::size_t>(g)];
    const auto moe_layers = static_cast<double>(spec::moe_layers_before(model, layer + n) -
                                                spec::moe_layers_before(model, layer));
    const double dense_layers = static_cast<double>(n) - moe_layers;
    layer += n;
    const StageParameters::Layer dense{attention / t + norms + mlp / t, 0.0};
    const StageParameters::Layer moe{attention / t + norms + router, experts_per_device * mlp / t};
    StageParameters::Layer group;
    group.dense = dense_layers * dense.dense + moe_layers * moe.dense;
    group.expert = moe_layers * moe.expert;
    s.dense += group.dense;
    s.expert += group.expert;
    if (dense_layers > 0.0 && dense.dense > s.dense_layer.dense + s.dense_layer.expert)
      s.dense_layer = dense;
    if (moe_layers > 0.0 && moe.dense + moe.expert > s.moe_layer.dense + s.moe_layer.expert)
      s.moe_layer = moe;
    if (group.dense + group.expert > s.largest_group.dense + s.largest_group.expert)
      s.largest_group = group;
  }
  // Vp*h over TP (Vp: the vocabulary padded for its shards, spec::padded_vocab).
  const double table = as_d(spec::padded_vocab(model, plan.vocab_shards())) * h / plan.tp;
  const double final_norm = h;
  const int first = where.rank_of_group(0), last = where.rank_of_group(groups - 1);
  if (plan.vocab == schedule::VocabMode::None) {
    // Each table is sharded over its own stage's TP group (per-stage layouts: validate keeps
    // vocabulary parallelism to uniform layouts).
    const auto table_on = [&](int rank) {
      const int t = spec::tp_of_stage(plan, rank);
      return as_d(spec::padded_vocab(model, t)) * h / t;
    };
    const double input_table = table_on(first), output_table = table_on(last);
    out[static_cast<std::size_t>(first)].vocabulary += input_table;
    out[static_cast<std::size_t>(first)].input_table = input_table;
    // A tied output layer shares the table on one stage; on another stage it is a second copy
    // (kept in sync by an all-reduce, as in Megatron).
    const bool shared_table = model.tied_embeddings && first == last;
    out[static_cast<std::size_t>(last)].vocabulary +=
        (shared_table ? 0.0 : output_table) + final_norm;
    out[static_cast<std::size_t>(first)].largest_table = input_table;
    out[static_cast<std::size_t>(last)].largest_table =
        first == last ? std::max(input_table, output_table) : output_table;
  } else {
    for (auto& s : out) {
      s.vocabulary += 2.0 * table / p;
      s.input_table = table / p;
      s.largest_table = table / p;  // its share of each table
    }
    out[static_cast<std::size_t>(last)].vocabulary += final_norm;
  }
  return out;
}

MemoryEstimate estimate_memory(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                               const spec::ParallelPlan& plan, schedule::Placement placement,
                               const std::vector<double>& peak_activation_bytes,
                               const MemoryModelOptions& options,
                               const std::vector<double>& host_activation_bytes) {
  return estimate_memory(stage_parameters(model, plan, placement), cluster, plan,
                         peak_activation_bytes, options, host_activation_bytes);
}

namespace {

// estimate_memory, with its stages kept where `keep_stages`.
MemoryEstimate memory_estimate(const std::vector<StageParameters>& params,
                               const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                               const std::vector<double>& peak_activation_bytes,
                               const MemoryModelOptions& options,
                               const std::vector<double>& host_activation_bytes, bool keep_stages) {
  if (params.size() != static_cast<std::size_t>(plan.pp))
    throw InputError("estimate_memory: " + std::to_string(params.size()) +
                     " stages' parameters for " + std::to_string(plan.pp) + " pipeline stages");
  if (peak_activation_bytes.size() != static_cast<std::size_t>(plan.pp))
    throw InputError("estimate_memory: " + std::to_string(peak_activation_bytes.size()) +
                     " activation peaks for " + std::to_string(plan.pp) + " pipeline stages");
  if (!host_activation_bytes.empty() &&
      host_activation_bytes.size() != static_cast<std::size_t>(plan.pp))
    throw InputError("estimate_memory: " + std::to_string(host_activation_bytes.size()) +
                     " host activation peaks for " + std::to_string(plan.pp) + " pipeline stages");
  const BytesPerParameter dense = bytes_per_parameter(plan.zero_stage, plan.dp, options);
  const BytesPerParameter expert = bytes_per_parameter(plan.zero_stage, plan.dp / plan.ep, options);

  MemoryEstimate e;
  e.device_bytes = as_d(cluster.hardware.hbm_bytes);
  e.host_bytes = as_d(cluster.hardware.host_memory_bytes);
  if (keep_stages) e.stages.reserve(static_cast<std::size_t>(plan.pp));
  const int held = plan.zero_stage >= 2 ? held_gradient_groups(plan) : 0;
  for (int r = 0; r < plan.pp; ++r) {
    const StageParameters& sp = params[static_cast<std::size_t>(r)];
    const double shared = sp.dense + sp.vocabulary;
    StageMemory m;
    m.stage = r;
    m.parameters = shared * dense.weights + sp.expert * expert.weights;
    m.gradients = shared * dense.gradients + sp.expert * expert.gradients;
    if (plan.zero_stage >= 2) {
      m.gradients +=
          open_unit_parameters(sp, plan.dp, plan.dp / plan.ep, held) * options.gradient_bytes;
      if (plan.zero_stage >= 3)
        m.parameters += open_unit_parameters(sp, plan.dp, plan.dp / plan.ep, held > 0 ? 1 : 0) *
                        options.weight_bytes;
    }
    m.optimizer = shared * dense.optimizer + sp.expert * expert.optimizer;
    if (plan.offload_optimizer) std::swap(m.optimizer, m.host_optimizer);  // ZeRO-Offload
    m.activations = std::max(0.0, peak_activation_bytes[static_cast<std::size_t>(r)]);
    if (!host_activation_bytes.empty())
      m.host_activations = std::max(0.0, host_activation_bytes[static_cast<std::size_t>(r)]);
    m.overhead = options.framework_overhead_bytes;
    if (m.total() > e.peak_bytes || r == 0) {
      e.peak_bytes = m.total();
      e.peak_stage = r;
    }
    if (m.host() > e.peak_host_bytes || r == 0) {
      e.peak_host_bytes = m.host();
      e.peak_host_stage = r;
    }
    if (keep_stages) e.stages.push_back(m);
  }
  return e;
}

}  // namespace

MemoryEstimate estimate_memory(const std::vector<StageParameters>& params,
                               const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                               const std::vector<double>& peak_activation_bytes,
                               const MemoryModelOptions& options,
                               const std::vector<double>& host_activation_bytes) {
  return memory_estimate(params, cluster, plan, peak_activation_bytes, options,
                         host_activation_bytes, true);
}

MemoryEstimate memory_peaks(const std::vector<StageParameters>& params,
                            const spec::ClusterSpec& cluster, const spec::ParallelPlan& plan,
                            const std::vector<double>& peak_activation_bytes,
                            const MemoryModelOptions& options) {
  return memory_estimate(params, cluster, plan, peak_activation_bytes, options, {}, false);
}

const std::vector<StageParameters>& StageParameterMemo::get(const spec::ModelSpec& model,
                                                            const spec::ParallelPlan& plan,
                                                            schedule::Placement placement) {
  if (!model_ || *model_ != model) {
    model_ = model;
    entries_.clear();
  }
  if (const Entry* e = entries_.find([&](const Entry& e) {
        return e.placement == placement && e.pp == plan.pp && e.chunks == plan.chunks &&
               e.tp == plan.tp && e.ep == plan.ep && e.vocab == plan.vocab &&
               e.layer_split == plan.layer_split && e.stage_tp == plan.stage_tp;
      }))
    return e->params;
  return entries_
      .add({placement, plan.pp, plan.chunks, plan.tp, plan.ep, plan.vocab, plan.layer_split,
            plan.stage_tp, stage_parameters(model, plan, placement)})
      .params;
}

std::string MemoryEstimate::binding_constraint() const {
  if (fits() || stages.empty()) return "";
  if (peak_bytes <= device_bytes) {  // the host memory binds
    const StageMemory& s = stages[static_cast<std::size_t>(peak_host_stage)];
    const bool activations = s.host_activations >= s.host_optimizer;
    return "stage " + std::to_string(peak_host_stage) + " needs " + gib(peak_host_bytes) +
           " of host memory, over the " + gib(host_bytes) +
           " per device the hardware's host_memory_bytes gives (" +
           (activations ? "offloaded activations " + gib(s.host_activations)
                        : "offloaded optimizer state " + gib(s.host_optimizer)) +
           ")";
  }
  const StageMemory& s = stages[static_cast<std::size_t>(peak_stage)];
  struct Part {
    const char* name;
    double bytes;
  } parts[] = {{"weights", s.parameters},
               {"gradients", s.gradients},
               {"optimizer state", s.optimizer},
               {"activations", s.activations}};
  const Part* largest = &parts[0];
  for (const Part& p : parts)
    if (p.bytes > largest->bytes) largest = &p;
  return "stage " + std::to_string(peak_stage) + " needs " + gib(peak_bytes) + " of the device's " +
         gib(device_bytes) + " (" + largest->name + " " + gib(largest->bytes) + ")";
}

}  // namespace pipetune::tuner
