// Predicting a published run with a hardware preset, and fitting the preset's [efficiency] table
// to published runs (tuner/calibration), shared by the in-sample check (published_runs_test),
// the out-of-sample check (leave_one_group_out_slow_test) and the recipe that produced the
// shipped tables (fit_presets_test). Header-only: the test folders compile *_test.cpp files only.
#pragma once

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "tests/tuner/validation/published_runs.hpp"
#include "tuner/calibration/calibration.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::validation {

struct Prediction {
  double value = 0.0;  // in the run's metric
  double error = 0.0;  // |predicted - measured| / measured
  spec::ParallelPlan plan;
  bool feasible = false;
};

// The run's plan (or, when the source leaves knobs unstated, the best feasible candidate) on the
// run's cluster with its hardware efficiency replaced by `efficiency` when one is given.
inline Prediction predict(const PublishedRun& run,
                          const spec::HardwareEfficiency* efficiency = nullptr) {
  tuner::EvaluateOptions options;
  options.execution = run.execution;
  tuner::PlanEvaluator evaluator(options);
  spec::ClusterSpec cluster = run.cluster;
  if (efficiency != nullptr) cluster.hardware.efficiency = *efficiency;
  Prediction best;
  best.value = -1.0;
  const std::vector<spec::ParallelPlan> plans =
      run.candidates.empty() ? std::vector<spec::ParallelPlan>{run.plan} : run.candidates;
  for (const spec::ParallelPlan& plan : plans) {
    tuner::PlanEvaluation e;
    try {
      e = evaluator.evaluate(run.model, cluster, plan);
    } catch (const InputError&) {
      if (plans.size() == 1) throw;
      continue;  // a candidate the schedule generator rejects
    }
    const double value = metric_value(run, e.iteration_time);
    // Candidates: the best feasible one; a stated plan counts whether or not it fits.
    const bool better =
        (e.feasible && !best.feasible) || (e.feasible == best.feasible && value > best.value);
    if (plans.size() == 1 || better) {
      best.value = value;
      best.plan = plan;
      best.feasible = e.feasible;
    }
  }
  best.error = std::fabs(best.value - run.measured) / run.measured;
  return best;
}

// Mean absolute percentage error of predict() over runs (as a fraction).
inline double mape(const std::vector<PublishedRun>& runs,
                   const spec::HardwareEfficiency* efficiency = nullptr) {
  double sum = 0.0;
  for (const PublishedRun& r : runs) sum += predict(r, efficiency).error;
  return runs.empty() ? 0.0 : sum / static_cast<double>(runs.size());
}

// Fits `parameters` of `start` to runs of one hardware type, each source group weighted equally.
// Rows with unstated knobs use their best candidate under the current fit; the fit is repeated
// until those choices settle (four rounds). `log` prints each round.
inline spec::HardwareEfficiency fit_efficiency(
    const std::string& label, const std::vector<PublishedRun>& runs, spec::HardwareEfficiency start,
    const std::vector<tuner::EfficiencyParameter>& parameters, bool log = true) {
  std::map<std::string, int> per_group;
  for (const PublishedRun& r : runs) ++per_group[r.group];
  tuner::CalibrationOptions options;
  options.fit = parameters;
  spec::HardwareEfficiency eff = start;
  for (int round = 0; round < 4; ++round) {
    std::vector<tuner::Measurement> ms;
    for (const PublishedRun& r : runs) {
      tuner::Measurement m;
      m.name = r.name;
      m.model = r.model;
      m.cluster = r.cluster;
      m.plan = predict(r, &eff).plan;
      m.execution = r.execution;
      m.iteration_time = metric_value(r, 1.0) / r.measured;  // the metric is ~ 1 / time
      m.weight = 1.0 / per_group[r.group];
      ms.push_back(std::move(m));
    }
    const tuner::CalibrationResult res = tuner::calibrate(ms, eff, options);
    eff = res.efficiency;
    if (log)
      std::printf(
          "%s round %d: R^2 %.3f -> %.3f, MAPE %.1f%% -> %.1f%% (%d points, %d iterations)\n",
          label.c_str(), round, res.before.r_squared, res.after.r_squared, 100 * res.before.mape,
          100 * res.after.mape, res.after.points, res.iterations);
  }
  return eff;
}

inline std::vector<tuner::EfficiencyParameter> all_efficiency_parameters() {
  return {std::begin(tuner::kAllEfficiencyParameters), std::end(tuner::kAllEfficiencyParameters)};
}

// The H100 recipe: 11 rows from two sources cannot pin six parameters, so the memory and bus
// fractions and the per-GEMM ramp-up time carry over from an A100 fit (same kinds of kernels,
// NCCL over NVSwitch and InfiniBand); only the GEMM and attention efficiencies are fitted.
inline spec::HardwareEfficiency h100_start_from_a100(const spec::HardwareEfficiency& a100_fit) {
  const spec::HardwareSpec a100 = spec::load_hardware("a100-80gb");
  const spec::HardwareSpec h100 = spec::load_hardware("h100-sxm");
  spec::HardwareEfficiency h = a100_fit;
  const double ramp_seconds = a100_fit.gemm_half_flops / (a100_fit.gemm * a100.peak_flops);
  h.gemm_half_flops = ramp_seconds * a100_fit.gemm * h100.peak_flops;
  return h;
}

inline std::vector<tuner::EfficiencyParameter> h100_fitted_parameters() {
  return {tuner::EfficiencyParameter::Gemm, tuner::EfficiencyParameter::Attention};
}

// The published runs with a full configuration and the vocabulary paper's table, by hardware.
inline std::map<std::string, std::vector<PublishedRun>> runs_by_hardware(const std::string& csv) {
  std::map<std::string, std::vector<PublishedRun>> by_hardware;
  for (PublishedRun& r : load_published_runs(csv))
    if (r.skip_reason.empty()) by_hardware[r.cluster.hardware.name].push_back(std::move(r));
  for (VocabularyCell& c : vocabulary_paper_table())
    by_hardware[c.run.cluster.hardware.name].push_back(std::move(c.run));
  return by_hardware;
}

}  // namespace pipetune::validation
