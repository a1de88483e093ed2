// Per-stage layouts (ParallelPlan::stage_tp: each pipeline stage its own TP degree, activations
// and their gradients resharded whole at the boundaries) in whole training runs on the CPU.
// Reference: the single-rank run of the same global batch (dp * m micro-batches), as in
// parallel_equivalence_test.cpp: the loss of every step and every first-step gradient within
// 1e-4 relative. (Final parameters are not compared: Adam's first steps move a parameter by
// about lr * sign(gradient), so a gradient element near zero may flip between two reduction
// orders; the later steps' losses carry the updates.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::runtime {
namespace {

constexpr int kSteps = 3;

TrainOptions base_options(int microbatches) {
  TrainOptions o;
  o.model = spec::load_model("tiny");  // 4 heads: stage tp 1, 2 or 4
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = microbatches;
  o.steps = kSteps;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

// The single-rank run of `microbatches` micro-batches, trained once per count.
const TrainResult& reference(int microbatches) {
  static std::map<int, TrainResult> cache;
  auto it = cache.find(microbatches);
  if (it == cache.end()) it = cache.emplace(microbatches, train(base_options(microbatches))).first;
  return it->second;
}

struct LayoutCase {
  std::string name;
  std::vector<int> stage_tp;
  int dp = 1;
  std::string schedule = "1f1b";
  int chunks = 1;
  int microbatches = 4;
  int zero = 0;
};

TrainOptions options_for(const LayoutCase& c) {
  TrainOptions o = base_options(c.microbatches);
  o.plan.pp = static_cast<int>(c.stage_tp.size());
  o.plan.tp = c.stage_tp.front();
  o.plan.stage_tp = c.stage_tp;
  o.plan.dp = c.dp;
  o.plan.schedule = c.schedule;
  o.plan.chunks = c.chunks;
  o.plan.zero_stage = c.zero;
  return o;
}

// max |a - b| / max |b|, floored as parallel_equivalence_test.cpp does.
double relative_error(const tensor::Tensor& a, const tensor::Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  double diff = 0.0, scale = 1e-6;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

// Every tensor of `want` is in `got` within `tolerance`; the differing ones listed.
void expect_tensors_match(const std::map<std::string, tensor::Tensor>& got,
                          const std::map<std::string, tensor::Tensor>& want, double tolerance,
                          const char* what) {
  EXPECT_EQ(got.size(), want.size()) << "different parameter sets (" << what << ")";
  std::ostringstream bad;
  int failures = 0;
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    if (it == got.end()) {
      bad << "  " << name << ": missing\n";
      ++failures;
      continue;
    }
    const double err = relative_error(it->second, w);
    if (!(err <= tolerance)) {
      bad << "  " << name << ": relative error " << err << "\n";
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0) << what << " that differ from the 1-rank run:\n" << bad.str();
}

std::vector<LayoutCase> layout_cases() {
  return {
      // A narrow stage sending to a wide one (each sender copies to two receivers) and back.
      {.name = "tp1_2_1f1b", .stage_tp = {1, 2}},
      {.name = "tp2_4_1f1b", .stage_tp = {2, 4}},
      // A wide stage sending to a narrow one (some senders idle, the gradient fans out).
      {.name = "tp2_1_dp2_gpipe", .stage_tp = {2, 1}, .dp = 2, .schedule = "gpipe"},
      {.name = "tp4_2_dp2_1f1b", .stage_tp = {4, 2}, .dp = 2},
      {.name = "tp2_4_dp2_gpipe", .stage_tp = {2, 4}, .dp = 2, .schedule = "gpipe"},
      // Three stages, both directions of resharding along one pipeline.
      {.name = "tp2_1_2_1f1b", .stage_tp = {2, 1, 2}, .microbatches = 6},
      {.name = "tp2_1_2_dp2_gpipe",
       .stage_tp = {2, 1, 2},
       .dp = 2,
       .schedule = "gpipe",
       .microbatches = 3},
      // Chunks placed round-robin: group 2 goes from the last rank back to rank 0, resharded.
      {.name = "tp1_2_interleaved",
       .stage_tp = {1, 2},
       .schedule = "interleaved-1f1b",
       .chunks = 2},
      {.name = "tp2_1_dp2_interleaved",
       .stage_tp = {2, 1},
       .dp = 2,
       .schedule = "interleaved-1f1b",
       .chunks = 2},
      // Split backward (W apart from B) and ZeRO-2 over each stage's own DP groups.
      {.name = "tp1_2_zbh1", .stage_tp = {1, 2}, .schedule = "zb-h1"},
      {.name = "tp2_1_dp2_zero2", .stage_tp = {2, 1}, .dp = 2, .zero = 2},
  };
}

class StageLayout : public ::testing::TestWithParam<LayoutCase> {};

TEST_P(StageLayout, TrainsAsTheSingleRankRun) {
  const LayoutCase& c = GetParam();
  const TrainOptions o = options_for(c);
  const TrainResult got = train(o);
  const TrainResult& want = reference(c.microbatches * c.dp);

  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s)
    EXPECT_NEAR(got.steps[s].loss, want.steps[s].loss, 1e-4 * std::fabs(want.steps[s].loss))
        << "step " << s + 1;
  expect_tensors_match(got.first_step_gradients, want.first_step_gradients, 1e-4,
                       "first-step gradients");

  // Every rank ran, each with its own stage's coordinates.
  ASSERT_EQ(static_cast<int>(got.ranks.size()), o.plan.world_size());
  int rank = 0;
  for (int p = 0; p < o.plan.pp; ++p)
    for (int d = 0; d < c.dp; ++d)
      for (int t = 0; t < spec::tp_of_stage(o.plan, p); ++t, ++rank) {
        SCOPED_TRACE("rank " + std::to_string(rank));
        const RankSummary& r = got.ranks[static_cast<std::size_t>(rank)];
        EXPECT_EQ(r.rank, rank);
        EXPECT_EQ(r.pp_rank, p);
        EXPECT_EQ(r.dp_rank, d);
        EXPECT_EQ(r.tp_rank, t);
      }
}

INSTANTIATE_TEST_SUITE_P(Layouts, StageLayout, ::testing::ValuesIn(layout_cases()),
                         [](const auto& info) { return info.param.name; });

// A stage of wider tp holds less of each layer: its ranks' parameter bytes are those of the
// uniform run at that tp (the layout really is per stage, not stage 0's everywhere).
TEST(StageLayoutMemory, EachStageHoldsTheShardsOfItsOwnTp) {
  LayoutCase mixed{.name = "mixed", .stage_tp = {1, 4}};
  TrainOptions o = options_for(mixed);
  o.steps = 1;
  o.capture_gradients = false;
  const TrainResult got = train(o);
  const auto uniform = [&](int tp) {
    TrainOptions u = base_options(4);
    u.plan.pp = 2;
    u.plan.tp = tp;
    u.steps = 1;
    u.capture_gradients = false;
    return train(u);
  };
  const TrainResult tp1 = uniform(1), tp4 = uniform(4);
  ASSERT_EQ(got.ranks.size(), 5u);
  EXPECT_EQ(got.ranks[0].parameter_bytes, tp1.ranks[0].parameter_bytes);  // stage 0, tp 1
  for (int t = 0; t < 4; ++t)  // stage 1 (ranks 1..4) as the tp-4 run's stage 1 (ranks 4..7)
    EXPECT_EQ(got.ranks[static_cast<std::size_t>(1 + t)].parameter_bytes,
              tp4.ranks[static_cast<std::size_t>(4 + t)].parameter_bytes)
        << "tp rank " << t;
}

TEST(StageLayoutChecks, RefusesVocabularyParallelismNamingStageTp) {
  LayoutCase c{.name = "vocab", .stage_tp = {1, 2}};
  TrainOptions o = options_for(c);
  o.plan.vocab = schedule::VocabMode::Vocab1;
  try {
    check_train_options(o);
    FAIL() << "accepted";
  } catch (const InputError& e) {
    const auto& f = e.fields();
    EXPECT_NE(std::find(f.begin(), f.end(), "plan.stage_tp"), f.end()) << e.what();
  }
}

}  // namespace
}  // namespace pipetune::runtime
