#include "cli/calibration_report.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

namespace pipetune::cli {

namespace {

struct ErrorSum {
  int points = 0;
  double before = 0.0;  // sums of |predicted - measured| / measured
  double after = 0.0;
  void add(const tuner::DataPoint& p) {
    ++points;
    before += std::abs(p.predicted_before - p.measured) / p.measured;
    after += std::abs(p.predicted - p.measured) / p.measured;
  }
};

struct Groups {
  std::map<std::string, ErrorSum> by_kind;
  std::map<int, ErrorSum> by_stage;
};

Groups group(const tuner::CalibrationResult& r) {
  Groups g;
  for (const tuner::DataPoint& p : r.points) {
    if (p.stage < 0 || !(p.measured > 0.0)) continue;  // iteration times: in the overall fit
    g.by_kind[p.kind].add(p);
    g.by_stage[p.stage].add(p);
  }
  return g;
}

nlohmann::json entry(const ErrorSum& e) {
  return {{"points", e.points},
          {"mape_before", e.before / e.points},
          {"mape_after", e.after / e.points}};
}

}  // namespace

void print_calibration_errors(const tuner::CalibrationResult& r) {
  const Groups g = group(r);
  if (g.by_kind.empty()) return;
  std::printf("\nop time error   points    before     after\n");
  for (const auto& [kind, e] : g.by_kind)
    std::printf("kind %-10s %6d  %7.1f%%  %7.1f%%\n", kind.c_str(), e.points,
                100.0 * e.before / e.points, 100.0 * e.after / e.points);
  for (const auto& [stage, e] : g.by_stage)
    std::printf("stage %-9d %6d  %7.1f%%  %7.1f%%\n", stage, e.points, 100.0 * e.before / e.points,
                100.0 * e.after / e.points);
}

nlohmann::json calibration_errors_json(const tuner::CalibrationResult& r) {
  const Groups g = group(r);
  nlohmann::json kinds = nlohmann::json::object(), stages = nlohmann::json::object();
  for (const auto& [kind, e] : g.by_kind) kinds[kind] = entry(e);
  for (const auto& [stage, e] : g.by_stage) stages[std::to_string(stage)] = entry(e);
  return {{"by_kind", kinds}, {"by_stage", stages}};
}

}  // namespace pipetune::cli
