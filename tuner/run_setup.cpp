#include "tuner/run_setup.hpp"

#include <cstdio>

#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/run_spec.hpp"
#include "tuner/cost/execution.hpp"

namespace pipetune::tuner {

SimulationSetup setup_from_run_file(const std::string& name_or_path, bool reroute_failures,
                                    const std::optional<MoeImbalance>& moe_imbalance,
                                    std::optional<double> embedding_rows_factor) {
  spec::RunSpec run = spec::load_run(name_or_path);
  spec::apply_defaults(run.plan);
  const spec::ParallelPlan& plan = run.plan;
  // The op costs and schedule are the ones `predict` and `tune` evaluate for this plan.
  // With backend = "cuda", as pipetune's CUDA engine executes it (what `train` plans with too).
  EvaluateOptions options;
  options.execution = engine_execution(run.backend, run.precision, spec::engine_attention(run));
  const bool cuda_engine = options.execution.has_value();
  if (reroute_failures) {
    if (!options.execution) options.execution = default_execution(run.cluster.hardware);
    options.execution->reroute_failures = true;
  }
  // The flags' imbalance, else the run file's.
  if (moe_imbalance)
    set_moe_imbalance(options, run.cluster.hardware, *moe_imbalance);
  else if (run.moe_imbalance != 1.0)
    set_moe_imbalance(options, run.cluster.hardware, MoeImbalance::everywhere(run.moe_imbalance));
  if (embedding_rows_factor)
    set_embedding_rows_factor(options, run.cluster.hardware, *embedding_rows_factor);
  PlanEvaluation e = evaluate_plan(run.model, run.cluster, plan, options);
  SimulationSetup setup;
  // terapipe: the slices the evaluation chose (TeraPipe's dynamic programming), as train plans.
  spec::ParallelPlan simulated = plan;
  if (simulated.slice_tokens.empty()) simulated.slice_tokens = e.slice_tokens;
  setup.params = spec::generator_params(simulated, e.costs.table);
  setup.costs = e.costs.table;
  setup.options.activation_bytes_per_microbatch = e.costs.activation_bytes_per_microbatch;
  setup.time_unit = "s";
  std::string engine;
  if (cuda_engine)
    engine =
        ", as the CUDA engine runs it (" +
        std::string(run.precision == spec::EnginePrecision::bf16 ? "bf16 GEMMs" : "fp32 GEMMs") +
        ", " + std::string(spec::engine_attention_name(spec::engine_attention(run))) +
        " attention)";
  char line[512];
  std::snprintf(line, sizeof line,
                "%s on %d x %s: tp=%d pp=%d dp=%d ep=%d, micro-batch %d x %lld tokens, "
                "op costs from the %s efficiency table (as predict)%s",
                run.model.name.c_str(), run.cluster.devices, run.cluster.hardware.name.c_str(),
                plan.tp, plan.pp, plan.dp, plan.ep, plan.micro_batch_size,
                static_cast<long long>(run.model.seq_len), run.cluster.hardware.name.c_str(),
                engine.c_str());
  setup.description = line;
  // Per-stage layouts: each stage's tp beside the plan's (stage 0's).
  if (spec::stage_tp_varies(plan))
    setup.description += " (stage_tp=" + spec::stage_tp_text(plan.stage_tp) + ")";
  setup.iteration = std::move(e);
  setup.run = std::move(run);
  return setup;
}

}  // namespace pipetune::tuner
