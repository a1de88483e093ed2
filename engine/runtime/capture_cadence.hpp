// At which step ends a rank takes its captured GPU activity (TrainOptions::gpu_capture_every).
// Each take flushes CUPTI, and on an H100 a flush cost 0.35 to 0.5 ms of host time while the
// device waited, whatever it handed over (the capture benchmark's flush-only modes): 1.4% of a
// 32 ms step, 0.2% of a 268 ms one. Taking every N steps spreads that cost over N steps; the
// records of the steps between still join the trace under their own ops, only later.
//
// Fixed: a take every N steps. Auto: the fewest steps between takes that keep what the takes cost
// within `budget` of the steps' time, from what the last take cost and the mean step since the
// take before it: N = ceil(take / (budget * step)), at most kMostStepsPerTake (how late a record
// may reach the trace). The first step end is always taken, so the first estimate is measured.
//
//   CaptureCadence cadence(0, 0.01);  // auto, takes within 1% of the steps' time
//   if (cadence.step_ended(step_ns)) { ... take ...; cadence.taken(take_ns); }
//
// The caller also takes at the run's last step whatever is due (nothing is left behind).
#pragma once

#include <cstdint>
#include <string>

namespace pipetune::runtime {

class CaptureCadence {
 public:
  static constexpr int kMostStepsPerTake = 16;

  // What is wrong with these arguments ("" when nothing): `every` must be 0 (auto) or at least
  // 1, `budget` in (0, 1). The trainer reports it as an InputError.
  static std::string problem(int every, double budget);

  // `every`: N >= 1 takes every N steps; 0 chooses N from the takes' cost. `budget`: the share
  // of the steps' time the takes may cost when auto. std::invalid_argument when problem() says.
  CaptureCadence(int every, double budget);

  // A step ended after `step_ns`: counts it, and says whether the take is due at this step end.
  bool step_ended(std::int64_t step_ns);
  // A take was made at this step end, costing `take_ns` of host time: auto weighs it against the
  // mean step since the last take for the next N. The count starts again.
  void taken(std::int64_t take_ns);

  int every() const { return every_; }  // the steps from one take to the next, now
  int steps_since_take() const { return steps_since_take_; }
  bool automatic() const { return automatic_; }

 private:
  bool automatic_;
  double budget_;
  int every_;
  int steps_since_take_ = 0;
  std::int64_t ns_since_take_ = 0;  // those steps' time
};

}  // namespace pipetune::runtime
