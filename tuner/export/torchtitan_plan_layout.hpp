// How a plan maps onto torchtitan's parallelism, the same for both torchtitan targets (the TOML
// job file of 238fa99 and the config function of b5bcd76): the registered flavor with the
// model's shape, the schedule (a torch.distributed.pipelining class, or pipetune's own order in a
// schedule CSV), the layer split and the data-parallel degrees. Refuses (InputError) what
// torchtitan cannot run as planned.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "tuner/export/exporters.hpp"
#include "tuner/export/torchtitan_rules.hpp"

namespace pipetune::tuner::torchtitan_detail {

// The file the schedule CSV is written to, beside the exported config.
inline constexpr const char* kScheduleCsvFile = "pipetune_schedule.csv";

// What the layout is read against: the target's flavors and where its rules come from.
struct TorchtitanTarget {
  std::string_view framework;  // refusals start with it ("torchtitan")
  const std::vector<TorchtitanFlavor>* flavors;
  const char* commit;
  const char* flavor_source;         // the flavor table's file and lines
  const char* data_parallel_source;  // where replicate / shard are defined
  const char* rank_mesh_source;      // where the device mesh's dimension order is fixed
  const char* cpu_offload_source;    // training.enable_cpu_offload and what it offloads
};

struct TorchtitanPlanLayout {
  TorchtitanFlavor flavor;  // the registered flavor with the model's shape
  std::string csv;          // pipetune's order for a schedule CSV; empty when the class runs it
  std::string schedule;     // the schedule class named in the config
  std::vector<int> split;   // transformer layers per stage, in model order
  bool even_split = true;
  int replicate = 1;
  int shard = 1;
  // fsdp_reshard_after_forward for ZeRO over dp > 1 ("always": ZeRO-3, "never": ZeRO-2); empty
  // when there is no FSDP.
  std::string reshard;
  // Comment lines ("# ") saying which nodes take which node ranks on a cluster of node groups
  // (export_detail::placement_comment); empty without node groups.
  std::string placement;
};

// The layout, refusing the tp-pp-dp rank order (torchtitan's meshes are tp-dp-pp), offload
// (torchtitan's trainer has no activation offload, and its only CPU offload moves the weights and
// gradients too, not the optimizer state alone), vocabulary parallelism, a schedule torch has no
// class or CSV for, ZeRO-1 over dp > 1, then what `check_experts` refuses (the target's own expert
// rules, given the data-parallel degrees), then a model without a registered flavor
// (registered_flavor).
TorchtitanPlanLayout torchtitan_plan_layout(
    const ExportRequest& r, const TorchtitanTarget& t,
    const std::function<void(const TorchtitanPlanLayout&)>& check_experts);

// The target's registered flavor with the model's shape; refused (naming the model, its shape and
// the flavors there are) when there is none: torchtitan builds the flavor's model, not the plan's.
TorchtitanFlavor registered_flavor(const spec::ModelSpec& m, const TorchtitanTarget& t);

// torchtitan's module names per model part for a layer split (the embedding on the first part,
// the final norm and `output_module` on the last), as a one-line list of lists.
std::string module_fqns_text(const std::vector<int>& split, std::string_view output_module);

}  // namespace pipetune::tuner::torchtitan_detail
