#include "engine/spec/validate.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"

namespace pipetune::spec {

namespace {

// A number as the error messages show it.
std::string shown(std::int64_t v) {
  return std::to_string(v);
}

std::string shown(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

// The fields an error is about, by their keys (errors.hpp): "plan.tp", "model.heads".
using Fields = std::vector<std::string>;

// The key of the field `name` of `spec`: key("plan", "tp") = "plan.tp".
std::string key(std::string_view spec, std::string_view name) {
  return std::string(spec) + "." + std::string(name);
}

// Each check below is about the field `spec.what` and names it as `what` in its message.
void require_positive(std::string_view spec, std::string_view what, std::int64_t v) {
  if (v <= 0)
    throw SpecError({key(spec, what)}, std::string(what) + "=" + shown(v) + " must be positive");
}

void require_positive(std::string_view spec, std::string_view what, double v) {
  if (!(v > 0.0))
    throw SpecError({key(spec, what)}, std::string(what) + "=" + shown(v) + " must be positive");
}

// Upper bounds of a model's sizes, far beyond any trained model (hidden 25,600 and 128 layers are
// the largest in presets/), so that every count the tools derive (parameters, FLOPs, bytes) fits
// in 64 bits and an absurd file is an error, not an hour of search or a 10^17 % MFU.
void require_at_most(const Fields& fields, std::string_view what, std::int64_t v,
                     std::int64_t limit) {
  if (v > limit)
    throw SpecError(fields, std::string(what) + "=" + shown(v) +
                                " is beyond what pipetune models (at most " + shown(limit) + ")");
}

void require_at_most(std::string_view spec, std::string_view what, std::int64_t v,
                     std::int64_t limit) {
  if (v > limit) require_at_most(Fields{key(spec, what)}, what, v, limit);
}

// a * b for positive ints, refused beyond `limit` (the product of two ints fits 64 bits);
// `fields` are the plan's fields the product is made of. The search validates every plan it
// enumerates: the error's strings are made only for an error.
std::int64_t require_product_at_most(std::initializer_list<std::string_view> fields,
                                     std::string_view what, std::int64_t a, std::int64_t b,
                                     std::int64_t limit) {
  const std::int64_t p = a * b;
  if (p > limit) require_at_most(Fields(fields.begin(), fields.end()), what, p, limit);
  return p;
}

void require_non_negative(std::string_view spec, std::string_view what, double v) {
  if (v < 0.0)
    throw SpecError({key(spec, what)},
                    std::string(what) + "=" + shown(v) + " must not be negative");
}

// "a=3 does not divide b=16" when b % a != 0 (a > 0); about the field a_key, joining b_key.
void require_divides(std::string_view a_key, std::string_view a_name, std::int64_t a,
                     std::string_view b_key, std::string_view b_name, std::int64_t b) {
  if (a > 0 && b % a != 0) {
    throw SpecError({std::string(a_key), std::string(b_key)},
                    std::string(a_name) + "=" + shown(a) + " does not divide " +
                        std::string(b_name) + "=" + shown(b));
  }
}

// Prefixes a nested check's message ("hardware h100-sxm: ..."), keeping its fields.
template <typename Fn>
void with_context(std::string_view what, std::string_view name, Fn&& fn) {
  try {
    fn();
  } catch (const SpecError& e) {
    throw SpecError(std::string(what) + " " + std::string(name) + ": " + e.what(), e);
  }
}

std::string joined_schedule_names() {
  std::string s;
  for (auto n : schedule::schedule_names()) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

// The plan's lists: one entry per layer group (layer_split) or per pipeline rank
// (stage_recompute).
void validate_per_group_lists(const ParallelPlan& plan) {
  if (!plan.layer_split.empty() &&
      static_cast<int>(plan.layer_split.size()) != plan.layer_groups()) {
    const std::string groups = plan.chunks == 1
                                   ? "pp=" + shown(std::int64_t{plan.pp})
                                   : "pp*chunks=" + shown(std::int64_t{plan.layer_groups()});
    Fields fields{"plan.layer_split", "plan.pp"};
    if (plan.chunks != 1) fields.push_back("plan.chunks");
    throw SpecError(fields, "layer_split has " +
                                shown(static_cast<std::int64_t>(plan.layer_split.size())) +
                                " entries, " + groups);
  }
  if (!plan.stage_recompute.empty() && static_cast<int>(plan.stage_recompute.size()) != plan.pp) {
    throw SpecError({"plan.stage_recompute", "plan.pp"},
                    "stage_recompute needs pp = " + shown(std::int64_t{plan.pp}) +
                        " entries, got " +
                        shown(static_cast<std::int64_t>(plan.stage_recompute.size())));
  }
  if (!plan.stage_tp.empty() && static_cast<int>(plan.stage_tp.size()) != plan.pp) {
    throw SpecError({"plan.stage_tp", "plan.pp"},
                    "stage_tp needs pp = " + shown(std::int64_t{plan.pp}) + " entries, got " +
                        shown(static_cast<std::int64_t>(plan.stage_tp.size())));
  }
  for (std::size_t i = 0; i < plan.layer_split.size(); ++i) {
    if (plan.layer_split[i] < 0) {
      throw SpecError({"plan.layer_split"}, "layer_split[" + std::to_string(i) +
                                                "]=" + shown(std::int64_t{plan.layer_split[i]}) +
                                                " is negative");
    }
  }
}

}  // namespace

void validate(const ModelSpec& model) {
  require_positive("model", "layers", model.layers);
  require_positive("model", "hidden", model.hidden);
  require_positive("model", "heads", model.heads);
  require_positive("model", "kv_heads", model.kv_heads);
  require_positive("model", "ffn_hidden", model.ffn_hidden);
  require_positive("model", "vocab", model.vocab);
  if (model.vocab < 2)
    throw SpecError({"model.vocab"},
                    "vocab=" + shown(model.vocab) +
                        ": a vocabulary of one token leaves nothing to predict (at least 2)");
  require_positive("model", "seq_len", model.seq_len);
  require_positive("model", "experts", model.experts);
  require_positive("model", "top_k", model.top_k);
  require_positive("model", "moe_every", model.moe_every);
  require_at_most("model", "layers", model.layers, 10'000);
  require_at_most("model", "hidden", model.hidden, std::int64_t{1} << 17);
  require_at_most("model", "ffn_hidden", model.ffn_hidden, std::int64_t{1} << 19);
  require_at_most("model", "heads", model.heads, std::int64_t{1} << 14);
  require_at_most("model", "vocab", model.vocab, std::int64_t{1} << 24);
  require_at_most("model", "seq_len", model.seq_len, std::int64_t{1} << 24);
  require_at_most("model", "experts", model.experts, std::int64_t{1} << 14);
  require_positive("model", "vocab_divisible_by", model.vocab_divisible_by);
  require_at_most("model", "vocab_divisible_by", model.vocab_divisible_by, std::int64_t{1} << 16);
  require_divides("model.heads", "heads", model.heads, "model.hidden", "hidden", model.hidden);
  require_divides("model.kv_heads", "kv_heads", model.kv_heads, "model.heads", "heads",
                  model.heads);
  if (model.top_k > model.experts) {
    throw SpecError({"model.top_k", "model.experts"},
                    "top_k=" + shown(model.top_k) + " exceeds experts=" + shown(model.experts));
  }
}

void validate(const HardwareSpec& hw) {
  with_context("hardware", hw.name, [&] {
    require_positive("hardware", "peak_flops", hw.peak_flops);
    require_non_negative("hardware", "fp32_peak_flops", hw.fp32_peak_flops);
    require_positive("hardware", "hbm_bytes", hw.hbm_bytes);
    require_positive("hardware", "hbm_bandwidth", hw.hbm_bandwidth);
    require_positive("hardware", "intra_node_bandwidth", hw.intra_node_bandwidth);
    require_positive("hardware", "inter_node_bandwidth", hw.inter_node_bandwidth);
    require_positive("hardware", "devices_per_node", std::int64_t{hw.devices_per_node});
    require_non_negative("hardware", "host_bandwidth", hw.host_bandwidth);
    require_non_negative("hardware", "host_memory_bytes", hw.host_memory_bytes);
    require_non_negative("hardware", "intra_node_latency", hw.intra_node_latency);
    require_non_negative("hardware", "inter_node_latency", hw.inter_node_latency);
  });
}

void validate(const ClusterSpec& c) {
  validate(c.hardware);
  require_positive("cluster", "devices", std::int64_t{c.devices});
  require_positive("cluster", "devices_per_node", std::int64_t{c.devices_per_node});
  require_positive("cluster", "intra_node_bandwidth", c.intra_node_bandwidth);
  require_positive("cluster", "inter_node_bandwidth", c.inter_node_bandwidth);
  require_non_negative("cluster", "intra_node_latency", c.intra_node_latency);
  require_non_negative("cluster", "inter_node_latency", c.inter_node_latency);
  // A lone node may be partly used (4 of 8 GPUs); several nodes must be whole, or the node of a
  // device would be ambiguous.
  if (c.devices > c.devices_per_node && c.devices % c.devices_per_node != 0) {
    throw SpecError({"cluster.devices", "cluster.devices_per_node"},
                    "devices=" + shown(std::int64_t{c.devices}) +
                        " is not a whole number of nodes (devices_per_node=" +
                        shown(std::int64_t{c.devices_per_node}) + ")");
  }
  for (std::size_t i = 0; i < c.faults.size(); ++i) {
    const NodeFault& f = c.faults[i];
    const std::string name = "faults[" + std::to_string(i) + "]";
    if (f.node < 0 || f.node >= c.nodes())
      throw SpecError({"cluster." + name + ".node"},
                      name + ".node=" + shown(std::int64_t{f.node}) + " is not a node of the " +
                          shown(std::int64_t{c.nodes()}) + " (numbered from 0)");
    if (!(f.slowdown >= 1.0) || !std::isfinite(f.slowdown))
      throw SpecError({"cluster." + name + ".slowdown"},
                      name + ".slowdown must be a factor of at least 1");
    if (!(f.fail_at < 0.0)) {
      require_non_negative("cluster", name + ".fail_at", f.fail_at);
      require_non_negative("cluster", name + ".restart_delay", f.restart_delay);
    }
    // A node has one slowdown, and may fail several times in an iteration, each failure after
    // it is back from the one before (the simulator runs each outage in turn).
    for (std::size_t j = 0; j < i; ++j) {
      const NodeFault& e = c.faults[j];
      if (e.node != f.node) continue;
      const std::string earlier = "faults[" + std::to_string(j) + "]";
      if (f.slowdown != 1.0 && e.slowdown != 1.0)
        throw SpecError({"cluster." + name + ".slowdown"},
                        name + " slows node " + shown(std::int64_t{f.node}) + " again (" + earlier +
                            " slows it already; give one slowdown a node)");
      if (!(f.fail_at < 0.0) && !(e.fail_at < 0.0) && f.fail_at < e.fail_at + e.restart_delay &&
          e.fail_at < f.fail_at + f.restart_delay)
        throw SpecError({"cluster." + name + ".fail_at"},
                        name + " fails node " + shown(std::int64_t{f.node}) + " at " +
                            shown(f.fail_at) + " s while it is down from " + earlier + " (" +
                            shown(e.fail_at) + " s to " + shown(e.fail_at + e.restart_delay) +
                            " s); a node fails again only once it is back");
    }
  }
  if (c.node_groups.empty()) return;
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < c.node_groups.size(); ++i) {
    const std::string name = "node_groups[" + std::to_string(i) + "]";
    require_positive("cluster", name + ".nodes", std::int64_t{c.node_groups[i].nodes});
    require_positive("cluster", name + ".inter_node_bandwidth",
                     c.node_groups[i].inter_node_bandwidth);
    covered += c.node_groups[i].nodes;
  }
  if (covered != c.nodes()) {
    throw SpecError({"cluster.node_groups", "cluster.devices"},
                    "node_groups cover " + shown(covered) + " nodes, cluster has " +
                        shown(std::int64_t{c.nodes()}));
  }
}

namespace {

// A permutation of 0..n-1: every node group named once.
void validate_node_group_order(const std::vector<int>& order) {
  const auto n = static_cast<std::int64_t>(order.size());
  std::vector<char> seen(order.size(), 0);
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int g = order[i];
    const auto at = [&] {
      return "node_group_order[" + std::to_string(i) + "]=" + std::to_string(g);
    };
    if (g < 0 || g >= n)
      throw SpecError({"plan.node_group_order"},
                      at() + " is not a node group index 0.." + shown(n - 1) +
                          " (the order names each of the cluster's node groups once)");
    if (seen[static_cast<std::size_t>(g)])
      throw SpecError({"plan.node_group_order"},
                      at() + " names a node group twice (the order names each group once)");
    seen[static_cast<std::size_t>(g)] = 1;
  }
}

// Per-stage layouts (stage_tp): positive entries, tp is stage 0's, and what the resharding
// between stages of different tp does not cover is refused by name.
void validate_stage_layouts(const ParallelPlan& plan) {
  constexpr std::int64_t kMaxDevices = std::int64_t{1} << 24;
  std::int64_t devices = 0;
  for (std::size_t i = 0; i < plan.stage_tp.size(); ++i) {
    const int t = plan.stage_tp[i];
    if (t < 1 || t > kMaxDevices)
      throw SpecError({"plan.stage_tp"}, "stage_tp[" + std::to_string(i) +
                                             "]=" + shown(std::int64_t{t}) + " must be 1.." +
                                             shown(kMaxDevices));
    devices += t;
  }
  if (plan.stage_tp.empty()) return;
  require_product_at_most({"plan.stage_tp", "plan.dp"}, "sum(stage_tp)*dp", devices, plan.dp,
                          kMaxDevices);
  if (plan.tp != plan.stage_tp.front())
    throw SpecError({"plan.tp", "plan.stage_tp"},
                    "tp=" + shown(std::int64_t{plan.tp}) +
                        " is not stage_tp[0]=" + shown(std::int64_t{plan.stage_tp.front()}) +
                        " (tp is the first stage's; leave it out to take it from stage_tp)");
  if (!stage_tp_varies(plan)) return;
  const auto refuse = [](const char* key, const std::string& what) {
    throw SpecError({"plan.stage_tp", key},
                    "stages of different tp (stage_tp) " + what +
                        ": the resharding between them copies whole activations");
  };
  if (plan.vocab != schedule::VocabMode::None)
    refuse("plan.vocab", "cannot shard the vocabulary over tp*pp (vocab=" +
                             std::string(schedule::vocab_mode_name(plan.vocab)) + ")");
  if (plan.ep != 1) refuse("plan.ep", "cannot carve expert groups out of dp (ep>1)");
  if (plan.sequence_parallel)
    refuse("plan.sequence_parallel", "are not run with sequence_parallel");
  if (plan.rank_order != RankOrder::TpDpPp)
    refuse("plan.rank_order", "take consecutive device slots per stage (rank_order tp-dp-pp)");
}

}  // namespace

void validate(const ParallelPlan& plan) {
  require_positive("plan", "tp", std::int64_t{plan.tp});
  require_positive("plan", "pp", std::int64_t{plan.pp});
  require_positive("plan", "dp", std::int64_t{plan.dp});
  require_positive("plan", "ep", std::int64_t{plan.ep});
  require_positive("plan", "chunks", std::int64_t{plan.chunks});
  require_positive("plan", "micro_batch_size", std::int64_t{plan.micro_batch_size});
  require_positive("plan", "microbatches", std::int64_t{plan.microbatches});
  require_positive("plan", "global_batch", plan.global_batch);
  // Bounds far beyond any cluster (the largest runs use about 10^5 GPUs) and batch, so that the
  // products the tools derive (world size, layer groups, vocabulary shards, samples per step) fit
  // their types and an absurd file is an error, not an overflow.
  constexpr std::int64_t kMaxDevices = std::int64_t{1} << 24;
  const std::int64_t tp_pp =
      require_product_at_most({"plan.tp", "plan.pp"}, "tp*pp", plan.tp, plan.pp, kMaxDevices);
  require_product_at_most({"plan.tp", "plan.pp", "plan.dp"}, "tp*pp*dp", tp_pp, plan.dp,
                          kMaxDevices);
  require_product_at_most({"plan.pp", "plan.chunks"}, "pp*chunks", plan.pp, plan.chunks,
                          kMaxDevices);
  const std::int64_t per_replica = require_product_at_most(
      {"plan.micro_batch_size", "plan.microbatches"}, "micro_batch_size*microbatches",
      plan.micro_batch_size, plan.microbatches, std::int64_t{1} << 36);
  require_product_at_most({"plan.micro_batch_size", "plan.microbatches", "plan.dp"},
                          "micro_batch_size*microbatches*dp", per_replica, plan.dp,
                          std::int64_t{1} << 40);
  if (plan.skip_ratio && !(*plan.skip_ratio >= 0.0 && *plan.skip_ratio < 1.0)) {  // nan too
    throw SpecError({"plan.skip_ratio"},
                    "skip_ratio=" + std::to_string(*plan.skip_ratio) +
                        " must be at least 0 and below 1 (the share of stages skipped)");
  }
  if (plan.group_size < 0) {
    throw SpecError({"plan.group_size"}, "group_size=" + shown(std::int64_t{plan.group_size}) +
                                             " must not be negative (0 = the schedule's default)");
  }
  if (plan.zero_stage < 0 || plan.zero_stage > 3) {
    throw SpecError({"plan.zero_stage"},
                    "zero_stage=" + shown(std::int64_t{plan.zero_stage}) + " must be 0..3");
  }
  const auto& names = schedule::schedule_names();
  if (std::find(names.begin(), names.end(), plan.schedule) == names.end()) {
    throw SpecError({"plan.schedule"}, "unknown schedule '" + plan.schedule +
                                           "' (valid: " + joined_schedule_names() + ")");
  }
  if (plan.vocab != schedule::VocabMode::None) {
    const std::string mode(schedule::vocab_mode_name(plan.vocab));
    if (plan.pp < 2)
      throw SpecError({"plan.vocab", "plan.pp"}, "vocab mode " + mode + " needs pp>1");
    if (!schedule::supports_vocab(plan.schedule, plan.vocab)) {
      throw SpecError({"plan.vocab", "plan.schedule"},
                      "schedule " + plan.schedule + " does not support vocab mode " + mode);
    }
  }
  require_divides("plan.ep", "ep", plan.ep, "plan.dp", "dp", plan.dp);
  if (plan.sequence_parallel && plan.tp < 2)
    throw SpecError({"plan.sequence_parallel", "plan.tp"}, "sequence_parallel needs tp>1");
  const std::int64_t batch = std::int64_t{plan.micro_batch_size} * plan.microbatches * plan.dp;
  if (plan.global_batch != batch) {
    throw SpecError({"plan.global_batch", "plan.micro_batch_size", "plan.microbatches", "plan.dp"},
                    "global_batch=" + shown(plan.global_batch) +
                        " does not equal micro_batch_size*microbatches*dp = " +
                        shown(std::int64_t{plan.micro_batch_size}) + "*" +
                        shown(std::int64_t{plan.microbatches}) + "*" +
                        shown(std::int64_t{plan.dp}) + " = " + shown(batch));
  }
  validate_per_group_lists(plan);
  validate_stage_layouts(plan);
  validate_node_group_order(plan.node_group_order);
}

void validate(const ModelSpec& model, const ClusterSpec& cluster, const ParallelPlan& plan) {
  validate(cluster);
  validate(model, plan);
  if (plan.world_size() != cluster.devices) {
    throw SpecError({"plan.tp", "plan.pp", "plan.dp", "cluster.devices"},
                    std::string(plan.stage_tp.empty() ? "tp*pp*dp" : "sum(stage_tp)*dp") + " = " +
                        shown(std::int64_t{plan.world_size()}) + " does not match the cluster's " +
                        shown(std::int64_t{cluster.devices}) + " devices");
  }
  const auto groups = static_cast<std::int64_t>(cluster.node_groups.size());
  if (!plan.node_group_order.empty() &&
      static_cast<std::int64_t>(plan.node_group_order.size()) != groups) {
    throw SpecError(
        {"plan.node_group_order", "cluster.node_groups"},
        "node_group_order has " + shown(static_cast<std::int64_t>(plan.node_group_order.size())) +
            " entries, the cluster has " + shown(groups) + " node groups (name each once)");
  }
}

std::optional<SpecError> token_slice_conflict(const ModelSpec& model, const ParallelPlan& plan) {
  if (schedule::slice_count(plan.schedule, plan.slices, plan.slice_tokens) <= 1)
    return std::nullopt;
  if (plan.offload_activations)
    return SpecError({"plan.slices", "plan.offload_activations"},
                     "token slices keep each slice's keys and values on the device for the later "
                     "slices: they do not combine with offload_activations");
  const bool full_recompute = plan.recompute == Recompute::Full ||
                              std::find(plan.stage_recompute.begin(), plan.stage_recompute.end(),
                                        Recompute::Full) != plan.stage_recompute.end();
  if (full_recompute)
    return SpecError({"plan.slices", "plan.recompute"},
                     "token slices do not combine with full recomputation yet: the engine's "
                     "recomputed forward of a slice does not reuse the keys its slices share");
  if (is_moe(model))
    return SpecError({"plan.slices", "model.experts"},
                     "token slices need a dense model: an MoE layer's load-balancing loss is "
                     "taken over a whole micro-batch (experts=" +
                         shown(model.experts) + ")");
  return std::nullopt;
}

std::optional<SpecError> layer_group_shortage(const ModelSpec& model, const ParallelPlan& plan) {
  // In 64 bits: the enumerator asks before validate(plan) has bounded pp * chunks.
  const std::int64_t groups = std::int64_t{plan.pp} * plan.chunks;
  if (!plan.layer_split.empty() || groups <= model.layers) return std::nullopt;
  return SpecError({"plan.chunks", "plan.pp", "model.layers"},
                   "chunks=" + shown(std::int64_t{plan.chunks}) + " needs at least pp*chunks=" +
                       shown(groups) + " layers, model has " + shown(model.layers));
}

void validate(const ModelSpec& model, const ParallelPlan& plan) {
  validate(model);
  validate(plan);
  require_divides("plan.tp", "tp", plan.tp, "model.heads", "heads", model.heads);
  require_divides("plan.tp", "tp", plan.tp, "model.kv_heads", "kv_heads", model.kv_heads);
  require_divides("plan.tp", "tp", plan.tp, "model.ffn_hidden", "ffn_hidden", model.ffn_hidden);
  for (std::size_t i = 0; i < plan.stage_tp.size(); ++i) {
    const std::string what = "stage_tp[" + std::to_string(i) + "]";
    const int t = plan.stage_tp[i];
    require_divides("plan.stage_tp", what, t, "model.heads", "heads", model.heads);
    require_divides("plan.stage_tp", what, t, "model.kv_heads", "kv_heads", model.kv_heads);
    require_divides("plan.stage_tp", what, t, "model.ffn_hidden", "ffn_hidden", model.ffn_hidden);
  }
  if (model.tied_embeddings && plan.pp > 1 &&
      tp_of_stage(plan, 0) != tp_of_stage(plan, plan.pp - 1))
    throw SpecError({"plan.stage_tp", "model.tied_embeddings"},
                    "tied embeddings need the first and last stages' tp equal (stage_tp[0]=" +
                        shown(std::int64_t{tp_of_stage(plan, 0)}) + ", stage_tp[" +
                        std::to_string(plan.pp - 1) +
                        "]=" + shown(std::int64_t{tp_of_stage(plan, plan.pp - 1)}) +
                        "): their embedding copies are kept equal shard by shard");
  // Each vocabulary shard holds at least one row: tp shards, or tp*pp with vocabulary
  // parallelism (the engine's layout; the cost model assumes the same).
  const std::int64_t shards = plan.vocab_shards();
  if (model.vocab < shards) {
    Fields fields{"model.vocab", "plan.tp"};
    if (plan.vocab != schedule::VocabMode::None)
      fields.insert(fields.end(), {"plan.pp", "plan.vocab"});
    throw SpecError(fields, "vocab=" + shown(model.vocab) + " is smaller than its " +
                                shown(shards) + " shards (tp" +
                                (plan.vocab != schedule::VocabMode::None ? "*pp" : "") + ")");
  }
  if (plan.ep > 1) {
    if (!is_moe(model)) {
      throw SpecError({"plan.ep", "model.experts"},
                      "ep=" + shown(std::int64_t{plan.ep}) +
                          " needs an MoE model (experts=" + shown(model.experts) + ")");
    }
    require_divides("plan.ep", "ep", plan.ep, "model.experts", "experts", model.experts);
  }
  // Token slices (terapipe): whole tokens of one sequence, and a dense model.
  const std::int64_t slices = schedule::slice_count(plan.schedule, plan.slices, plan.slice_tokens);
  if (!plan.slice_tokens.empty()) {
    const std::int64_t sum =
        std::accumulate(plan.slice_tokens.begin(), plan.slice_tokens.end(), std::int64_t{0});
    if (sum != model.seq_len)
      throw SpecError({"plan.slice_tokens", "model.seq_len"},
                      "slice_tokens sums to " + shown(sum) +
                          ", a sequence has seq_len=" + shown(model.seq_len) + " tokens");
    if (plan.slices > 0 && plan.slices != slices)
      throw SpecError({"plan.slices", "plan.slice_tokens"},
                      "slices=" + shown(std::int64_t{plan.slices}) + " but slice_tokens has " +
                          shown(slices) + " entries");
  } else if (slices > model.seq_len) {
    throw SpecError({"plan.slices", "model.seq_len"},
                    "slices=" + shown(slices) + " exceeds seq_len=" + shown(model.seq_len) +
                        " (a token slice holds at least one token)");
  }
  if (auto broken = token_slice_conflict(model, plan)) throw std::move(*broken);
  // Chunked all-to-all: chunks of the experts' slots, of an MoE model.
  if (plan.moe_chunks < 1 || plan.moe_chunks > kMaxMoeChunks)
    throw SpecError({"plan.moe_chunks"}, "moe_chunks=" + shown(std::int64_t{plan.moe_chunks}) +
                                             " must be 1 to " + std::to_string(kMaxMoeChunks) +
                                             " (all-to-all chunks per MoE layer)");
  if (plan.moe_chunks > 1 && !is_moe(model))
    throw SpecError({"plan.moe_chunks", "model.experts"},
                    "moe_chunks=" + shown(std::int64_t{plan.moe_chunks}) +
                        " chunks the all-to-all of MoE layers; the model has none (experts=" +
                        shown(model.experts) + ")");
  if (const int g = plan.moe_a2a_node_ranks; g != 0) {
    const std::string what = "moe_a2a_node_ranks=" + shown(std::int64_t{g});
    if (!is_moe(model))
      throw SpecError({"plan.moe_a2a_node_ranks", "model.experts"},
                      what + " splits the all-to-all of MoE layers; the model has none (experts=" +
                          shown(model.experts) + ")");
    if (g <= 1 || g >= plan.ep || plan.ep % g != 0)
      throw SpecError({"plan.moe_a2a_node_ranks", "plan.ep"},
                      what + " must divide ep=" + shown(std::int64_t{plan.ep}) +
                          " and lie strictly between 1 and ep (EP ranks per node of a two-phase "
                          "all-to-all; 0 for one flat all-to-all)");
  }
  validate_expert_layouts(model, plan);
  if (plan.sparse_embedding_gradient && model.tied_embeddings)
    throw SpecError({"plan.sparse_embedding_gradient", "model.tied_embeddings"},
                    "sparse_embedding_gradient needs untied embeddings: a tied table's gradient "
                    "is dense (the output layer adds to every row)");
  // Layered gradient reduction reduces each layer group's gradients where the schedule's R op
  // stands: all-reduced without ZeRO, held whole and reduce-scattered into the shards under
  // ZeRO-2 and 3 (schedule/group_holds.hpp). ZeRO-1 reduce-scatters one flat buffer whose shards
  // cross the groups.
  if (reduces_per_group(plan) && plan.zero_stage == 1)
    throw SpecError(
        {plan.layered_reduction ? "plan.layered_reduction" : "plan.schedule", "plan.zero_stage"},
        std::string(plan.layered_reduction ? "layered_reduction" : "the layered schedule") +
            " reduces each layer group's gradients as its backward ends, with zero_stage 0, 2 or "
            "3 (zero_stage=1 reduce-scatters one buffer whose shards cross the groups)");
  if (plan.layer_split.empty()) {
    if (plan.pp > model.layers) {
      throw SpecError({"plan.pp", "model.layers"}, "pp=" + shown(std::int64_t{plan.pp}) +
                                                       " exceeds layers=" + shown(model.layers));
    }
    if (auto broken = layer_group_shortage(model, plan)) throw std::move(*broken);
  } else {
    const std::int64_t sum =
        std::accumulate(plan.layer_split.begin(), plan.layer_split.end(), std::int64_t{0});
    if (sum != model.layers) {
      throw SpecError(
          {"plan.layer_split", "model.layers"},
          "layer_split sums to " + shown(sum) + ", model has " + shown(model.layers) + " layers");
    }
  }
}

}  // namespace pipetune::spec
