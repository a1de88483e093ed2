#include "cli/import_description.hpp"

#include "db/import/import_limits.hpp"
#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/validate.hpp"

namespace pipetune::cli {

void add_import_description_options(CLI::App* cmd, ImportDescriptionArgs& a) {
  cmd->add_option("--config", a.config,
                  "The profiled run's model, cluster and plan: a run file or preset");
  cmd->add_option("--model", a.model, "The profiled run's model (with --hardware --tp --pp --dp)");
  cmd->add_option("--hardware", a.hardware, "The GPUs it ran on (hardware preset or TOML file)");
  add_plan_flags(cmd, a.plan,
                 {.tp = "Its tensor-parallel degree",
                  .pp = "Its pipeline stages",
                  .dp = "Its data-parallel degree",
                  .ep = "Its expert-parallel degree",
                  .chunks = "Its layer groups per stage",
                  .microbatches = "Its micro-batches per iteration",
                  .micro_batch_size = "Its sequences per micro-batch"});
  cmd->add_option("--schedule", a.schedule, "Its pipeline schedule (default 1f1b)");
}

namespace {

// The run the flags describe, its specs validated (spec::validate).
std::optional<spec::RunSpec> described_run(const ImportDescriptionArgs& a) {
  const bool flags =
      !a.model.empty() || !a.hardware.empty() || !a.schedule.empty() || a.plan.any_given();
  if (!a.config.empty()) {
    if (flags)
      throw InputError(
          "--config describes the whole run: give either it or --model --hardware --tp --pp "
          "--dp, not both");
    return spec::load_run(a.config);
  }
  if (!flags) return std::nullopt;
  const auto require = [](bool given, const char* flag) {
    if (!given)
      throw InputError(std::string("the profiled run's description needs ") + flag +
                       " too (with --model --hardware --tp --pp --dp, or --config RUN)");
  };
  require(!a.model.empty(), "--model");
  require(!a.hardware.empty(), "--hardware");
  require(a.plan.tp.has_value(), "--tp");
  require(a.plan.pp.has_value(), "--pp");
  require(a.plan.dp.has_value(), "--dp");
  spec::RunSpec run;
  run.name = "imported";
  run.source = "import flags";
  run.model = spec::load_model(a.model);
  spec::ParallelPlan& p = run.plan;
  p.schedule = a.schedule.empty() ? "1f1b" : a.schedule;
  p.chunks = 0;  // the schedule's default unless given
  a.plan.apply_to(p);
  const auto world = static_cast<unsigned long long>(p.tp) * p.pp * p.dp;
  if (world > db::ImportLimits{}.max_ranks)
    throw InputError("tp*pp*dp = " + std::to_string(world) +
                     " ranks is more than an import holds (at most " +
                     std::to_string(db::ImportLimits{}.max_ranks) + ")");
  spec::apply_defaults(p);
  run.cluster = spec::make_cluster(spec::load_hardware(a.hardware), p.tp * p.pp * p.dp);
  spec::validate(run);
  return run;
}

}  // namespace

std::optional<spec::RunSpec> import_description(const ImportDescriptionArgs& a) {
  std::optional<spec::RunSpec> run = described_run(a);
  // The schedule's own rules too (chunks it cannot use, too few micro-batches), as predict and
  // train apply them by building the plan's schedule: a plan they refuse is not stored either.
  if (run) (void)spec::plan_schedule(run->plan);
  return run;
}

}  // namespace pipetune::cli
