#include "engine/spec/parallel_plan.hpp"

#include <algorithm>
#include <limits>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/comma_list.hpp"

namespace pipetune::spec {

std::string_view recompute_name(Recompute r) {
  switch (r) {
    case Recompute::None:
      return "none";
    case Recompute::Selective:
      return "selective";
    case Recompute::Full:
      return "full";
  }
  return "?";
}

Recompute parse_recompute(std::string_view name) {
  for (Recompute r : {Recompute::None, Recompute::Selective, Recompute::Full}) {
    if (recompute_name(r) == name) return r;
  }
  throw SpecError({"plan.recompute"}, "unknown recompute mode '" + std::string(name) +
                                          "' (valid: none, selective, full)");
}

std::string_view rank_order_name(RankOrder order) {
  return order == RankOrder::TpPpDp ? "tp-pp-dp" : "tp-dp-pp";
}

RankOrder parse_rank_order(std::string_view name) {
  for (RankOrder o : {RankOrder::TpDpPp, RankOrder::TpPpDp}) {
    if (rank_order_name(o) == name) return o;
  }
  throw SpecError({"plan.rank_order"},
                  "unknown rank order '" + std::string(name) + "' (valid: tp-dp-pp, tp-pp-dp)");
}

int ParallelPlan::world_size() const {
  if (stage_tp.empty()) return tp * pp * dp;
  int devices = 0;
  for (int t : stage_tp) devices += t;
  return devices * dp;
}

int tp_of_stage(const ParallelPlan& plan, int rank) {
  if (plan.stage_tp.empty()) return plan.tp;
  if (rank < 0 || rank >= static_cast<int>(plan.stage_tp.size())) {
    throw SpecError({"plan.stage_tp", "plan.pp"},
                    "stage_tp has no entry for pipeline rank " + std::to_string(rank));
  }
  return plan.stage_tp[static_cast<std::size_t>(rank)];
}

bool stage_tp_varies(const ParallelPlan& plan) {
  const auto& s = plan.stage_tp;
  return std::any_of(s.begin(), s.end(), [&](int t) { return t != s.front(); });
}

int stage_first_slot(const ParallelPlan& plan, int rank) {
  int slot = 0;
  for (int r = 0; r < rank; ++r) slot += tp_of_stage(plan, r) * plan.dp;
  return slot;
}

int pp_rank_of(const ParallelPlan& plan, int rank) {
  if (rank < 0 || rank >= plan.world_size())
    throw SpecError({"plan.pp"}, "rank " + std::to_string(rank) + " is outside the plan's " +
                                     std::to_string(plan.world_size()) + " ranks");
  if (stage_tp_varies(plan)) {
    int first = 0;  // stage_first_slot(stage)
    for (int stage = 0; stage < plan.pp; ++stage) {
      first += tp_of_stage(plan, stage) * plan.dp;
      if (rank < first) return stage;
    }
    return plan.pp - 1;  // not reached: world_size() = dp * sum(stage_tp)
  }
  if (plan.rank_order == RankOrder::TpPpDp) return (rank / plan.tp) % plan.pp;
  return rank / (plan.tp * plan.dp);
}

int device_slot(const ParallelPlan& plan, int tp_rank, int dp_rank, int pp_rank) {
  if (!stage_tp_varies(plan)) return device_strides(plan).slot(tp_rank, dp_rank, pp_rank);
  return stage_first_slot(plan, pp_rank) + tp_rank + tp_of_stage(plan, pp_rank) * dp_rank;
}

std::vector<int> reshard_senders(int senders, int receivers) {
  std::vector<int> from(static_cast<std::size_t>(std::max(receivers, 0)));
  for (int j = 0; j < receivers; ++j) from[static_cast<std::size_t>(j)] = j % senders;
  return from;
}

std::vector<int> parse_stage_tp(std::string_view comma_list) {
  std::vector<int> tps;
  for (const std::string_view entry : comma_entries(comma_list)) {
    const bool digits = !entry.empty() && entry.size() <= 6 &&
                        entry.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits || std::stoi(std::string(entry)) < 1)
      throw SpecError({"plan.stage_tp"},
                      "stage_tp must be positive TP degrees separated by commas (got '" +
                          std::string(entry) + "' in '" + std::string(trimmed(comma_list)) + "')");
    tps.push_back(std::stoi(std::string(entry)));
  }
  return tps;
}

std::string stage_tp_text(const std::vector<int>& stage_tp, char separator) {
  return joined(
      stage_tp, [](int t) { return std::to_string(t); }, std::string_view(&separator, 1));
}

DeviceStrides device_strides(const ParallelPlan& plan) {
  DeviceStrides s;
  if (plan.rank_order == RankOrder::TpPpDp) {
    s.pp_stride = plan.tp;
    s.dp_stride = plan.tp * plan.pp;
  } else {
    s.dp_stride = plan.tp;
    s.pp_stride = plan.tp * plan.dp;
  }
  return s;
}

Recompute recompute_of_stage(const ParallelPlan& plan, int rank) {
  if (plan.stage_recompute.empty()) return plan.recompute;
  if (rank < 0 || rank >= static_cast<int>(plan.stage_recompute.size())) {
    throw SpecError({"plan.stage_recompute", "plan.pp"},
                    "stage_recompute has no entry for pipeline rank " + std::to_string(rank));
  }
  return plan.stage_recompute[static_cast<std::size_t>(rank)];
}

ParallelPlan plan_of_stage(const ParallelPlan& plan, int rank) {
  ParallelPlan stage = plan;
  stage.recompute = recompute_of_stage(plan, rank);
  stage.stage_recompute.clear();
  stage.tp = tp_of_stage(plan, rank);
  stage.stage_tp.clear();
  return stage;
}

bool stage_recompute_varies(const ParallelPlan& plan) {
  const auto& s = plan.stage_recompute;
  return std::any_of(s.begin(), s.end(), [&](Recompute r) { return r != s.front(); });
}

std::vector<Recompute> parse_stage_recompute(std::string_view comma_list) {
  std::vector<Recompute> modes;
  for (const std::string_view name : comma_entries(comma_list)) {
    try {
      modes.push_back(parse_recompute(name));
    } catch (const SpecError&) {
      throw SpecError({"plan.stage_recompute"}, "stage_recompute[" + std::to_string(modes.size()) +
                                                    "]: unknown mode '" + std::string(name) +
                                                    "' (valid: none, selective, full)");
    }
  }
  return modes;
}

std::vector<int> parse_node_group_order(std::string_view comma_list) {
  std::vector<int> order;
  for (const std::string_view entry : comma_entries(comma_list)) {
    const bool digits = !entry.empty() && entry.size() <= 9 &&
                        entry.find_first_not_of("0123456789") == std::string_view::npos;
    if (!digits)
      throw SpecError({"plan.node_group_order"},
                      "node_group_order must be node group indices separated by commas (got '" +
                          std::string(entry) + "' in '" + std::string(trimmed(comma_list)) + "')");
    order.push_back(std::stoi(std::string(entry)));
  }
  return order;
}

std::string stage_recompute_text(const std::vector<Recompute>& modes) {
  return joined(
      modes, [](Recompute r) { return std::string(recompute_name(r)); }, ",");
}

std::string stage_recompute_letters(const std::vector<Recompute>& modes) {
  return joined(
      modes, [](Recompute r) { return std::string(1, recompute_name(r).front()); }, "/");
}

void apply_defaults(ParallelPlan& plan) {
  if (plan.chunks == 0) {
    // An unknown schedule is validate()'s to report, with the valid names.
    const auto& names = schedule::schedule_names();
    const bool known = std::find(names.begin(), names.end(), plan.schedule) != names.end();
    plan.chunks = known ? schedule::default_chunks(plan.schedule) : 1;
  }
  if (plan.microbatches == 0) {
    const std::int64_t per_microbatch = std::int64_t{plan.micro_batch_size} * plan.dp;
    if (plan.global_batch > 0 && per_microbatch > 0 && plan.global_batch % per_microbatch == 0 &&
        plan.global_batch / per_microbatch <= std::numeric_limits<int>::max()) {
      plan.microbatches = static_cast<int>(plan.global_batch / per_microbatch);
    } else {
      plan.microbatches = plan.pp;
    }
  }
  if (plan.global_batch == 0) {
    // Saturated where the product is beyond 64 bits: validate() refuses such a plan by its sizes.
    std::int64_t batch = 0;
    if (__builtin_mul_overflow(std::int64_t{plan.micro_batch_size} * plan.microbatches,
                               std::int64_t{plan.dp}, &batch))
      batch = std::numeric_limits<std::int64_t>::max();
    plan.global_batch = batch;
  }
}

int modular_chunks(const ModelSpec& model, const ParallelPlan& plan) {
  if (schedule::schedule_placement(plan.schedule) != schedule::Placement::Linear)
    throw SpecError({"plan.schedule", "plan.chunks"},
                    "modular placement puts layer l on rank l mod pp; schedule " + plan.schedule +
                        " places its layer groups in a V");
  if (plan.pp < 1 || model.layers % plan.pp != 0)
    throw SpecError({"plan.pp", "model.layers"},
                    "modular placement needs pp to divide the layers: pp=" +
                        std::to_string(plan.pp) + ", layers=" + std::to_string(model.layers));
  return static_cast<int>(model.layers / plan.pp);
}

bool reduces_per_group(const ParallelPlan& plan) {
  return plan.layered_reduction || schedule::always_reduces_per_group(plan.schedule);
}

bool overlaps_moe_all_to_all(const ParallelPlan& plan) {
  return plan.moe_chunks > 1 && plan.ep > 1;
}

bool two_phase_all_to_all(const ParallelPlan& plan) {
  return plan.moe_a2a_node_ranks > 0;
}

std::vector<int> even_layer_split(std::int64_t layers, int groups) {
  if (groups <= 0) return {};
  std::vector<int> split(groups, static_cast<int>(layers / groups));
  const std::int64_t remainder = layers % groups;
  for (std::int64_t g = 0; g < remainder; ++g) ++split[g];
  return split;
}

std::vector<int> layer_split(const ModelSpec& model, const ParallelPlan& plan) {
  if (!plan.layer_split.empty()) return plan.layer_split;
  return even_layer_split(model.layers, plan.layer_groups());
}

}  // namespace pipetune::spec
