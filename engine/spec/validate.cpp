#include "engine/spec/validate.hpp"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <sstream>
#include <string>

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

void require_positive(std::string_view what, std::int64_t v) {
  if (v <= 0) throw SpecError(std::string(what) + "=" + shown(v) + " must be positive");
}

void require_positive(std::string_view what, double v) {
  if (!(v > 0.0)) throw SpecError(std::string(what) + "=" + shown(v) + " must be positive");
}

// Upper bounds of a model's sizes, far beyond any trained model (hidden 25,600 and 128 layers are
// the largest in presets/), so that every count the tools derive (parameters, FLOPs, bytes) fits
// in 64 bits and an absurd file is an error, not an hour of search or a 10^17 % MFU.
void require_at_most(std::string_view what, std::int64_t v, std::int64_t limit) {
  if (v > limit)
    throw SpecError(std::string(what) + "=" + shown(v) +
                    " is beyond what pipetune models (at most " + shown(limit) + ")");
}

// a * b for positive ints, refused beyond `limit` (the product of two ints fits 64 bits).
std::int64_t require_product_at_most(std::string_view what, std::int64_t a, std::int64_t b,
                                     std::int64_t limit) {
  const std::int64_t p = a * b;
  require_at_most(what, p, limit);
  return p;
}

void require_non_negative(std::string_view what, double v) {
  if (v < 0.0) throw SpecError(std::string(what) + "=" + shown(v) + " must not be negative");
}

// "a=3 does not divide b=16" when b % a != 0 (a > 0).
void require_divides(std::string_view a_name, std::int64_t a, std::string_view b_name,
                     std::int64_t b) {
  if (a > 0 && b % a != 0) {
    throw SpecError(std::string(a_name) + "=" + shown(a) + " does not divide " +
                    std::string(b_name) + "=" + shown(b));
  }
}

// Prefixes a nested check's message ("hardware h100-sxm: ...").
template <typename Fn>
void with_context(const std::string& context, Fn&& fn) {
  try {
    fn();
  } catch (const SpecError& e) {
    throw SpecError(context + ": " + e.what());
  }
}

std::string joined_schedule_names() {
  std::string s;
  for (auto n : schedule::schedule_names()) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

}  // namespace

void validate(const ModelSpec& model) {
  require_positive("layers", model.layers);
  require_positive("hidden", model.hidden);
  require_positive("heads", model.heads);
  require_positive("kv_heads", model.kv_heads);
  require_positive("ffn_hidden", model.ffn_hidden);
  require_positive("vocab", model.vocab);
  if (model.vocab < 2)
    throw SpecError("vocab=" + shown(model.vocab) +
                    ": a vocabulary of one token leaves nothing to predict (at least 2)");
  require_positive("seq_len", model.seq_len);
  require_positive("experts", model.experts);
  require_positive("top_k", model.top_k);
  require_positive("moe_every", model.moe_every);
  require_at_most("layers", model.layers, 10'000);
  require_at_most("hidden", model.hidden, std::int64_t{1} << 17);
  require_at_most("ffn_hidden", model.ffn_hidden, std::int64_t{1} << 19);
  require_at_most("heads", model.heads, std::int64_t{1} << 14);
  require_at_most("vocab", model.vocab, std::int64_t{1} << 24);
  require_at_most("seq_len", model.seq_len, std::int64_t{1} << 24);
  require_at_most("experts", model.experts, std::int64_t{1} << 14);
  require_positive("vocab_divisible_by", model.vocab_divisible_by);
  require_at_most("vocab_divisible_by", model.vocab_divisible_by, std::int64_t{1} << 16);
  require_divides("heads", model.heads, "hidden", model.hidden);
  require_divides("kv_heads", model.kv_heads, "heads", model.heads);
  if (model.top_k > model.experts) {
    throw SpecError("top_k=" + shown(model.top_k) + " exceeds experts=" + shown(model.experts));
  }
}

void validate(const HardwareSpec& hw) {
  with_context("hardware " + hw.name, [&] {
    require_positive("peak_flops", hw.peak_flops);
    require_non_negative("fp32_peak_flops", hw.fp32_peak_flops);
    require_positive("hbm_bytes", hw.hbm_bytes);
    require_positive("hbm_bandwidth", hw.hbm_bandwidth);
    require_positive("intra_node_bandwidth", hw.intra_node_bandwidth);
    require_positive("inter_node_bandwidth", hw.inter_node_bandwidth);
    require_positive("devices_per_node", std::int64_t{hw.devices_per_node});
    require_non_negative("intra_node_latency", hw.intra_node_latency);
    require_non_negative("inter_node_latency", hw.inter_node_latency);
  });
}

void validate(const ClusterSpec& c) {
  validate(c.hardware);
  require_positive("devices", std::int64_t{c.devices});
  require_positive("devices_per_node", std::int64_t{c.devices_per_node});
  require_positive("intra_node_bandwidth", c.intra_node_bandwidth);
  require_positive("inter_node_bandwidth", c.inter_node_bandwidth);
  require_non_negative("intra_node_latency", c.intra_node_latency);
  require_non_negative("inter_node_latency", c.inter_node_latency);
  // A lone node may be partly used (4 of 8 GPUs); several nodes must be whole, or the node of a
  // device would be ambiguous.
  if (c.devices > c.devices_per_node && c.devices % c.devices_per_node != 0) {
    throw SpecError("devices=" + shown(std::int64_t{c.devices}) +
                    " is not a whole number of nodes (devices_per_node=" +
                    shown(std::int64_t{c.devices_per_node}) + ")");
  }
  if (c.node_groups.empty()) return;
  std::int64_t covered = 0;
  for (std::size_t i = 0; i < c.node_groups.size(); ++i) {
    const std::string name = "node_groups[" + std::to_string(i) + "]";
    require_positive(name + ".nodes", std::int64_t{c.node_groups[i].nodes});
    require_positive(name + ".inter_node_bandwidth", c.node_groups[i].inter_node_bandwidth);
    covered += c.node_groups[i].nodes;
  }
  if (covered != c.nodes()) {
    throw SpecError("node_groups cover " + shown(covered) + " nodes, cluster has " +
                    shown(std::int64_t{c.nodes()}));
  }
}

void validate(const ParallelPlan& plan) {
  require_positive("tp", std::int64_t{plan.tp});
  require_positive("pp", std::int64_t{plan.pp});
  require_positive("dp", std::int64_t{plan.dp});
  require_positive("ep", std::int64_t{plan.ep});
  require_positive("chunks", std::int64_t{plan.chunks});
  require_positive("micro_batch_size", std::int64_t{plan.micro_batch_size});
  require_positive("microbatches", std::int64_t{plan.microbatches});
  require_positive("global_batch", plan.global_batch);
  // Bounds far beyond any cluster (the largest runs use about 10^5 GPUs) and batch, so that the
  // products the tools derive (world size, layer groups, vocabulary shards, samples per step) fit
  // their types and an absurd file is an error, not an overflow.
  constexpr std::int64_t kMaxDevices = std::int64_t{1} << 24;
  const std::int64_t tp_pp = require_product_at_most("tp*pp", plan.tp, plan.pp, kMaxDevices);
  require_product_at_most("tp*pp*dp", tp_pp, plan.dp, kMaxDevices);
  require_product_at_most("pp*chunks", plan.pp, plan.chunks, kMaxDevices);
  const std::int64_t per_replica =
      require_product_at_most("micro_batch_size*microbatches", plan.micro_batch_size,
                              plan.microbatches, std::int64_t{1} << 36);
  require_product_at_most("micro_batch_size*microbatches*dp", per_replica, plan.dp,
                          std::int64_t{1} << 40);
  if (plan.group_size < 0) {
    throw SpecError("group_size=" + shown(std::int64_t{plan.group_size}) +
                    " must not be negative (0 = the schedule's default)");
  }
  if (plan.zero_stage < 0 || plan.zero_stage > 3) {
    throw SpecError("zero_stage=" + shown(std::int64_t{plan.zero_stage}) + " must be 0..3");
  }
  const auto& names = schedule::schedule_names();
  if (std::find(names.begin(), names.end(), plan.schedule) == names.end()) {
    throw SpecError("unknown schedule '" + plan.schedule + "' (valid: " + joined_schedule_names() +
                    ")");
  }
  if (plan.vocab != schedule::VocabMode::None) {
    const std::string mode(schedule::vocab_mode_name(plan.vocab));
    if (plan.pp < 2) throw SpecError("vocab mode " + mode + " needs pp>1");
    if (!schedule::supports_vocab(plan.schedule, plan.vocab)) {
      throw SpecError("schedule " + plan.schedule + " does not support vocab mode " + mode);
    }
  }
  require_divides("ep", plan.ep, "dp", plan.dp);
  if (plan.sequence_parallel && plan.tp < 2) throw SpecError("sequence_parallel needs tp>1");
  const std::int64_t batch = std::int64_t{plan.micro_batch_size} * plan.microbatches * plan.dp;
  if (plan.global_batch != batch) {
    throw SpecError("global_batch=" + shown(plan.global_batch) +
                    " does not equal micro_batch_size*microbatches*dp = " +
                    shown(std::int64_t{plan.micro_batch_size}) + "*" +
                    shown(std::int64_t{plan.microbatches}) + "*" + shown(std::int64_t{plan.dp}) +
                    " = " + shown(batch));
  }
  if (!plan.layer_split.empty() &&
      static_cast<int>(plan.layer_split.size()) != plan.layer_groups()) {
    const std::string groups = plan.chunks == 1
                                   ? "pp=" + shown(std::int64_t{plan.pp})
                                   : "pp*chunks=" + shown(std::int64_t{plan.layer_groups()});
    throw SpecError("layer_split has " + shown(static_cast<std::int64_t>(plan.layer_split.size())) +
                    " entries, " + groups);
  }
  for (std::size_t i = 0; i < plan.layer_split.size(); ++i) {
    if (plan.layer_split[i] < 0) {
      throw SpecError("layer_split[" + std::to_string(i) +
                      "]=" + shown(std::int64_t{plan.layer_split[i]}) + " is negative");
    }
  }
}

void validate(const ModelSpec& model, const ClusterSpec& cluster, const ParallelPlan& plan) {
  validate(cluster);
  validate(model, plan);
  if (plan.world_size() != cluster.devices) {
    throw SpecError("tp*pp*dp = " + shown(std::int64_t{plan.world_size()}) +
                    " does not match the cluster's " + shown(std::int64_t{cluster.devices}) +
                    " devices");
  }
}

void validate(const ModelSpec& model, const ParallelPlan& plan) {
  validate(model);
  validate(plan);
  require_divides("tp", plan.tp, "heads", model.heads);
  require_divides("tp", plan.tp, "kv_heads", model.kv_heads);
  require_divides("tp", plan.tp, "ffn_hidden", model.ffn_hidden);
  // Each vocabulary shard holds at least one row: tp shards, or tp*pp with vocabulary
  // parallelism (the engine's layout; the cost model assumes the same).
  const std::int64_t shards = plan.vocab_shards();
  if (model.vocab < shards)
    throw SpecError("vocab=" + shown(model.vocab) + " is smaller than its " + shown(shards) +
                    " shards (tp" + (plan.vocab != schedule::VocabMode::None ? "*pp" : "") + ")");
  if (plan.ep > 1) {
    if (!is_moe(model)) {
      throw SpecError("ep=" + shown(std::int64_t{plan.ep}) +
                      " needs an MoE model (experts=" + shown(model.experts) + ")");
    }
    require_divides("ep", plan.ep, "experts", model.experts);
  }
  if (plan.layer_split.empty()) {
    if (plan.pp > model.layers) {
      throw SpecError("pp=" + shown(std::int64_t{plan.pp}) +
                      " exceeds layers=" + shown(model.layers));
    }
    if (plan.layer_groups() > model.layers) {
      throw SpecError("chunks=" + shown(std::int64_t{plan.chunks}) +
                      " needs at least pp*chunks=" + shown(std::int64_t{plan.layer_groups()}) +
                      " layers, model has " + shown(model.layers));
    }
  } else {
    const std::int64_t sum =
        std::accumulate(plan.layer_split.begin(), plan.layer_split.end(), std::int64_t{0});
    if (sum != model.layers) {
      throw SpecError("layer_split sums to " + shown(sum) + ", model has " + shown(model.layers) +
                      " layers");
    }
  }
}

}  // namespace pipetune::spec
