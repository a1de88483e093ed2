// The tuner's auto layer split (Merak's partitioning, tuner/search/auto_layer_split.hpp): a closed
// form when memory does not bind, a plan it makes fit where the even split does not (checked with
// the evaluator's full memory model and simulator, not the partitioner's own sums), and the search
// ranking such plans.
#include "tuner/search/auto_layer_split.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/search.hpp"
#include "tuner/search/search_request.hpp"
#include "tuner/search/tuning_target.hpp"

namespace pipetune::tuner {
namespace {

ResolvedTarget llama3_70b_on_16() {
  TuningTarget t;
  t.model = "llama3-70b";
  t.hardware = "h100-sxm";
  t.gpus = 16;
  t.global_batch = 64;
  return resolve_target(t);
}

// tp=4 pp=4 dp=1 1F1B, full recomputation: a plan whose stages are close to the device's memory.
spec::ParallelPlan tight_plan(const ResolvedTarget& t) {
  spec::ParallelPlan p;
  p.tp = 4;
  p.pp = 4;
  p.dp = 1;
  p.micro_batch_size = 1;
  p.global_batch = t.global_batch;
  p.microbatches = static_cast<int>(t.global_batch);
  p.recompute = spec::Recompute::Full;
  p.sequence_parallel = true;
  spec::apply_defaults(p);
  return p;
}

// llama3-8b's layers are alike, its output layer worth 6V / (72h + 6s) = 6 * 128256 /
// (72 * 4096 + 6 * 8192) = 2.24 layers. With memory out of the way, 4 stages under a bound T take
// floor(T) layers each and the last floor(T - 2.24): T = 8.24 gives 8 + 8 + 8 + 6 = 30 < 32, T = 9
// gives 9 + 9 + 9 + 6 >= 32. The optimum 9 leaves the last stage 6 layers, the later stages
// filled first: 8, 9, 9, 6.
TEST(AutoLayerSplit, WithoutAMemoryLimitItBalancesTheOutputLayer) {
  TuningTarget t;
  t.model = "llama3-8b";
  t.hardware = "h100-sxm";
  t.gpus = 8;
  t.global_batch = 64;
  ResolvedTarget r = resolve_target(t);
  r.cluster.hardware.hbm_bytes = std::int64_t{1} << 50;
  spec::ParallelPlan p;
  p.pp = 4;
  p.dp = 2;
  p.global_batch = 64;
  p.microbatches = 32;
  spec::apply_defaults(p);
  EXPECT_NEAR(output_layer_in_layers(r.model), 2.24, 0.01);
  const std::optional<std::vector<int>> split = auto_layer_split(r.model, r.cluster, p);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(*split, (std::vector<int>{8, 9, 9, 6}));
}

// The same plan with full recomputation on stage 0 alone (per-stage recomputation): F, B and W of
// a layer are G + A, G + 2A and G (GEMMs, attention), so recomputing the forward makes stage 0's
// layers cost rho = 4/3 of the others'. Under a bound T it takes floor(3T / 4) layers: T = 9 and
// T = 9.24 no longer suffice (6 + 9 + 9 + 6, 6 + 9 + 9 + 7 < 32); T = 7 rho = 9.33 gives
// 7 + 9 + 9 + 7 = 32, the only split under 9.33 (stage 0 at 6 leaves 26 layers to stages holding
// at most 9, 9 and 7 below T = 10): stage 0 holds 7 layers where it held 8.
TEST(AutoLayerSplit, AStageThatRecomputesTakesFewerLayers) {
  TuningTarget t;
  t.model = "llama3-8b";
  t.hardware = "h100-sxm";
  t.gpus = 8;
  t.global_batch = 64;
  ResolvedTarget r = resolve_target(t);
  r.cluster.hardware.hbm_bytes = std::int64_t{1} << 50;
  spec::ParallelPlan p;
  p.pp = 4;
  p.dp = 2;
  p.global_batch = 64;
  p.microbatches = 32;
  p.stage_recompute = {spec::Recompute::Full, spec::Recompute::None, spec::Recompute::None,
                       spec::Recompute::None};
  spec::apply_defaults(p);
  const std::optional<std::vector<int>> split = auto_layer_split(r.model, r.cluster, p);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(std::accumulate(split->begin(), split->end(), 0), 32);
  EXPECT_EQ(*split, (std::vector<int>{7, 9, 9, 7}));
  p.stage_recompute.resize(3);  // not one entry per stage
  EXPECT_THROW((void)auto_layer_split(r.model, r.cluster, p), InputError);
}

// The even split (20 layers a stage) does not fit an H100; the auto split does, and the
// evaluator (memory model at the simulated peak) agrees on both.
TEST(AutoLayerSplit, FitsAPlanTheEvenSplitDoesNot) {
  const ResolvedTarget t = llama3_70b_on_16();
  spec::ParallelPlan even = tight_plan(t);
  const PlanEvaluation e = evaluate_plan(t.model, t.cluster, even);
  EXPECT_FALSE(e.feasible) << "the even split fits: the case no longer tests anything";
  const std::optional<std::vector<int>> split = auto_layer_split(t.model, t.cluster, even);
  ASSERT_TRUE(split.has_value());
  EXPECT_EQ(std::accumulate(split->begin(), split->end(), 0), 80);
  EXPECT_NE(*split, (std::vector<int>{20, 20, 20, 20}));
  spec::ParallelPlan balanced = even;
  balanced.layer_split = *split;
  const PlanEvaluation a = evaluate_plan(t.model, t.cluster, balanced);
  EXPECT_TRUE(a.feasible) << a.infeasible_reason;
}

// The search ranks the auto split of that plan, labelled "auto", with its split in the plan.
TEST(AutoLayerSplit, TheSearchRanksAutoSplits) {
  SearchRequest request;
  request.target.model = "llama3-70b";
  request.target.hardware = "h100-sxm";
  request.target.gpus = 16;
  request.target.global_batch = 64;
  request.schedules = {"1f1b"};
  request.vocab_modes = {"none", "auto"};
  request.keep = 20;
  const SearchSpace space = search_space(request);
  const SearchResult r = search_plans(space, evaluator_scorers(space.model, space.cluster));
  bool ranked = false;
  for (const ScoredPlan& c : r.ranked) {
    if (c.vocab_label != "auto") continue;
    EXPECT_FALSE(c.plan.layer_split.empty());
    EXPECT_NE(spec::layer_split(space.model, c.plan),
              spec::even_layer_split(space.model.layers, c.plan.pp));
    EXPECT_NE(plan_summary(c.plan, c.vocab_label).find(" vocab=auto split="), std::string::npos)
        << plan_summary(c.plan, c.vocab_label);
    ranked = ranked || (c.plan.tp == 4 && c.plan.pp == 4);
  }
  EXPECT_TRUE(ranked) << "tp=4 pp=4 runs only with the auto split";
}

TEST(AutoLayerSplit, OneLayerGroupPerStageOnly) {
  const ResolvedTarget t = llama3_70b_on_16();
  spec::ParallelPlan v = tight_plan(t);
  v.schedule = "v-half";
  v.chunks = 2;
  EXPECT_THROW((void)auto_layer_split(t.model, t.cluster, v), InputError);
  spec::ParallelPlan vocab = tight_plan(t);
  vocab.vocab = schedule::VocabMode::Vocab1;
  EXPECT_THROW((void)auto_layer_split(t.model, t.cluster, vocab), InputError);
}

// The splitter (the enumerator's memo of solved problems) gives every plan what a fresh solve
// gives, over the knobs a search varies: those the problem reads (micro-batch size,
// recomputation, ZeRO stage, schedule) and those it does not (offload), which share a solve.
TEST(AutoLayerSplit, TheSplitterGivesEachPlanItsOwnSolvesSplit) {
  const ResolvedTarget t = llama3_70b_on_16();
  AutoLayerSplitter splitter;
  int plans = 0, split = 0;
  for (const char* schedule : {"1f1b", "gpipe", "zb-h1"})
    for (int mbs : {1, 2})
      for (spec::Recompute rc : {spec::Recompute::None, spec::Recompute::Full})
        for (int zero : {0, 1, 2, 3})
          for (bool offload : {false, true}) {
            spec::ParallelPlan p = tight_plan(t);
            p.schedule = schedule;
            p.micro_batch_size = mbs;
            p.microbatches = static_cast<int>(t.global_batch) / mbs;
            p.recompute = rc;
            p.zero_stage = zero;
            p.offload_activations = offload;
            const auto fresh = auto_layer_split(t.model, t.cluster, p);
            EXPECT_EQ(splitter.split(t.model, t.cluster, p), fresh)
                << schedule << " mbs=" << mbs << " zero=" << zero << " offload=" << offload;
            ++plans;
            split += fresh.has_value() ? 1 : 0;
          }
  EXPECT_GT(split, 10);  // the splits compared are real ones, not only "none fits"
  EXPECT_LT(splitter.solves(), static_cast<std::size_t>(plans) / 2);
}

// Per-stage recomputation: the problems' per-stage lists hold the same values in other orders and
// runs (the splitter keys a list by its runs of equal values), and each plan still gets its own
// solve's split.
TEST(AutoLayerSplit, TheSplitterTellsPerStageOrdersApart) {
  ResolvedTarget t = llama3_70b_on_16();
  t.cluster.hardware.hbm_bytes = t.cluster.hardware.hbm_bytes * 6 / 2;
  using spec::Recompute;
  const std::vector<std::vector<Recompute>> orders = {
      {Recompute::Full, Recompute::Full, Recompute::None, Recompute::None},
      {Recompute::None, Recompute::None, Recompute::Full, Recompute::Full},
      {Recompute::Full, Recompute::None, Recompute::Full, Recompute::None},
      {Recompute::None, Recompute::Full, Recompute::None, Recompute::Full},
      {Recompute::Full, Recompute::None, Recompute::None, Recompute::Full},
      {Recompute::Full, Recompute::Full, Recompute::Full, Recompute::None},
      {Recompute::None, Recompute::Full, Recompute::Full, Recompute::Full}};
  AutoLayerSplitter splitter;
  std::vector<std::optional<std::vector<int>>> splits;
  for (int pass = 0; pass < 2; ++pass)  // the second pass finds every problem solved
    for (const std::vector<Recompute>& order : orders) {
      spec::ParallelPlan p = tight_plan(t);
      p.stage_recompute = order;
      const auto fresh = auto_layer_split(t.model, t.cluster, p);
      EXPECT_EQ(splitter.split(t.model, t.cluster, p), fresh) << "pass " << pass;
      if (pass == 0) splits.push_back(fresh);
    }
  EXPECT_EQ(splitter.solves(), orders.size());
  // Each order its own split (none shared by mistake would give these).
  std::size_t distinct = 0;
  for (std::size_t i = 0; i < splits.size(); ++i) {
    ASSERT_TRUE(splits[i].has_value()) << "order " << i;
    distinct += std::find(splits.begin(), splits.begin() + static_cast<std::ptrdiff_t>(i),
                          splits[i]) == splits.begin() + static_cast<std::ptrdiff_t>(i);
  }
  EXPECT_EQ(distinct, orders.size());
}

}  // namespace
}  // namespace pipetune::tuner
