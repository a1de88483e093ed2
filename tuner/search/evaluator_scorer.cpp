#include "tuner/search/evaluator_scorer.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/recent_ring.hpp"

namespace pipetune::tuner {

spec::ParallelPlan without_offload_or_recompute(const spec::ParallelPlan& plan) {
  spec::ParallelPlan p = without_offload(plan);
  p.recompute = spec::Recompute::None;
  p.stage_recompute.clear();
  return p;
}

namespace {

// The plan is its own without_offload_or_recompute (checked without building that copy).
bool keeps_everything_without_recompute(const spec::ParallelPlan& plan) {
  return !plan.offload_activations && !plan.offload_optimizer &&
         plan.recompute == spec::Recompute::None && plan.stage_recompute.empty();
}

}  // namespace

ScorerFactory evaluator_scorers(const spec::ModelSpec& model, const spec::ClusterSpec& cluster) {
  return evaluator_scorers(model, cluster, search_options(cluster, {}));
}

EvaluateOptions search_options(const spec::ClusterSpec& cluster, const FailureModel& failures) {
  for (const auto& [what, v] : {std::pair{"failure rate", failures.rate_per_device_hour},
                                std::pair{"restart delay", failures.restart_delay}})
    if (!(v >= 0.0) || !std::isfinite(v))
      throw InputError(std::string("the ") + what + " must be a finite number >= 0");
  EvaluateOptions o;
  o.skip_simulation_when_static_memory_exceeds = true;
  o.failures = failures;
  if (failures.reroute) {
    o.execution = default_execution(cluster.hardware);
    o.execution->reroute_failures = true;
  }
  return o;
}

ScorerFactory evaluator_scorers(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                                const EvaluateOptions& options) {
  auto target =
      std::make_shared<const std::pair<spec::ModelSpec, spec::ClusterSpec>>(model, cluster);
  EvaluateOptions shared = options;
  if (!shared.simulation_cache) shared.simulation_cache = std::make_shared<SimulationCache>();
  return [target, options = std::move(shared)] {
    auto evaluator = std::make_shared<PlanEvaluator>(options);
    // The latest bound times of plans that keep everything on the device without recomputing:
    // the search enumerates each such plan a few plans before its offload variants, whose bound
    // needs its time again.
    auto kept_times = std::make_shared<RecentRing<std::pair<spec::ParallelPlan, double>, 16>>();
    const FailureModel failures = options.failures;
    PlanBounder bound = [evaluator, target, failures, kept_times](const spec::ParallelPlan& plan) {
      const auto remember = [&](const spec::ParallelPlan& p, double t) { kept_times->add({p, t}); };
      const PlanBound b = evaluator->bound(target->first, target->second, plan);
      CandidateBound out{b.iteration_time, b.peak_memory_bytes, b.fits, b.slice_tokens};
      if (keeps_everything_without_recompute(plan)) remember(plan, b.iteration_time);
      if (plan.offload_activations || plan.offload_optimizer) {
        // Copies that may stall, a slower optimizer step, recomputation: an offloading plan is
        // never faster than the same plan keeping everything on the device without recomputing.
        const spec::ParallelPlan kept = without_offload_or_recompute(plan);
        const auto* seen = kept_times->find([&](const auto& e) { return e.first == kept; });
        double kept_time = 0.0;
        if (seen != nullptr) {
          kept_time = seen->second;
        } else {
          kept_time = evaluator->bound(target->first, target->second, kept).iteration_time;
          remember(kept, kept_time);
        }
        out.iteration_time = std::max(out.iteration_time, kept_time);
      }
      // The expected time grows with the time: the bound's is a bound on the plan's.
      out.iteration_time =
          expected_iteration_time(out.iteration_time, plan.world_size(), plan.dp, failures);
      return out;
    };
    PlanScorer score([evaluator, target](const spec::ParallelPlan& plan) {
      const PlanEvaluation e = evaluator->evaluate(target->first, target->second, plan);
      CandidateScore c;
      c.feasible = e.feasible;
      c.infeasible_reason = e.feasible ? ""
                            : e.infeasible_reason == kFailuresOutpaceIterations
                                ? e.infeasible_reason
                                : std::string(kOutOfMemoryReason);
      // Under a failure rate: the expected figures (equal to the others without one), which are
      // never below the plan's bound.
      c.iteration_time = e.expected_iteration_time;
      c.tokens_per_s = e.expected_tokens_per_s;
      c.mfu = e.mfu;
      c.peak_memory_bytes = e.memory.peak_bytes;
      c.slice_tokens = e.slice_tokens;
      return c;
    });
    // An offloading plan runs the order of the same plan without offload (the generators never
    // read the copies) at the same pass costs, with the copies as more constraints; a
    // recomputing one, costs at least as high as its kept plan's on an order that does not
    // depend on them. On a given order the simulated time only grows with the costs (the ops
    // start at maxima of sums of them), so those plans' times bound its. Not for recomputation
    // in overlapped pairs, where a longer backward hides more of its forward's communication
    // and the forward ends sooner; nor with faults on the cluster, whose re-routing moves work
    // by the costs.
    const bool faults = !target->second.faults.empty();
    PlanLowering lower = [faults](const spec::ParallelPlan& plan) {
      std::vector<spec::ParallelPlan> out;
      if (faults || keeps_everything_without_recompute(plan)) return out;
      if (plan.offload_activations || plan.offload_optimizer) out.push_back(without_offload(plan));
      const bool recomputes =
          plan.recompute != spec::Recompute::None || !plan.stage_recompute.empty();
      const bool fixed_order = !schedule::uses_costs(plan.schedule, plan.vocab) &&
                               !schedule::supports_slices(plan.schedule) &&
                               !schedule::has_overlapped_pairs(plan.schedule);
      if (recomputes && fixed_order) out.push_back(without_offload_or_recompute(plan));
      return out;
    };
    // The schedule's transformer ops alone, where their order is fixed (the vocabulary modes of
    // v-half, 1f1b and interleaved-1f1b): the passes add ops and dependencies around them, so
    // the plan is never faster. Not with faults on the cluster, as above.
    PlanRefiner refine = [evaluator, target, failures,
                          faults](const spec::ParallelPlan& plan) -> std::optional<double> {
      if (faults) return std::nullopt;
      const std::optional<double> t =
          evaluator->transformer_bound(target->first, target->second, plan);
      if (!t) return std::nullopt;
      return expected_iteration_time(*t, plan.world_size(), plan.dp, failures);
    };
    Scorer scorer(std::move(score), std::move(bound), std::move(lower));
    scorer.refine = std::move(refine);
    return scorer;
  };
}

}  // namespace pipetune::tuner
