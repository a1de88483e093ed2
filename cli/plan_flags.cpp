#include "cli/plan_flags.hpp"

#include <algorithm>

#include "cli/count_flags.hpp"
#include "engine/errors.hpp"

namespace pipetune::cli {

bool PlanFlags::any_given() const {
  return tp || pp || dp || ep || chunks || microbatches || micro_batch_size || zero || slices ||
         moe_chunks || moe_a2a_node_ranks || expert_layout || sparse_embedding_gradient;
}

void PlanFlags::check_counts() const {
  require_counts_at_least_one({{tp, "--tp"},
                               {pp, "--pp"},
                               {dp, "--dp"},
                               {ep, "--ep"},
                               {chunks, "--chunks"},
                               {microbatches, "--microbatches"},
                               {micro_batch_size, "--micro-batch-size"},
                               {slices, "--slices"},
                               {moe_chunks, "--moe-chunks"},
                               {moe_a2a_node_ranks, "--moe-a2a-node-ranks"}});
  if (expert_layout) {
    try {
      spec::parse_expert_layouts(*expert_layout);
    } catch (const SpecError& e) {
      throw InputError("--expert-layout: " + e.rule());
    }
  }
}

void PlanFlags::apply_to(spec::ParallelPlan& plan) const {
  check_counts();
  if (tp) plan.tp = *tp;
  if (pp) plan.pp = *pp;
  if (dp) plan.dp = *dp;
  if (ep) plan.ep = *ep;
  if (chunks) plan.chunks = *chunks;
  if (microbatches) plan.microbatches = *microbatches;
  if (micro_batch_size) plan.micro_batch_size = *micro_batch_size;
  if (zero) plan.zero_stage = *zero;
  if (slices) plan.slices = *slices;
  if (moe_chunks) plan.moe_chunks = *moe_chunks;
  if (moe_a2a_node_ranks) plan.moe_a2a_node_ranks = *moe_a2a_node_ranks;
  if (expert_layout) plan.expert_layouts = spec::parse_expert_layouts(*expert_layout);
  if (sparse_embedding_gradient) plan.sparse_embedding_gradient = true;
}

void add_plan_flags(CLI::App* cmd, PlanFlags& flags, const PlanFlagHelp& help) {
  const auto add = [cmd](const char* name, std::optional<int>& value, const char* text) {
    if (text != nullptr) cmd->add_option(name, value, text);
  };
  add("--tp", flags.tp, help.tp);
  add("--pp", flags.pp, help.pp);
  add("--dp", flags.dp, help.dp);
  add("--ep", flags.ep, help.ep);
  add("--chunks", flags.chunks, help.chunks);
  add("--microbatches", flags.microbatches, help.microbatches);
  add("--micro-batch-size", flags.micro_batch_size, help.micro_batch_size);
  add("--zero", flags.zero, help.zero);
  add("--slices", flags.slices, help.slices);
  add("--moe-chunks", flags.moe_chunks, help.moe_chunks);
  add("--moe-a2a-node-ranks", flags.moe_a2a_node_ranks, help.moe_a2a_node_ranks);
  if (help.expert_layout != nullptr)
    cmd->add_option("--expert-layout", flags.expert_layout, help.expert_layout);
  if (help.sparse_embedding_gradient != nullptr)
    cmd->add_flag("--sparse-embedding-grad", flags.sparse_embedding_gradient,
                  help.sparse_embedding_gradient);
}

std::vector<spec::Recompute> parse_stage_recompute_flag(const std::string& text, int pp) {
  std::vector<spec::Recompute> modes;
  try {
    modes = spec::parse_stage_recompute(text);
  } catch (const SpecError& e) {
    throw InputError("--stage-recompute: " + std::string(e.what()));
  }
  if (!modes.empty() && static_cast<int>(modes.size()) != pp)
    throw InputError("--stage-recompute: needs pp = " + std::to_string(pp) + " entries, got " +
                     std::to_string(modes.size()));
  return modes;
}

std::vector<int> parse_stage_tp_flag(const std::string& text, int pp) {
  std::vector<int> tps;
  try {
    tps = spec::parse_stage_tp(text);
  } catch (const SpecError& e) {
    throw InputError("--stage-tp: " + e.rule());
  }
  if (!tps.empty() && static_cast<int>(tps.size()) != pp)
    throw InputError("--stage-tp: needs pp = " + std::to_string(pp) + " entries, got " +
                     std::to_string(tps.size()));
  return tps;
}

void apply_stage_tp_flag(const std::string& text, const std::optional<int>& tp_flag,
                         spec::ParallelPlan& plan) {
  const std::vector<int> tps = parse_stage_tp_flag(text, plan.pp);
  if (tps.empty()) return;
  if (tp_flag && *tp_flag != tps.front())
    throw InputError("--tp " + std::to_string(*tp_flag) + " and --stage-tp " +
                     spec::stage_tp_text(tps, ',') + ": tp is the first stage's (" +
                     std::to_string(tps.front()) + "); leave --tp out or make them agree");
  plan.stage_tp = tps;
  plan.tp = tps.front();
}

}  // namespace pipetune::cli
