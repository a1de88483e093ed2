// How the [efficiency] tables of presets/hardware/a100-80gb.toml and h100-sxm.toml were obtained:
// tuner/calibration fitted over the published runs of each hardware type (one set of
// efficiencies per type, each source group weighted equally). Disabled: it is the recipe, not a
// check; run it with
//   tuner_fast_tests --gtest_also_run_disabled_tests --gtest_filter='*FitPresets*'
// Rows whose plan knobs are unstated use the best candidate under the current fit; the fit is
// repeated until the chosen candidates stop changing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "engine/errors.hpp"
#include "tests/tuner/validation/published_runs.hpp"
#include "tuner/calibration/calibration.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::validation {
namespace {

spec::ParallelPlan best_plan(const PublishedRun& run, const spec::HardwareEfficiency& eff) {
  if (run.candidates.empty()) return run.plan;
  tuner::EvaluateOptions options;
  options.execution = run.execution;
  tuner::PlanEvaluator evaluator(options);
  spec::ClusterSpec cluster = run.cluster;
  cluster.hardware.efficiency = eff;
  spec::ParallelPlan best = run.plan;
  double best_time = 0.0;
  bool best_fits = false;
  for (const spec::ParallelPlan& p : run.candidates) {
    tuner::PlanEvaluation e;
    try {
      e = evaluator.evaluate(run.model, cluster, p);
    } catch (const InputError&) {
      continue;
    }
    if ((e.feasible && !best_fits) ||
        (e.feasible == best_fits && (best_time == 0.0 || e.iteration_time < best_time))) {
      best = p;
      best_time = e.iteration_time;
      best_fits = e.feasible;
    }
  }
  return best;
}

spec::HardwareEfficiency fit(const std::string& hardware, const std::vector<PublishedRun>& runs,
                             spec::HardwareEfficiency eff,
                             const std::vector<tuner::EfficiencyParameter>& parameters) {
  std::map<std::string, int> per_group;
  for (const PublishedRun& r : runs) ++per_group[r.group];
  tuner::CalibrationOptions options;
  options.fit = parameters;
  for (int round = 0; round < 4; ++round) {
    std::vector<tuner::Measurement> ms;
    for (const PublishedRun& r : runs) {
      tuner::Measurement m;
      m.name = r.name;
      m.model = r.model;
      m.cluster = r.cluster;
      m.plan = best_plan(r, eff);
      m.execution = r.execution;
      m.iteration_time = metric_value(r, 1.0) / r.measured;  // the metric is ~ 1 / time
      m.weight = 1.0 / per_group[r.group];
      ms.push_back(std::move(m));
    }
    const tuner::CalibrationResult res = tuner::calibrate(ms, eff, options);
    eff = res.efficiency;
    std::printf("%s round %d: R^2 %.3f -> %.3f, MAPE %.1f%% -> %.1f%% (%d points, %d iterations)\n",
                hardware.c_str(), round, res.before.r_squared, res.after.r_squared,
                100 * res.before.mape, 100 * res.after.mape, res.after.points, res.iterations);
  }
  std::printf("[efficiency] for %s\n", hardware.c_str());
  for (tuner::EfficiencyParameter p : tuner::kAllEfficiencyParameters)
    std::printf("%s = %.4g\n", tuner::efficiency_parameter_name(p), efficiency_field(eff, p));
  return eff;
}

TEST(FitPresets, DISABLED_EfficiencyFromPublishedRuns) {
  const auto path = std::filesystem::path(PIPETUNE_SOURCE_DIR).parent_path() / "shared" /
                    "reference" / "published_runs_dev.csv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "no " << path;
  std::map<std::string, std::vector<PublishedRun>> by_hardware;
  for (PublishedRun& r : load_published_runs(path.string()))
    if (r.skip_reason.empty()) by_hardware[r.cluster.hardware.name].push_back(std::move(r));
  for (VocabularyCell& c : vocabulary_paper_table())
    by_hardware[c.run.cluster.hardware.name].push_back(std::move(c.run));
  // A100: four source groups (SC21, BLOOM, torchtitan, Vocabulary Parallelism) constrain all
  // six parameters.
  const spec::HardwareSpec a100 = spec::load_hardware("a100-80gb");
  spec::HardwareEfficiency start;  // the generic defaults (Calculon's tables)
  const spec::HardwareEfficiency a =
      fit("a100-80gb", by_hardware["a100-80gb"], start,
          {std::begin(tuner::kAllEfficiencyParameters), std::end(tuner::kAllEfficiencyParameters)});
  // Out of sample: each A100 source group predicted by a fit over the other groups.
  const std::vector<PublishedRun>& all = by_hardware["a100-80gb"];
  std::map<std::string, int> groups;
  for (const PublishedRun& r : all) ++groups[r.group];
  for (const auto& [held_out, count] : groups) {
    std::vector<PublishedRun> train;
    for (const PublishedRun& r : all)
      if (r.group != held_out) train.push_back(r);
    const spec::HardwareEfficiency e = fit(
        "a100-80gb without " + held_out, train, start,
        {std::begin(tuner::kAllEfficiencyParameters), std::end(tuner::kAllEfficiencyParameters)});
    double sum = 0.0;
    for (const PublishedRun& r : all) {
      if (r.group != held_out) continue;
      tuner::EvaluateOptions options;
      options.execution = r.execution;
      spec::ClusterSpec cluster = r.cluster;
      cluster.hardware.efficiency = e;
      const double t = tuner::evaluate_plan(r.model, cluster, r.plan, options).iteration_time;
      sum += std::fabs(metric_value(r, t) - r.measured) / r.measured;
    }
    std::printf("held out %-44s %3d rows: MAPE %.1f%%\n", held_out.c_str(), count,
                100.0 * sum / count);
  }
  // H100: 11 rows from two sources cannot pin six parameters. The memory and bus fractions and
  // the per-GEMM ramp-up time are carried over from the A100 fit (same kinds of kernels, NCCL
  // over NVSwitch and InfiniBand); only the GEMM and attention efficiencies are fitted.
  const spec::HardwareSpec h100 = spec::load_hardware("h100-sxm");
  spec::HardwareEfficiency h = a;
  const double ramp_seconds = a.gemm_half_flops / (a.gemm * a100.peak_flops);
  h.gemm_half_flops = ramp_seconds * a.gemm * h100.peak_flops;
  std::printf("per-GEMM ramp-up %.1f us\n", ramp_seconds * 1e6);
  fit("h100-sxm", by_hardware["h100-sxm"], h,
      {tuner::EfficiencyParameter::Gemm, tuner::EfficiencyParameter::Attention});
}

}  // namespace
}  // namespace pipetune::validation
