// terapipe in the search and in predictions: the evaluator simulates the slices TeraPipe's
// dynamic programming chooses (its estimate against the simulated pipeline), the search ranks the
// plan with those slices named, so its run file trains what was scored, and MoE models are left
// out of the search, since their layers cannot be sliced.
#include <gtest/gtest.h>

#include <array>
#include <numeric>
#include <string>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/predict/evaluate.hpp"
#include "tuner/predict/token_slices.hpp"
#include "tuner/search/evaluator_scorer.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::tuner {
namespace {

// GPT-3 175B on 128 H100s, 8 sequences a step over 16 stages: too few micro-batches to fill a
// pipeline (the run preset gpt3-175b-h100-128-terapipe).
spec::ParallelPlan small_batch(const std::string& schedule) {
  spec::ParallelPlan p;
  p.tp = 8;
  p.pp = 16;
  p.dp = 1;
  p.micro_batch_size = 1;
  p.microbatches = 8;
  p.schedule = schedule;
  p.recompute = spec::Recompute::Selective;
  return p;
}

spec::ClusterSpec h100s(int n) {
  return spec::make_cluster(spec::load_hardware("h100-sxm"), n);
}

TEST(TerapipeSearch, ThePredictionSimulatesTheProgrammesSlices) {
  const spec::ModelSpec m = spec::load_model("gpt3-175b");
  const PlanEvaluation e = evaluate_plan(m, h100s(128), small_batch("terapipe"));
  ASSERT_FALSE(e.slice_tokens.empty());
  EXPECT_EQ(std::accumulate(e.slice_tokens.begin(), e.slice_tokens.end(), 0), m.seq_len);
  EXPECT_EQ(e.slice_tokens,
            best_token_slicing(e.costs.table, 16, 8, m.seq_len).tokens);  // the same costs
  // The programme's estimate counts each slice's time m times plus (p - 1) of the largest: the
  // simulated pipeline (GPipe order, transfers on their own links) is within a few percent.
  const double estimate = best_token_slicing(e.costs.table, 16, 8, m.seq_len).estimate;
  EXPECT_NEAR(e.pipeline_time, estimate, 0.05 * estimate);
  // Fewer idle stages than the whole micro-batches of 1f1b.
  const PlanEvaluation one = evaluate_plan(m, h100s(128), small_batch("1f1b"));
  EXPECT_LT(e.iteration_time, 0.8 * one.iteration_time);
  EXPECT_LT(e.bubble_ratio, one.bubble_ratio);
  // Slices asked for are simulated as asked.
  spec::ParallelPlan two = small_batch("terapipe");
  two.slices = 2;
  EXPECT_TRUE(evaluate_plan(m, h100s(128), two).slice_tokens.empty());
}

// The branch and bound's bound never passes the evaluated time: over shapes where the start-up
// of the first slice, the slices' work and the drain each bind.
TEST(TerapipeSearch, TheBoundIsAtMostTheEvaluatedTime) {
  const spec::ModelSpec m = spec::load_model("gpt3-175b");
  PlanEvaluator evaluator;
  for (const auto& [tp, pp, microbatches, slices] :
       {std::array{8, 16, 8, 0}, std::array{8, 16, 1, 0}, std::array{8, 8, 32, 0},
        std::array{4, 32, 4, 3}, std::array{8, 16, 8, 1}, std::array{8, 4, 2, 16}}) {
    spec::ParallelPlan p = small_batch("terapipe");
    p.tp = tp;
    p.pp = pp;
    p.microbatches = microbatches;
    p.slices = slices;
    const spec::ClusterSpec c = h100s(tp * pp);
    const PlanBound b = evaluator.bound(m, c, p);
    const PlanEvaluation e = evaluator.evaluate(m, c, p);
    const double bound = b.iteration_time, evaluated = e.iteration_time;
    const std::string at = "tp=" + std::to_string(tp) + " pp=" + std::to_string(pp) +
                           " m=" + std::to_string(microbatches) +
                           " slices=" + std::to_string(slices);
    EXPECT_LE(bound, evaluated * (1.0 + 1e-12)) << at;
    EXPECT_GT(bound, 0.5 * evaluated) << at;  // and close enough to prune
    // The slices the bound chose (none when the plan gives a count) are the evaluation's: the
    // search scores the plan with them given, and must get the same time.
    EXPECT_EQ(b.slice_tokens, slices == 0 ? e.slice_tokens : std::vector<int>{}) << at;
    if (!b.slice_tokens.empty()) {
      spec::ParallelPlan given = p;
      given.slice_tokens = b.slice_tokens;
      EXPECT_EQ(evaluator.evaluate(m, c, given).iteration_time, evaluated) << at;
    }
  }
}

TEST(TerapipeSearch, TheSearchRanksTerapipeWithItsSlicesNamed) {
  SearchSpace s;
  s.model = spec::load_model("gpt3-175b");
  s.cluster = h100s(128);
  s.global_batch = 8;
  s.micro_batch_sizes = {1};
  s.schedules = {"1f1b", "terapipe"};
  s.vocab_modes = {"none"};
  s.threads = 2;
  s.keep = 5;
  const SearchResult r = search_plans(s, evaluator_scorers(s.model, s.cluster));
  ASSERT_FALSE(r.ranked.empty());
  const ScoredPlan& best = r.ranked.front();
  EXPECT_EQ(best.plan.schedule, "terapipe");
  ASSERT_FALSE(best.plan.slice_tokens.empty());
  EXPECT_EQ(std::accumulate(best.plan.slice_tokens.begin(), best.plan.slice_tokens.end(), 0),
            s.model.seq_len);
  // The named slices are the plan as scored: evaluating it again gives the same time.
  EXPECT_NO_THROW(spec::validate(s.model, s.cluster, best.plan));
  EXPECT_NEAR(evaluate_plan(s.model, s.cluster, best.plan).iteration_time,
              best.score.iteration_time, 1e-12 * best.score.iteration_time);
}

TEST(TerapipeSearch, MoeModelsAreSearchedWithoutIt) {
  SearchSpace s;
  s.model = spec::load_model("tiny-moe");
  s.cluster = h100s(4);
  s.global_batch = 8;
  s.threads = 2;
  const SearchResult all = search_plans(s, evaluator_scorers(s.model, s.cluster));
  for (const ScoredPlan& c : all.ranked) EXPECT_NE(c.plan.schedule, "terapipe");
  s.schedules = {"terapipe"};  // asked for by name: counted with its reason
  const SearchResult asked = search_plans(s, evaluator_scorers(s.model, s.cluster));
  for (const ScoredPlan& c : asked.ranked) EXPECT_EQ(c.plan.pp, 1);  // no pipeline: 1f1b
  EXPECT_GT(asked.pruned.count("terapipe cuts micro-batches into token slices, which need a dense "
                               "model"),
            0u);
}

}  // namespace
}  // namespace pipetune::tuner
