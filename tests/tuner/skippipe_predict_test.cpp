// skippipe through the evaluator: the skip ratio is part of what the evaluator caches a schedule
// and a simulation by, so one evaluator (as the search and the GUI keep) gives each ratio its own
// time; the FLOPs count the layers the paths run; a negative ratio is refused, not taken as the
// default.
#include <gtest/gtest.h>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/predict/simulation_cache.hpp"

namespace pipetune::tuner {
namespace {

spec::ParallelPlan skippipe(double ratio) {
  spec::ParallelPlan p;
  p.pp = 8;
  p.micro_batch_size = 1;
  p.microbatches = 16;
  p.schedule = "skippipe";
  p.skip_ratio = ratio;
  p.recompute = spec::Recompute::Full;
  return p;
}

TEST(SkippipePredict, OneEvaluatorGivesEachSkipRatioItsOwnTime) {
  const spec::ModelSpec m = spec::load_model("llama3-8b");
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  EvaluateOptions options;
  options.simulation_cache = std::make_shared<SimulationCache>();
  PlanEvaluator shared(options);
  const PlanEvaluation quarter = shared.evaluate(m, c, skippipe(0.25));
  const PlanEvaluation half = shared.evaluate(m, c, skippipe(0.5));
  // Each as a fresh evaluator sees it.
  EXPECT_DOUBLE_EQ(quarter.iteration_time, evaluate_plan(m, c, skippipe(0.25)).iteration_time);
  EXPECT_DOUBLE_EQ(half.iteration_time, evaluate_plan(m, c, skippipe(0.5)).iteration_time);
  EXPECT_LT(half.iteration_time, quarter.iteration_time);
  // 0.25 of 8 stages: 2 of the 6 middle ones per micro-batch; 0.5: 4. The FLOPs scale with the
  // layers run (4 layers a stage): 24 of 32, 16 of 32.
  EXPECT_NEAR(half.model_flops / quarter.model_flops, 16.0 / 24.0, 1e-12);
}

TEST(SkippipePredict, ANegativeRatioIsRefused) {
  const spec::ModelSpec m = spec::load_model("llama3-8b");
  const spec::ClusterSpec c = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  EXPECT_THROW(evaluate_plan(m, c, skippipe(-0.5)), InputError);
}

}  // namespace
}  // namespace pipetune::tuner
