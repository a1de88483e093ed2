#include "tuner/calibration/calibration.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <memory>
#include <optional>
#include <set>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/validate.hpp"
#include "profiler/analysis/gpu_op_time.hpp"
#include "tuner/cost/op_costs.hpp"
#include "tuner/predict/evaluate.hpp"

namespace pipetune::tuner {

const char* efficiency_parameter_name(EfficiencyParameter p) {
  switch (p) {
    case EfficiencyParameter::Gemm:
      return "gemm";
    case EfficiencyParameter::GemmHalfFlops:
      return "gemm_half_flops";
    case EfficiencyParameter::Attention:
      return "attention";
    case EfficiencyParameter::Memory:
      return "memory";
    case EfficiencyParameter::IntraNodeBus:
      return "intra_node_bus";
    case EfficiencyParameter::InterNodeBus:
      return "inter_node_bus";
  }
  return "?";
}

double& efficiency_field(spec::HardwareEfficiency& e, EfficiencyParameter p) {
  switch (p) {
    case EfficiencyParameter::Gemm:
      return e.gemm;
    case EfficiencyParameter::GemmHalfFlops:
      return e.gemm_half_flops;
    case EfficiencyParameter::Attention:
      return e.attention;
    case EfficiencyParameter::Memory:
      return e.memory;
    case EfficiencyParameter::IntraNodeBus:
      return e.intra_node_bus;
    case EfficiencyParameter::InterNodeBus:
      return e.inter_node_bus;
  }
  return e.gemm;
}

FitQuality fit_quality(const std::vector<double>& predicted, const std::vector<double>& measured) {
  FitQuality q;
  q.points = static_cast<int>(measured.size());
  if (measured.empty()) return q;
  double mean = 0.0;
  for (double m : measured) mean += m;
  mean /= static_cast<double>(measured.size());
  double residual = 0.0, total = 0.0, ape = 0.0, log2 = 0.0;
  for (std::size_t i = 0; i < measured.size(); ++i) {
    const double d = predicted[i] - measured[i];
    residual += d * d;
    total += (measured[i] - mean) * (measured[i] - mean);
    ape += std::fabs(d) / measured[i];
    const double l = std::log(predicted[i] / measured[i]);
    log2 += l * l;
  }
  const double n = static_cast<double>(measured.size());
  q.r_squared = total > 0.0 ? 1.0 - residual / total : (residual == 0.0 ? 1.0 : 0.0);
  q.mape = ape / n;
  q.rms_log = std::sqrt(log2 / n);
  return q;
}

namespace {

// One measurement made ready: defaults applied, validated, an evaluator for its schedule.
struct Prepared {
  Measurement m;
  schedule::Placement placement = schedule::Placement::Linear;
  std::unique_ptr<PlanEvaluator> evaluator;
};

// Predictions of every data point for a set of efficiencies, in a fixed order.
class Model {
 public:
  explicit Model(const std::vector<Measurement>& measurements) {
    for (const Measurement& in : measurements) {
      Prepared p;
      p.m = in;
      spec::apply_defaults(p.m.model);
      spec::apply_defaults(p.m.plan);
      spec::validate(p.m.model, p.m.cluster, p.m.plan);
      if (p.m.cluster.hardware.name != measurements.front().cluster.hardware.name)
        throw InputError("calibration: measurement '" + in.name + "' is on " +
                         p.m.cluster.hardware.name + ", the first on " +
                         measurements.front().cluster.hardware.name +
                         " (one hardware type per fit)");
      if (!(p.m.weight > 0.0))
        throw InputError("calibration: measurement '" + in.name + "' has weight <= 0");
      p.placement = schedule::schedule_placement(p.m.plan.schedule);
      if (!p.m.execution) p.m.execution = default_execution(p.m.cluster.hardware);
      EvaluateOptions eo;
      eo.execution = p.m.execution;
      p.evaluator = std::make_unique<PlanEvaluator>(eo);
      if (p.m.iteration_time > 0.0) {
        labels_.push_back(in.name + ": iteration");
        sites_.push_back({-1, ""});
        measured_.push_back(p.m.iteration_time);
        weights_.push_back(p.m.weight);
      }
      if (!p.m.op_durations.empty() && static_cast<int>(p.m.op_durations.size()) != p.m.plan.pp)
        throw InputError("calibration: measurement '" + in.name + "' has op durations for " +
                         std::to_string(p.m.op_durations.size()) +
                         " pipeline ranks, pp=" + std::to_string(p.m.plan.pp));
      for (std::size_t r = 0; r < p.m.op_durations.size(); ++r)
        for (schedule::OpKind k : schedule::kAllOpKinds)
          if (p.m.op_durations[r][k] > 0.0) {
            labels_.push_back(in.name + ": rank " + std::to_string(r) + " " +
                              std::string(schedule::op_kind_name(k)));
            sites_.push_back({static_cast<int>(r), std::string(schedule::op_kind_name(k))});
            measured_.push_back(p.m.op_durations[r][k]);
            weights_.push_back(p.m.weight);
          }
      prepared_.push_back(std::move(p));
    }
    if (measured_.empty()) throw InputError("calibration: no measured times");
  }

  std::vector<double> predict(const spec::HardwareEfficiency& eff) {
    std::vector<double> out;
    out.reserve(measured_.size());
    for (Prepared& p : prepared_) {
      p.m.cluster.hardware.efficiency = eff;
      if (p.m.iteration_time > 0.0)
        out.push_back(p.evaluator->evaluate(p.m.model, p.m.cluster, p.m.plan).iteration_time);
      if (p.m.op_durations.empty()) continue;
      const OpCosts costs = op_costs(p.m.model, p.m.cluster, p.m.plan, p.placement, *p.m.execution);
      for (std::size_t r = 0; r < p.m.op_durations.size(); ++r)
        for (schedule::OpKind k : schedule::kAllOpKinds)
          if (p.m.op_durations[r][k] > 0.0) out.push_back(costs.table.cost(static_cast<int>(r), k));
    }
    return out;
  }

  // Weighted log-ratios; throws when a prediction is not positive (nothing to fit against).
  std::vector<double> residuals(const std::vector<double>& predicted) const {
    std::vector<double> r(predicted.size());
    for (std::size_t i = 0; i < predicted.size(); ++i) {
      if (!(predicted[i] > 0.0) || !std::isfinite(predicted[i]))
        throw InputError("calibration: the cost model predicts " + std::to_string(predicted[i]) +
                         " s for '" + labels_[i] + "'; it cannot be fitted");
      r[i] = std::sqrt(weights_[i]) * std::log(predicted[i] / measured_[i]);
    }
    return r;
  }

  const std::vector<double>& measured() const { return measured_; }
  const std::vector<std::string>& labels() const { return labels_; }
  const std::vector<std::pair<int, std::string>>& sites() const { return sites_; }

 private:
  std::vector<std::pair<int, std::string>> sites_;  // (pipeline rank, op kind) per point
  std::vector<Prepared> prepared_;
  std::vector<double> measured_, weights_;
  std::vector<std::string> labels_;
};

double sum_squares(const std::vector<double>& r) {
  double s = 0.0;
  for (double x : r) s += x * x;
  return s;
}

// Solves A x = b (k x k, row-major) by Gaussian elimination with partial pivoting; false when
// singular.
bool solve(std::vector<double> a, std::vector<double> b, std::vector<double>& x) {
  const std::size_t k = b.size();
  for (std::size_t c = 0; c < k; ++c) {
    std::size_t pivot = c;
    for (std::size_t r = c + 1; r < k; ++r)
      if (std::fabs(a[r * k + c]) > std::fabs(a[pivot * k + c])) pivot = r;
    if (std::fabs(a[pivot * k + c]) < 1e-300) return false;
    if (pivot != c) {
      for (std::size_t j = 0; j < k; ++j) std::swap(a[c * k + j], a[pivot * k + j]);
      std::swap(b[c], b[pivot]);
    }
    for (std::size_t r = c + 1; r < k; ++r) {
      const double f = a[r * k + c] / a[c * k + c];
      for (std::size_t j = c; j < k; ++j) a[r * k + j] -= f * a[c * k + j];
      b[r] -= f * b[c];
    }
  }
  x.assign(k, 0.0);
  for (std::size_t c = k; c-- > 0;) {
    double s = b[c];
    for (std::size_t j = c + 1; j < k; ++j) s -= a[c * k + j] * x[j];
    x[c] = s / a[c * k + c];
  }
  return true;
}

// Which columns of the n x k matrix `jac` (row-major) add a direction the columns before them do
// not span (modified Gram-Schmidt): a column whose part outside their span is under
// kIndependent of its length, or whose length is under kNegligible of the longest column's, adds
// none. kIndependent is 100 times the forward differences' error (about the step, 1e-6), so a
// dependence that is exact in theory (fewer points than parameters) is found, while a real but
// poorly conditioned direction is kept: over the 64 published A100 rows the memory fraction's
// lies at about 1e-3 of its length, and 1e-3 here fixed it in some rounds of the shipped fit.
std::vector<bool> independent_columns(const std::vector<double>& jac, std::size_t n,
                                      std::size_t k) {
  constexpr double kIndependent = 1e-4, kNegligible = 1e-6;
  const auto column = [&](std::size_t j) {
    std::vector<double> c(n);
    for (std::size_t i = 0; i < n; ++i) c[i] = jac[i * k + j];
    return c;
  };
  const auto norm = [](const std::vector<double>& v) { return std::sqrt(sum_squares(v)); };
  double longest = 0.0;
  for (std::size_t j = 0; j < k; ++j) longest = std::max(longest, norm(column(j)));
  std::vector<std::vector<double>> basis;  // orthonormal
  std::vector<bool> out(k, false);
  for (std::size_t j = 0; j < k; ++j) {
    std::vector<double> v = column(j);
    const double length = norm(v);
    if (!(length > kNegligible * longest) || !std::isfinite(length)) continue;
    for (int pass = 0; pass < 2; ++pass)  // twice: the first pass's rounding removed as well
      for (const std::vector<double>& b : basis) {
        double dot = 0.0;
        for (std::size_t i = 0; i < n; ++i) dot += v[i] * b[i];
        for (std::size_t i = 0; i < n; ++i) v[i] -= dot * b[i];
      }
    const double rest = norm(v);
    if (!(rest > kIndependent * length)) continue;
    for (double& e : v) e /= rest;
    basis.push_back(std::move(v));
    out[j] = true;
  }
  return out;
}

// One measurement given twice: its name, plan and measured times all equal. A name alone is no
// identity: published rows carry their model's name, one row per plan.
bool same_measurement(const Measurement& a, const Measurement& b) {
  if (a.name != b.name || a.plan != b.plan || a.iteration_time != b.iteration_time ||
      a.op_durations.size() != b.op_durations.size())
    return false;
  for (std::size_t r = 0; r < a.op_durations.size(); ++r)
    if (a.op_durations[r].op != b.op_durations[r].op) return false;
  return true;
}

std::string parameter_list(const std::vector<EfficiencyParameter>& ps) {
  std::string out;
  for (EfficiencyParameter p : ps)
    out += (out.empty() ? "" : ", ") + std::string(efficiency_parameter_name(p));
  return out;
}

// A measurement or a parameter given twice would count twice in the fit.
void check_nothing_twice(const std::vector<Measurement>& measurements,
                         const std::vector<EfficiencyParameter>& asked) {
  for (std::size_t i = 0; i < measurements.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (same_measurement(measurements[i], measurements[j]))
        throw InputError("calibration: measurement '" + measurements[i].name +
                         "' is given twice (its data points would count twice)");
  for (std::size_t i = 0; i < asked.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (asked[i] == asked[j])
        throw InputError(std::string("calibration: parameter ") +
                         efficiency_parameter_name(asked[i]) + " is asked for twice");
}

// Unconstrained coordinates: the log of gemm_half_flops (a FLOP count > 0) and the logit of
// the others (fractions of a peak, in (0, 1)), so no step leaves the physical range.
bool is_fraction(EfficiencyParameter p) {
  return p != EfficiencyParameter::GemmHalfFlops;
}

// The coordinates of the start values of the parameters asked for.
std::vector<double> start_coordinates(const spec::HardwareEfficiency& start,
                                      const std::vector<EfficiencyParameter>& asked) {
  std::vector<double> x_asked(asked.size());
  for (std::size_t j = 0; j < asked.size(); ++j) {
    spec::HardwareEfficiency e = start;
    double v = efficiency_field(e, asked[j]);
    if (!(v > 0.0) || (is_fraction(asked[j]) && v > 1.0))
      throw InputError(std::string("calibration: start value of ") +
                       efficiency_parameter_name(asked[j]) +
                       (is_fraction(asked[j]) ? " must be in (0, 1]" : " must be positive"));
    if (is_fraction(asked[j])) v = std::min(v, 1.0 - 1e-6);
    x_asked[j] = is_fraction(asked[j]) ? std::log(v / (1.0 - v)) : std::log(v);
  }
  return x_asked;
}

// The efficiencies at coordinates z of the parameters `fit`; the others keep their start.
spec::HardwareEfficiency efficiencies_at(const spec::HardwareEfficiency& start,
                                         const std::vector<EfficiencyParameter>& fit,
                                         const std::vector<double>& z) {
  spec::HardwareEfficiency e = start;
  for (std::size_t j = 0; j < fit.size(); ++j)
    efficiency_field(e, fit[j]) =
        is_fraction(fit[j]) ? 1.0 / (1.0 + std::exp(-z[j])) : std::exp(z[j]);
  return e;
}

// Jacobian of the residuals r (at z) by forward differences, row-major n x k.
std::vector<double> jacobian(Model& model, const spec::HardwareEfficiency& start,
                             const std::vector<EfficiencyParameter>& fit,
                             const std::vector<double>& z, const std::vector<double>& r) {
  constexpr double kStep = 1e-6;  // finite-difference step in log space
  const std::size_t n = r.size(), k = fit.size();
  std::vector<double> jac(n * k);
  for (std::size_t j = 0; j < k; ++j) {
    std::vector<double> zs = z;
    zs[j] += kStep;
    const std::vector<double> rj = model.residuals(model.predict(efficiencies_at(start, fit, zs)));
    for (std::size_t i = 0; i < n; ++i) jac[i * k + j] = (rj[i] - r[i]) / kStep;
  }
  return jac;
}

// Where the Levenberg-Marquardt fit stands: coordinates, residuals, their sum of squares and
// the damping.
struct FitState {
  std::vector<double> x, r;
  double loss = 0.0;
  double lambda = 1e-3;
};

// One iteration's damped step: raises the damping until a step lowers the loss (taken, with
// the relative improvement returned) or the damping runs out (nullopt).
std::optional<double> damped_step(Model& model, const spec::HardwareEfficiency& start,
                                  const std::vector<EfficiencyParameter>& fit,
                                  const std::vector<double>& jtj, const std::vector<double>& jtr,
                                  FitState& s) {
  const std::size_t k = fit.size();
  while (s.lambda < 1e12) {
    std::vector<double> a = jtj, minus_g(k), step;
    for (std::size_t j = 0; j < k; ++j) {
      a[j * k + j] += s.lambda * std::max(jtj[j * k + j], 1e-12);
      minus_g[j] = -jtr[j];
    }
    if (!solve(a, minus_g, step)) {
      s.lambda *= 10.0;
      continue;
    }
    // At most a factor e^2 per parameter per iteration (a trust region in log space): far
    // steps can leave the range where the cost model is finite.
    std::vector<double> xn = s.x;
    for (std::size_t j = 0; j < k; ++j) xn[j] += std::clamp(step[j], -2.0, 2.0);
    std::vector<double> rn;
    try {
      rn = model.residuals(model.predict(efficiencies_at(start, fit, xn)));
    } catch (const InputError&) {
      s.lambda *= 4.0;  // a prediction that is not finite: reject the step
      continue;
    }
    const double ln = sum_squares(rn);
    if (ln < s.loss) {
      const double improvement = (s.loss - ln) / std::max(s.loss, 1e-300);
      s.x = xn;
      s.r = rn;
      s.loss = ln;
      s.lambda = std::max(s.lambda / 3.0, 1e-12);
      return improvement;
    }
    s.lambda *= 4.0;
  }
  return std::nullopt;
}

// Levenberg-Marquardt over the coordinates of `fit`, until no step helps, the improvement falls
// under the tolerance, the residuals vanish or the iterations run out.
void minimise(Model& model, const spec::HardwareEfficiency& start,
              const std::vector<EfficiencyParameter>& fit, const CalibrationOptions& options,
              FitState& s, CalibrationResult& result) {
  const std::size_t k = fit.size();
  for (int it = 0; it < options.max_iterations && k > 0; ++it) {
    result.iterations = it + 1;
    const std::size_t n = s.r.size();
    const std::vector<double> jac = jacobian(model, start, fit, s.x, s.r);
    std::vector<double> jtj(k * k, 0.0), jtr(k, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t a = 0; a < k; ++a) {
        jtr[a] += jac[i * k + a] * s.r[i];
        for (std::size_t b = 0; b < k; ++b) jtj[a * k + b] += jac[i * k + a] * jac[i * k + b];
      }
    const std::optional<double> improvement = damped_step(model, start, fit, jtj, jtr, s);
    if (!improvement || *improvement < options.tolerance || s.loss < 1e-24) {
      result.converged = true;
      break;
    }
  }
}

}  // namespace

CalibrationResult calibrate(const std::vector<Measurement>& measurements,
                            const spec::HardwareEfficiency& start,
                            const CalibrationOptions& options) {
  if (measurements.empty()) throw InputError("calibration: no measurements");
  const std::vector<EfficiencyParameter>& asked = options.fit;
  check_nothing_twice(measurements, asked);
  Model model(measurements);
  const std::vector<double> x_asked = start_coordinates(start, asked);

  CalibrationResult result;
  std::vector<double> predicted = model.predict(efficiencies_at(start, asked, x_asked));
  result.before = fit_quality(predicted, model.measured());
  const std::vector<double> predicted_before = predicted;
  FitState s;
  s.r = model.residuals(predicted);

  // Which of the parameters asked for the data determine (at the start).
  const std::vector<bool> determined =
      independent_columns(jacobian(model, start, asked, x_asked, s.r), s.r.size(), asked.size());
  std::vector<EfficiencyParameter> fit;
  for (std::size_t j = 0; j < asked.size(); ++j) {
    (determined[j] ? result.fitted : result.fixed).push_back(asked[j]);
    if (determined[j]) {
      fit.push_back(asked[j]);
      s.x.push_back(x_asked[j]);
    }
  }
  result.independent_points = static_cast<int>(fit.size());
  if (!result.fixed.empty() && options.undetermined == UndeterminedParameters::Refuse)
    throw InputError("calibration: the " + std::to_string(s.r.size()) + " data points determine " +
                     std::to_string(fit.size()) + " of the " + std::to_string(asked.size()) +
                     " parameters asked for (" + parameter_list(asked) +
                     "); not determined: " + parameter_list(result.fixed) +
                     " (measure other plans or sizes, or fit fewer parameters)");

  s.loss = sum_squares(s.r);
  minimise(model, start, fit, options, s, result);
  if (fit.empty()) result.converged = true;
  result.efficiency = efficiencies_at(start, fit, s.x);
  predicted = model.predict(result.efficiency);
  result.after = fit_quality(predicted, model.measured());
  for (std::size_t i = 0; i < predicted.size(); ++i)
    result.points.push_back({model.labels()[i], model.measured()[i], predicted[i],
                             predicted_before[i], model.sites()[i].first, model.sites()[i].second});
  return result;
}

namespace {

// The pipeline rank of a trace's rank (traces number ranks in the default tp-dp-pp order): with
// per-stage layouts stage s holds stage_tp[s] * dp consecutive ranks; -1 past the last stage.
int stage_of_rank(const spec::ParallelPlan& plan, int rank) {
  if (!spec::stage_tp_varies(plan)) return rank / (plan.tp * plan.dp);
  int first = 0;
  for (int r = 0; r < plan.pp; ++r) {
    first += spec::tp_of_stage(plan, r) * plan.dp;
    if (rank < first) return rank < 0 ? -1 : r;
  }
  return -1;
}

}  // namespace

std::vector<schedule::StageCosts> op_durations_from_trace(const profiler::Trace& trace,
                                                          const spec::ParallelPlan& plan) {
  const int p = plan.pp;
  std::vector<schedule::StageCosts> sum(static_cast<std::size_t>(p));
  std::vector<std::array<int, schedule::kOpKindCount>> count(static_cast<std::size_t>(p));
  for (auto& c : count) c.fill(0);
  for (const profiler::Span& s : trace.spans) {
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= trace.lanes.size()) continue;
    const profiler::Lane& lane = trace.lanes[static_cast<std::size_t>(s.lane)];
    if (lane.stream != profiler::Stream::Compute) continue;
    if (static_cast<int>(s.kind) >= schedule::kPassKindCount) continue;  // not a pass
    const int stage = stage_of_rank(plan, lane.rank);
    if (stage < 0 || stage >= p) continue;
    const auto kind = static_cast<schedule::OpKind>(s.kind);
    sum[static_cast<std::size_t>(stage)][kind] += static_cast<double>(s.end_ns - s.start_ns) * 1e-9;
    ++count[static_cast<std::size_t>(stage)][static_cast<std::size_t>(kind)];
  }
  for (int r = 0; r < p; ++r)
    for (schedule::OpKind k : schedule::kAllOpKinds) {
      const int c = count[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)];
      if (c > 0) sum[static_cast<std::size_t>(r)][k] /= c;
    }
  return sum;
}

std::vector<schedule::StageCosts> op_durations_from_kernels(
    const std::vector<profiler::KernelRecord>& kernels, const spec::ParallelPlan& plan,
    const std::string& who) {
  const int p = plan.pp;
  std::set<std::int32_t> ranks;
  for (const profiler::KernelRecord& k : kernels)
    if (k.phase) ranks.insert(k.rank);
  if (ranks.empty())
    throw InputError(who +
                     ": no GPU activity was launched inside a pipeline phase (forward/backward "
                     "ranges such as Megatron-LM's \"forward-compute\"), so it has no op times to "
                     "calibrate with");
  std::vector<schedule::StageCosts> sum(static_cast<std::size_t>(p));
  std::vector<std::array<int, schedule::kOpKindCount>> count(static_cast<std::size_t>(p));
  for (auto& c : count) c.fill(0);
  for (std::int32_t rank : ranks) {
    const int stage = stage_of_rank(plan, rank);
    if (stage < 0 || stage >= p) continue;
    const auto mean = profiler::analysis::mean_phase_op_ns(kernels, rank);
    for (schedule::OpKind k : schedule::kAllOpKinds) {
      if (schedule::is_reduction(k)) continue;              // not a pass: no phase of its own
      const double ns = mean[static_cast<std::size_t>(k)];  // OpKind and SpanKind share F..IB
      if (!(ns > 0.0)) continue;
      sum[static_cast<std::size_t>(stage)][k] += ns * 1e-9;
      ++count[static_cast<std::size_t>(stage)][static_cast<std::size_t>(k)];
    }
  }
  for (int r = 0; r < p; ++r)
    for (schedule::OpKind k : schedule::kAllOpKinds) {
      const int c = count[static_cast<std::size_t>(r)][static_cast<std::size_t>(k)];
      if (c > 0) sum[static_cast<std::size_t>(r)][k] /= c;
    }
  return sum;
}

}  // namespace pipetune::tuner
