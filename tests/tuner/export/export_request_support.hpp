// The export request the export tests start from: a preset model on DGX H100 nodes with the
// given tp x pp x dp, two micro-batches per stage, selective recomputation and, with TP,
// sequence parallelism; `edit` changes the plan before its defaults are derived.
#pragma once

#include <functional>

#include "engine/spec/load.hpp"
#include "tuner/export/exporters.hpp"

namespace pipetune::tuner::export_testing {

inline ExportRequest plan_request(const char* model, int tp, int pp, int dp,
                                  const std::function<void(spec::ParallelPlan&)>& edit = {}) {
  ExportRequest q;
  q.model = spec::load_model(model);
  q.cluster = spec::load_cluster("dgx-h100-8");
  q.plan.tp = tp;
  q.plan.pp = pp;
  q.plan.dp = dp;
  q.plan.microbatches = 2 * pp;
  q.plan.sequence_parallel = tp > 1;
  q.plan.recompute = spec::Recompute::Selective;
  if (edit) edit(q.plan);
  spec::apply_defaults(q.plan);
  q.cluster.devices = q.plan.world_size();
  return q;
}

}  // namespace pipetune::tuner::export_testing
