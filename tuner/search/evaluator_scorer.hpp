// The search's scorer from the cost model: each scoring thread gets its own PlanEvaluator (it
// caches per-thread), shared by the CLI's `tune` and the GUI's tuner.
#pragma once

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::tuner {

// Each scorer comes with the evaluator's lower bound (PlanEvaluator::bound), so a search with
// SearchSpace::keep > 0 skips plans that cannot make the best results. An offloading plan's time
// bound is at least that of without_offload_or_recompute(plan): offload and recomputation only
// add time, so its variants are skipped as soon as the plan they vary is.
// Plans whose static memory (parameters, gradients, optimizer state) already exceeds the device
// skip the simulation unless `options` says otherwise: they are infeasible whatever the schedule.
ScorerFactory evaluator_scorers(const spec::ModelSpec& model, const spec::ClusterSpec& cluster);
ScorerFactory evaluator_scorers(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                const EvaluateOptions& options);

// A search's evaluation options (as the two-argument evaluator_scorers uses) ranking plans under
// `failures`: InputError for a negative or non-finite rate or restart delay. With re-routing,
// the cluster's own faults are re-routed too (ExecutionOptions::reroute_failures).
EvaluateOptions search_options(const spec::ClusterSpec& cluster, const FailureModel& failures);

// The plan with no offload and no recomputation (uniform or per stage): the fastest of its
// memory variants.
spec::ParallelPlan without_offload_or_recompute(const spec::ParallelPlan& plan);

}  // namespace pipetune::tuner
