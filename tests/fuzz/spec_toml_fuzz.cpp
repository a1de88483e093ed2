// Fuzz target: TOML model, hardware, cluster and run files through parsing and the validation
// every command shares (engine/spec/load.hpp, run_spec.hpp, validate.hpp). The input is one TOML
// text, read as each of the four kinds (a model file is an unknown-key error as hardware, so
// every seed reaches each parser). A run file that passes goes on as `simulate --config` and
// `predict` take it (tuner/run_setup.cpp): defaults, the plan's evaluation (op costs, memory,
// schedule, simulation) and its schedule simulated again, when the schedule is small (at most
// kMaxForwardPasses forward passes; the validation's own limit is far larger).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/run_spec.hpp"
#include "engine/spec/validate.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/sim/simulator.hpp"

namespace {

using namespace pipetune;

constexpr std::size_t kMaxInput = 64 * 1024;
constexpr std::int64_t kMaxForwardPasses = 4096;  // pp * chunks * microbatches
constexpr std::int64_t kMaxLayers = 512;          // layers the cost model walks

void simulate_run(spec::RunSpec run) {
  spec::apply_defaults(run.plan);
  const spec::ParallelPlan& plan = run.plan;
  const std::int64_t passes =
      std::int64_t{plan.pp} * std::max(plan.chunks, 1) * std::max(plan.microbatches, 1);
  if (passes > kMaxForwardPasses || run.model.layers > kMaxLayers) return;
  tuner::PlanEvaluation e = tuner::evaluate_plan(run.model, run.cluster, plan);
  const schedule::Schedule s = schedule::generate(spec::generator_params(plan, e.costs.table));
  spec::check_schedule_matches(s, plan);
  sim::SimOptions options;
  options.activation_bytes_per_microbatch = e.costs.activation_bytes_per_microbatch;
  sim::simulate(s, e.costs.table, options);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size > kMaxInput) return 0;  // spec files are small
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  fuzz::refusals_are_clean([&] { spec::validate(spec::parse_model(text, "model.toml")); });
  fuzz::refusals_are_clean([&] { spec::validate(spec::parse_hardware(text, "hardware.toml")); });
  fuzz::refusals_are_clean([&] { spec::validate(spec::parse_cluster(text, "cluster.toml")); });
  fuzz::refusals_are_clean([&] {
    simulate_run(spec::parse_run(text, "run.toml"));  // parse_run validates the whole run
  });
  return 0;
}
