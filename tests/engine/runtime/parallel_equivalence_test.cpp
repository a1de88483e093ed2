// The parallel run equals the single-rank run: for each plan, the loss and
// every parameter gradient after step 1 match the 1-rank run of the same global batch within
// 1e-4 relative, and the 10-step loss curve matches within 1e-3.
//
// The reference is tp = pp = dp = ep = 1 with dp * m micro-batches of the same size: by the data
// loader's layout (engine/data/data_loader.hpp) it sees exactly the parallel run's sequences,
// and each micro-batch routes its MoE tokens alone, as every rank of the parallel run does.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/plan_matrix.hpp"

namespace pipetune::runtime {
namespace {

constexpr int kSteps = 10;

using testing::PlanCase;

TrainOptions options_for(const std::string& model, int microbatches) {
  TrainOptions o;
  o.model = spec::load_model(model);
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = microbatches;
  o.steps = kSteps;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

const TrainResult& reference(const std::string& model, int microbatches) {
  static std::map<std::pair<std::string, int>, TrainResult> cache;
  auto key = std::make_pair(model, microbatches);
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, train(options_for(model, microbatches))).first;
  return it->second;
}

// max |a - b| / max |b| over one tensor, with a floor so all-but-zero gradients compare absolutely.
double relative_error(const tensor::Tensor& a, const tensor::Tensor& b) {
  double diff = 0.0, scale = 1e-6;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

class ParallelEquivalence : public ::testing::TestWithParam<PlanCase> {};

TEST_P(ParallelEquivalence, MatchesSingleRank) {
  const PlanCase& c = GetParam();
  TrainOptions o = options_for(c.model, c.microbatches);
  testing::apply_plan(c, o);
  const TrainResult got = train(o);
  const TrainResult& want = reference(c.model, c.microbatches * c.dp);

  ASSERT_EQ(got.steps.size(), want.steps.size());
  EXPECT_NEAR(got.steps[0].loss, want.steps[0].loss, 1e-4 * std::fabs(want.steps[0].loss));
  std::ostringstream curve;
  bool curve_ok = true;
  for (std::size_t s = 0; s < want.steps.size(); ++s) {
    const double d = std::fabs(got.steps[s].loss - want.steps[s].loss);
    curve_ok = curve_ok && d <= 1e-3 * std::fabs(want.steps[s].loss);
    curve << "  step " << s + 1 << ": got " << got.steps[s].loss << " want " << want.steps[s].loss
          << (d <= 1e-3 * std::fabs(want.steps[s].loss) ? "" : "   <-- differs") << "\n";
  }
  EXPECT_TRUE(curve_ok) << "loss curves differ:\n" << curve.str();

  ASSERT_EQ(got.first_step_gradients.size(), want.first_step_gradients.size())
      << "different parameter sets";
  std::ostringstream bad;
  int failures = 0;
  for (const auto& [name, w] : want.first_step_gradients) {
    auto it = got.first_step_gradients.find(name);
    if (it == got.first_step_gradients.end()) {
      bad << "  " << name << ": missing\n";
      ++failures;
      continue;
    }
    const double err = relative_error(it->second, w);
    if (!(err <= 1e-4)) {
      bad << "  " << name << ": relative error " << err << "\n";
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0) << "gradients that differ from the 1-rank run:\n" << bad.str();
}

INSTANTIATE_TEST_SUITE_P(Plans, ParallelEquivalence,
                         ::testing::ValuesIn(testing::parallel_equivalence_plans()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace pipetune::runtime
