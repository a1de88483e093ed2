#include "engine/spec/expert_layout.hpp"

#include <algorithm>

#include "engine/errors.hpp"
#include "engine/spec/comma_list.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::spec {

namespace {

constexpr std::string_view kValid = "valid: sharded, whole, dedup, adaptive";

std::string name_of(ExpertLayout layout) {
  return std::string(expert_layout_name(layout));
}

}  // namespace

std::string_view expert_layout_name(ExpertLayout layout) {
  switch (layout) {
    case ExpertLayout::Whole:
      return "whole";
    case ExpertLayout::Dedup:
      return "dedup";
    case ExpertLayout::Adaptive:
      return "adaptive";
    case ExpertLayout::Sharded:
      break;
  }
  return "sharded";
}

ExpertLayout parse_expert_layout(std::string_view name) {
  for (ExpertLayout l :
       {ExpertLayout::Sharded, ExpertLayout::Whole, ExpertLayout::Dedup, ExpertLayout::Adaptive})
    if (expert_layout_name(l) == name) return l;
  throw SpecError({"plan.expert_layout"}, "unknown expert layout '" + std::string(name) + "' (" +
                                              std::string(kValid) + ")");
}

ExpertLayout expert_layout_of(const std::vector<ExpertLayout>& layouts, std::int64_t moe_index) {
  if (layouts.empty()) return ExpertLayout::Sharded;
  if (layouts.size() == 1) return layouts.front();
  if (moe_index < 0 || moe_index >= static_cast<std::int64_t>(layouts.size()))
    throw SpecError({"plan.expert_layout"},
                    "expert_layout has no entry for MoE layer " + std::to_string(moe_index));
  return layouts[static_cast<std::size_t>(moe_index)];
}

ExpertLayout expert_layout_of_layer(const ModelSpec& model, const ParallelPlan& plan,
                                    std::int64_t layer) {
  if (!is_moe_layer(model, layer)) return ExpertLayout::Sharded;
  return expert_layout_of(plan.expert_layouts, layer / std::max<std::int64_t>(1, model.moe_every));
}

bool uses_expert_layout(const std::vector<ExpertLayout>& layouts, ExpertLayout layout) {
  if (layouts.empty()) return layout == ExpertLayout::Sharded;
  return std::find(layouts.begin(), layouts.end(), layout) != layouts.end();
}

bool has_whole_experts(const std::vector<ExpertLayout>& layouts) {
  return uses_expert_layout(layouts, ExpertLayout::Whole);
}

std::vector<ExpertLayout> parse_expert_layouts(std::string_view comma_list) {
  std::vector<ExpertLayout> layouts;
  for (const std::string_view name : comma_entries(comma_list)) {
    try {
      layouts.push_back(parse_expert_layout(name));
    } catch (const SpecError&) {
      throw SpecError({"plan.expert_layout"}, "expert_layout[" + std::to_string(layouts.size()) +
                                                  "]: unknown layout '" + std::string(name) +
                                                  "' (" + std::string(kValid) + ")");
    }
  }
  return layouts;
}

std::vector<std::string> expert_layout_names(const std::vector<ExpertLayout>& layouts) {
  std::vector<std::string> names;
  for (ExpertLayout l : layouts) names.push_back(name_of(l));
  return names;
}

std::string expert_layouts_toml(const std::vector<ExpertLayout>& layouts) {
  const auto quoted = [](ExpertLayout l) { return "\"" + name_of(l) + "\""; };
  if (layouts.size() == 1) return quoted(layouts.front());
  return "[" + joined(layouts, quoted, ", ") + "]";
}

std::string expert_layouts_text(const std::vector<ExpertLayout>& layouts) {
  return joined(layouts, name_of, ",");
}

std::string expert_layouts_label(const std::vector<ExpertLayout>& layouts) {
  if (layouts.size() == 1) return name_of(layouts.front());
  return joined(
      layouts, [](ExpertLayout l) { return name_of(l).substr(0, 1); }, "/");
}

void validate_expert_layouts(const ModelSpec& model, const ParallelPlan& plan) {
  const auto& layouts = plan.expert_layouts;
  if (layouts.empty()) return;
  const std::int64_t moe_layers = moe_layer_count(model);
  if (moe_layers == 0)
    throw SpecError({"plan.expert_layout", "model.experts"},
                    "expert_layout places the experts of MoE layers; the model has none (experts=" +
                        std::to_string(model.experts) + ")");
  const auto n = static_cast<std::int64_t>(layouts.size());
  if (n != 1 && n != moe_layers)
    throw SpecError({"plan.expert_layout"},
                    "expert_layout has " + std::to_string(n) +
                        " entries: give one for every MoE layer, or one per MoE layer (" +
                        std::to_string(moe_layers) + ")");
  if (!has_whole_experts(layouts)) return;
  const std::int64_t local = model.experts / std::max(1, plan.ep);
  for (int s = 0; s < plan.pp; ++s) {
    const int t = tp_of_stage(plan, s);
    if (local % t == 0) continue;
    throw SpecError({"plan.expert_layout", "plan.tp", "plan.ep", "model.experts"},
                    "expert_layout=whole divides each EP rank's experts (experts/ep = " +
                        std::to_string(model.experts) + "/" + std::to_string(plan.ep) + " = " +
                        std::to_string(local) + ") among its tp=" + std::to_string(t) +
                        " ranks, which does not divide them");
  }
}

}  // namespace pipetune::spec
