// Evaluating one plan: validate it, generate its schedule, cost its ops (tuner/cost), simulate
// the pipeline (tuner/sim, no trace) and apply the memory model (tuner/memory). What
// `pipetune predict` prints and what the search ranks.
//
// Iteration time = simulated pipeline makespan
//                + the slowest stage's exposed data-parallel communication (gradient reduction
//                  beyond the last micro-batch's backward when overlapped, parameter gather
//                  beyond the first forward when overlapped, the tied-embedding all-reduce)
//                + the slowest stage's optimizer step (with offload_optimizer: its copies over
//                  the host link and the host's update, tuner/cost/op_costs.hpp).
// With offload_activations the simulator runs each stage's copies (tuner/sim/simulator.hpp):
// the pipeline time includes what compute waits for them, the memory estimate puts the
// simulated host peak in host memory (tuner/memory/memory_model.hpp).
// Stages are taken to finish the pipeline together (the simulator reports only the makespan),
// so a stage whose pipeline work ends early is charged its exposed reduction anyway: an upper
// bound when the last stage holds the most parameters.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "engine/schedule/generators.hpp"
#include "engine/schedule/schedule.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "profiler/trace.hpp"
#include "tuner/cost/execution.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/cost/recent_ring.hpp"
#include "tuner/memory/memory_model.hpp"
#include "tuner/predict/simulation_cache.hpp"
#include "tuner/predict/token_slices.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::tuner {

// Unreliable peers at a rate (ATOM, SWARM): the N devices fail as a Poisson process of rate
// mu = rate N / 3600 per second, as many times in one iteration as it happens to.
// - Without re-routing a failure stops the synchronous step: it waits `restart_delay` (S) seconds
//   and starts the iteration over. An iteration of T seconds then takes, on average (the
//   renewal argument: it ends at the first failure-free stretch of T),
//   E = (exp(mu T) - 1) (1 / mu + S), about T + mu T (S + T / 2) while mu T is small.
// - With re-routing (dp >= 2) each failure moves the failed device's share of what is left
//   while it is down, min(S, T - u) for a failure at u, to its stage's other dp - 1 replicas and
//   the step goes on: E = T + mu T g / (dp - 1), mu T being the failures an iteration expects
//   and g the mean of min(S, T - u) over u in [0, T): S - S^2 / (2 T) when S < T, else T / 2.
// Failures during a restart are taken as part of it.
struct FailureModel {
  double rate_per_device_hour = 0.0;  // 0: none
  double restart_delay = 0.0;         // seconds
  bool reroute = false;
};
// The expected iteration time of a plan of `iteration_time` seconds on `devices` devices with
// `dp` replicas of each stage, under `failures`.
double expected_iteration_time(double iteration_time, int devices, int dp,
                               const FailureModel& failures);
// Why a plan is infeasible when its expected iteration time under the failure rate is past what
// a schedule's time may be (schedule::kMaxScheduleTime), or infinite: restarts outpace it.
inline constexpr std::string_view kFailuresOutpaceIterations =
    "failures restart the iteration faster than it can end";

struct EvaluateOptions;
// Prices `imbalance` on options (its execution, the hardware's default when unset).
void set_moe_imbalance(EvaluateOptions& options, const spec::HardwareSpec& hardware,
                       const MoeImbalance& imbalance);
// The sparse embedding gradient's rows at `factor` times the uniform estimate
// (ExecutionOptions::embedding_rows_factor), on the hardware's execution defaults when unset.
void set_embedding_rows_factor(EvaluateOptions& options, const spec::HardwareSpec& hardware,
                               double factor);

struct EvaluateOptions {
  // Unset: what runs on the cluster's hardware (default_execution, default_memory_options).
  std::optional<ExecutionOptions> execution;
  std::optional<MemoryModelOptions> memory;
  // When weights, gradients and optimizer state alone exceed a device, return the plan as
  // infeasible without generating or simulating its schedule (time figures stay 0). For search.
  bool skip_simulation_when_static_memory_exceeds = false;
  // Activation budget per stage in micro-batches for memory-bounded generators (zb-h2, zb-v);
  // 0 = the schedule's default.
  double schedule_memory_limit = 0.0;
  // Keep the simulated pipeline's trace in PlanEvaluation::trace (a previewed plan's timeline);
  // off for search, where only the figures count.
  bool record_trace = false;
  // Shared by the evaluators of one search (null: none): identical schedules simulate once.
  std::shared_ptr<SimulationCache> simulation_cache;
  // Devices failing at a rate: PlanEvaluation's expected_* figures (the search ranks by them).
  FailureModel failures;
};

struct PlanEvaluation {
  bool simulated = false;           // false: skipped (static memory does not fit)
  double iteration_time = 0.0;      // seconds
  double pipeline_time = 0.0;       // seconds: the simulated schedule's makespan
  double data_parallel_time = 0.0;  // seconds: exposed DP communication after the pipeline
  double optimizer_time = 0.0;      // seconds
  double bubble_ratio = 0.0;        // the simulator's: idle share of the pipeline ranks
  double tokens_per_s = 0.0;        // global batch tokens / iteration time
  // Under EvaluateOptions::failures (FailureModel): the expected iteration time and throughput;
  // without a failure rate, the same as iteration_time and tokens_per_s.
  double expected_iteration_time = 0.0;
  double expected_tokens_per_s = 0.0;
  // Model FLOPs: forward + backward of the model with the causal mask halving attention scores;
  // hardware FLOPs add the recomputation the plan asks for. Per iteration, whole cluster.
  double model_flops = 0.0;
  double hardware_flops = 0.0;
  double tflops_per_gpu = 0.0;      // model FLOPs / s / device / 1e12
  double hfu_tflops_per_gpu = 0.0;  // hardware FLOPs / s / device / 1e12
  double mfu = 0.0;                 // model FLOPs / (time * devices * peak)
  double hfu = 0.0;
  MemoryEstimate memory;  // per stage, at the simulated activation peak
  bool feasible = false;  // every stage fits its device
  std::string infeasible_reason;
  schedule::Placement placement = schedule::Placement::Linear;
  std::vector<sim::StageSummary> stages;  // the simulator's per-stage summary
  OpCosts costs;                          // the op costs used
  // terapipe: each token slice's length as simulated (given, or TeraPipe's dynamic programming's
  // choice: choose_token_slices); empty for every other schedule and for equal given slices.
  std::vector<int> slice_tokens;
  profiler::Trace
      trace;  // one iteration of the pipeline, ns; only with EvaluateOptions::record_trace
};

// Reusable evaluator: keeps schedules whose shape does not depend on op costs (1f1b,
// interleaved, gpipe, v-half, v-min, dualpipe-v) between calls. Not thread-safe: one per thread.
// A cheap lower bound on what evaluate() returns for a plan, from the op costs alone (no
// schedule): each pipeline rank runs its ops one after another, so the pipeline takes at least the
// busiest rank's op time, and the data-parallel and optimizer time come after it as in evaluate();
// activations only add memory to the weights, gradients and optimizer state.
struct PlanBound {
  double iteration_time = 0.0;     // <= evaluate().iteration_time
  double peak_memory_bytes = 0.0;  // <= evaluate().memory.peak_bytes
  // False when even these least activations overflow the device's (or the host's) memory: the
  // plan cannot fit, whatever its schedule holds.
  bool fits = true;
  // The token slices evaluate() would choose (terapipe without given slices; else empty): the
  // plan with them evaluates the same, without choosing them again.
  std::vector<int> slice_tokens;
};

class PlanEvaluator {
 public:
  explicit PlanEvaluator(EvaluateOptions options = {}) : options_(std::move(options)) {}

  // Throws SpecError / ScheduleError (InputErrors) naming the rule an invalid plan breaks.
  PlanEvaluation evaluate(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                          const spec::ParallelPlan& plan);

  // Throws as evaluate() does for an invalid plan.
  PlanBound bound(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                  const spec::ParallelPlan& plan);

  // A lower bound on evaluate(plan).iteration_time, tighter than bound()'s for the vocabulary
  // modes whose schedules keep a fixed transformer order (schedule::transformer_ops_schedule):
  // those ops alone simulated at the plan's costs, then the data-parallel and optimizer time.
  // nullopt for the other plans. Throws as evaluate() does for an invalid plan.
  std::optional<double> transformer_bound(const spec::ModelSpec& model,
                                          const spec::ClusterSpec& cluster,
                                          const spec::ParallelPlan& plan);

  const EvaluateOptions& options() const { return options_; }
  EvaluateOptions& options() { return options_; }
  // The options' execution and memory facts, or those of the cluster's hardware when unset.
  ExecutionOptions execution_for(const spec::ClusterSpec& cluster) const;
  MemoryModelOptions memory_for(const spec::ClusterSpec& cluster) const;

 private:
  // name, stages, micro-batches, chunks, group size, vocabulary, memory limit, skip ratio (-1:
  // unset), layered reduction, and for a cost-aware generator the costs it plans with.
  using ScheduleKey =
      std::tuple<std::string, int, int, int, int, int, double, double, bool, std::vector<double>>;
  // A plan with its defaults, checked (SpecError / ScheduleError naming the rule it breaks),
  // with its placement and the execution facts it is priced with.
  struct Checked {
    spec::ModelSpec model;
    spec::ParallelPlan plan;
    schedule::Placement placement;
    ExecutionOptions execution;
  };
  Checked checked(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                  const spec::ParallelPlan& plan) const;
  // The key of a schedule of `params`, with the costs a cost-aware generator plans with.
  static ScheduleKey schedule_key(const schedule::GeneratorParams& params,
                                  std::vector<double> planning);
  const schedule::Schedule& schedule_for(const schedule::GeneratorParams& params,
                                         schedule::Schedule& scratch);
  // The schedule of `params` simulated with the costs, through the simulation cache when one is
  // set and no trace is recorded; `order`: a schedule to simulate in its place
  // (transformer_bound's, which names its params apart for the cache).
  sim::SimResult run_simulation(const schedule::GeneratorParams& params, const OpCosts& costs,
                                const schedule::Schedule* order = nullptr);

  // op_costs of the plan, through a few recent results: plans that differ in their schedule
  // alone (1f1b, zb-h1, gpipe... on one placement) have the same op costs, which depend on the
  // schedule only through its placement and whether it reduces per layer group; an offload
  // variant takes its plan's, with apply_offload (the reference lasts until the next call).
  const OpCosts& costs_for(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                           const spec::ParallelPlan& plan, schedule::Placement placement,
                           const ExecutionOptions& execution);

  EvaluateOptions options_;
  TokenSlicingCache slicings_;
  // Fixed orders, with how often each was asked for (schedule_for records an execution order
  // for one asked for often).
  struct FixedOrder {
    schedule::Schedule schedule;
    int asks = 0;
  };
  std::map<ScheduleKey, FixedOrder> schedules_;
  // transformer_bound's orders (none where the schedule has no fixed one).
  std::map<ScheduleKey, std::shared_ptr<const std::optional<schedule::Schedule>>>
      transformer_schedules_;
  // Cost-aware orders, least recently used first.
  std::vector<std::pair<ScheduleKey, schedule::Schedule>> planned_schedules_;
  struct CostsEntry {
    spec::ParallelPlan plan;  // schedule name normalised (costs_for)
    std::uint64_t hash = 0;   // of its settings, to pass over unequal plans cheaply
    schedule::Placement placement;
    OpCosts costs;
    std::uint64_t serial = 0;  // from 1, each entry's own: what offloaded_costs_ was copied from
  };
  // For the model, cluster and execution options they were computed with.
  RecentRing<CostsEntry, 128> recent_costs_;
  // Their pass costs (PassCosts), by the plan at ZeRO stage 0.
  struct PassesEntry {
    spec::ParallelPlan plan;
    std::uint64_t hash = 0;
    schedule::Placement placement;
    PassCosts passes;
  };
  RecentRing<PassesEntry, 32> recent_passes_;
  OpCosts offloaded_costs_;  // costs_for's latest offload variant
  // The serial of the entry offloaded_costs_ was copied from (CostsEntry::serial).
  std::uint64_t offloaded_from_ = 0, next_serial_ = 0;
  StageParameterMemo stage_parameters_;
  std::optional<std::tuple<spec::ModelSpec, spec::ClusterSpec, ExecutionOptions>> costs_context_;
};

PlanEvaluation evaluate_plan(const spec::ModelSpec& model, const spec::ClusterSpec& cluster,
                             const spec::ParallelPlan& plan, const EvaluateOptions& options = {});

}  // namespace pipetune::tuner
