// Calibration of a hardware type's efficiency curves (spec::HardwareEfficiency) from measured
// runs: Levenberg-Marquardt on the parameters (the logit of each fraction of peak, which keeps
// it in (0, 1), and the log of gemm_half_flops), minimising the squared log-ratio of
// predicted to measured times. Inputs are plain (no workspace): what ran (model, cluster, plan,
// framework facts) and what it took, as an iteration time and/or mean op durations per pipeline
// rank (op_durations_from_trace() reads them from a measured profiler::Trace, e.g. the engine's
// train() with record_trace).
//
// Every measurement must be of one hardware type: the fit gives that type one set of
// efficiencies. Fit quality is reported before and after: R^2 of the times, MAPE and RMS of the
// log-ratio.
//
// The data determine only as many parameters as they have independent points: the rank of the
// Jacobian of the predicted log-times at the start, so repeated rows (the same op on identical
// stages, the same run twice) count once and a parameter no time depends on (the inter-node bus
// of single-node runs) is determined by none. Parameters are taken in the order asked for, each
// kept when it moves the predictions in a direction the ones before it do not; the others are
// undetermined, and are kept at their start or refused (CalibrationOptions::undetermined).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/hardware_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"
#include "tuner/cost/execution.hpp"

namespace pipetune::tuner {

struct Measurement {
  std::string name;  // for reports
  spec::ModelSpec model;
  spec::ClusterSpec cluster;  // its hardware's efficiency is replaced by the fitted one
  spec::ParallelPlan plan;
  std::optional<ExecutionOptions> execution;  // unset: default_execution of the hardware
  double iteration_time = 0.0;                // seconds; <= 0: not measured
  // Mean seconds of one op of each kind on each pipeline rank (one chunk, one micro-batch), as a
  // CostTable holds them (BW = fused backward); entries <= 0 are not measured.
  std::vector<schedule::StageCosts> op_durations;
  double weight = 1.0;  // of each of its data points
};

enum class EfficiencyParameter {
  Gemm,
  GemmHalfFlops,
  Attention,
  Memory,
  IntraNodeBus,
  InterNodeBus
};
inline constexpr EfficiencyParameter kAllEfficiencyParameters[] = {
    EfficiencyParameter::Gemm,         EfficiencyParameter::GemmHalfFlops,
    EfficiencyParameter::Attention,    EfficiencyParameter::Memory,
    EfficiencyParameter::IntraNodeBus, EfficiencyParameter::InterNodeBus};
const char* efficiency_parameter_name(EfficiencyParameter p);  // the TOML key
double& efficiency_field(spec::HardwareEfficiency& e, EfficiencyParameter p);

enum class UndeterminedParameters {
  KeepAtStart,  // fit the determined ones; the others keep their start (CalibrationResult::fixed)
  Refuse,       // InputError naming the data points and the parameters
};

struct CalibrationOptions {
  // Each parameter once (InputError naming a repeated one).
  std::vector<EfficiencyParameter> fit{std::begin(kAllEfficiencyParameters),
                                       std::end(kAllEfficiencyParameters)};
  UndeterminedParameters undetermined = UndeterminedParameters::KeepAtStart;
  int max_iterations = 200;
  double tolerance = 1e-12;  // stop when the loss improves by less than this (relative)
};

struct FitQuality {
  int points = 0;
  double r_squared = 0.0;  // of the times (1 - residual / total sum of squares)
  double mape = 0.0;       // mean |predicted - measured| / measured
  double rms_log = 0.0;    // sqrt(mean log(predicted / measured)^2)
};

struct DataPoint {
  std::string label;  // "gpt-tiny pp=2: iteration" / "... rank 1 F"
  double measured = 0.0;
  double predicted = 0.0;         // with the fitted efficiencies
  double predicted_before = 0.0;  // with the start
  int stage = -1;                 // pipeline rank of an op time; -1 for an iteration time
  std::string kind;               // op kind ("F", "BW"...); empty for an iteration time
};

struct CalibrationResult {
  spec::HardwareEfficiency efficiency;      // fitted (parameters not fitted keep their start)
  std::vector<EfficiencyParameter> fitted;  // of options.fit, those the data determine
  std::vector<EfficiencyParameter> fixed;   // of options.fit, kept at the start: undetermined
  int independent_points = 0;               // rank of the data over options.fit
  FitQuality before, after;
  int iterations = 0;
  bool converged = false;
  std::vector<DataPoint> points;
};

// Throws InputError for no data points, measurements of different hardware, a measurement
// given twice (same name, plan and times: names alone repeat), a parameter asked for twice, a
// non-positive start, a plan that does not validate, or (UndeterminedParameters::Refuse) parameters
// the data do not determine.
CalibrationResult calibrate(const std::vector<Measurement>& measurements,
                            const spec::HardwareEfficiency& start,
                            const CalibrationOptions& options = {});

// Fit quality of paired predictions and measurements (exposed for tests and reports).
FitQuality fit_quality(const std::vector<double>& predicted, const std::vector<double>& measured);

// Mean duration of each op kind per pipeline rank over the trace's compute spans (rank order tp
// fastest, then dp, then pp: pipeline rank = rank / (tp * dp)). Kinds without spans stay 0.
std::vector<schedule::StageCosts> op_durations_from_trace(const profiler::Trace& trace,
                                                          const spec::ParallelPlan& plan);

// The same from GPU activity records attributed to pipeline phases (an imported run's kernels,
// KernelRecord::phase): per rank, the mean GPU time of one op of each kind (its non-communication
// kernels, copies and memsets summed; profiler::analysis::mean_phase_op_ns), the ranks of one
// pipeline rank averaged. Throws InputError naming `who` when no record has a phase.
std::vector<schedule::StageCosts> op_durations_from_kernels(
    const std::vector<profiler::KernelRecord>& kernels, const spec::ParallelPlan& plan,
    const std::string& who);

}  // namespace pipetune::tuner
