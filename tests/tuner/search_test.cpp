// The search's own logic: every enumerated plan is valid and distinct, the expected pruning
// reasons are counted, ranking and the Pareto front agree with a brute-force definition, the
// "redis" split matches a hand calculation, and bad inputs fail with the reason. (The search
// with the real evaluator is tested in tests/tuner/predict.)
#include "tuner/search/search.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <set>
#include <sstream>

#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"

namespace pipetune::tuner {
namespace {

SearchSpace tiny_space(int devices, int per_node = 8) {
  SearchSpace s;
  s.model = spec::load_model("tiny");  // 8 layers, 4 heads
  s.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), devices);
  s.cluster.devices_per_node = per_node;
  s.global_batch = 16;
  s.threads = 2;
  return s;
}

// A deterministic score that depends on every knob, so ranking has something to order.
CandidateScore toy_score(const spec::ParallelPlan& p) {
  CandidateScore c;
  c.feasible = !(p.tp == 1 && p.pp == 1 && p.recompute == spec::Recompute::None);
  c.infeasible_reason = "out of memory";
  c.tokens_per_s = 1000.0 / (p.tp + p.pp) + p.micro_batch_size + 0.1 * p.chunks +
                   (p.recompute == spec::Recompute::Full ? -1.0 : 0.0);
  c.peak_memory_bytes = 1e9 / (p.tp * p.pp) + 1e8 * p.micro_batch_size - 1e7 * p.zero_stage;
  c.iteration_time = 1.0 / c.tokens_per_s;
  return c;
}

std::string key(const ScoredPlan& s) {
  std::ostringstream o;
  const auto& p = s.plan;
  o << p.tp << ' ' << p.pp << ' ' << p.dp << ' ' << p.ep << ' ' << p.micro_batch_size << ' '
    << p.schedule << ' ' << p.chunks << ' ' << s.vocab_label << ' ' << static_cast<int>(p.recompute)
    << ' ' << p.zero_stage << ' ' << p.layered_reduction << ' ' << p.moe_chunks << ' '
    << spec::expert_layouts_text(p.expert_layouts) << ' ' << p.sparse_embedding_gradient;
  return o.str();
}

TEST(Search, EnumeratesValidDistinctPlansAndCountsWhyOthersWerePruned) {
  SearchSpace s = tiny_space(8, 4);
  const SearchResult r = search_plans(s, toy_score);
  EXPECT_GT(r.candidates_evaluated, 100);
  std::set<std::string> seen;
  for (const ScoredPlan& c : r.ranked) {
    EXPECT_NO_THROW(spec::validate(s.model, s.cluster, c.plan)) << key(c);
    EXPECT_TRUE(seen.insert(key(c)).second) << "twice: " << key(c);
    EXPECT_EQ(c.plan.tp * c.plan.pp * c.plan.dp, 8);
    EXPECT_EQ(c.plan.global_batch, 16);
    EXPECT_EQ(c.plan.sequence_parallel, c.plan.tp > 1);
    if (c.plan.dp == 1) {
      EXPECT_EQ(c.plan.zero_stage, 0) << "ZeRO without data parallelism";
    }
  }
  // tp = 8 crosses the 4-GPU nodes; tp = 8 is also the only TP degree not dividing 4 heads.
  EXPECT_EQ(r.pruned.at("tp spans nodes"), 1);
  // Plans the toy evaluator calls infeasible are counted, not ranked.
  EXPECT_GT(r.pruned.at("out of memory"), 0);
  // Every factorisation with a pipeline shows up with each vocabulary treatment it supports.
  std::set<std::string> vocab;
  for (const ScoredPlan& c : r.ranked)
    if (c.plan.pp > 1 && c.plan.schedule == "1f1b") vocab.insert(c.vocab_label);
  EXPECT_EQ(vocab, (std::set<std::string>{"none", "redis", "vocab-1", "vocab-2", "interlaced"}));
  // Every enumerated plan is scored or pruned exactly once: by a plan rule, by its static
  // memory, by the schedule generator (an evaluator error) or by the evaluator's verdict.
  std::int64_t after_enumeration = 0;
  std::string listing;
  for (const auto& [reason, n] : r.pruned) {
    listing += reason + ": " + std::to_string(n) + "\n";
    if (reason.rfind("plan rule", 0) == 0 || reason.rfind("weights", 0) == 0 ||
        reason.rfind("schedule:", 0) == 0 || reason == "out of memory")
      after_enumeration += n;
  }
  EXPECT_EQ(r.candidates_enumerated,
            r.candidates_evaluated - r.pruned.at("out of memory") + after_enumeration)
      << listing;
}

TEST(Search, RankingAndParetoFrontMatchBruteForce) {
  const SearchResult r = search_plans(tiny_space(8), toy_score);
  ASSERT_FALSE(r.ranked.empty());
  for (std::size_t i = 1; i < r.ranked.size(); ++i)
    EXPECT_GE(r.ranked[i - 1].score.tokens_per_s, r.ranked[i].score.tokens_per_s);
  // Brute force: a plan is on the front when no other plan is at least as good on both and
  // strictly better on one (ties on both: the first in rank order stands for them).
  std::set<std::string> want;
  for (std::size_t i = 0; i < r.ranked.size(); ++i) {
    const auto& a = r.ranked[i].score;
    bool dominated = false;
    for (std::size_t j = 0; j < r.ranked.size() && !dominated; ++j) {
      const auto& b = r.ranked[j].score;
      const bool no_worse =
          b.tokens_per_s >= a.tokens_per_s && b.peak_memory_bytes <= a.peak_memory_bytes;
      const bool better =
          b.tokens_per_s > a.tokens_per_s || b.peak_memory_bytes < a.peak_memory_bytes;
      dominated = (no_worse && better) || (j < i && b.tokens_per_s == a.tokens_per_s &&
                                           b.peak_memory_bytes == a.peak_memory_bytes);
    }
    if (!dominated) want.insert(key(r.ranked[i]));
  }
  std::set<std::string> got;
  for (const ScoredPlan& c : r.pareto) got.insert(key(c));
  EXPECT_EQ(got, want);
}

TEST(Search, EnumeratingOnSeveralThreadsGivesTheOneThreadResult) {
  // Each factoring's plans are enumerated on a thread of their own and joined in order: the
  // plans, their order, the counts and the closest infeasible plan are those of one thread.
  SearchSpace one = tiny_space(16, 4);
  one.threads = 1;
  SearchSpace three = one;
  three.threads = 3;
  const SearchResult a = search_plans(one, toy_score);
  const SearchResult b = search_plans(three, toy_score);
  EXPECT_EQ(a.candidates_enumerated, b.candidates_enumerated);
  EXPECT_EQ(a.candidates_evaluated, b.candidates_evaluated);
  EXPECT_EQ(a.pruned, b.pruned);
  ASSERT_EQ(a.ranked.size(), b.ranked.size());
  EXPECT_GT(a.ranked.size(), 100u);
  for (std::size_t i = 0; i < a.ranked.size(); ++i)
    ASSERT_EQ(key(a.ranked[i]), key(b.ranked[i])) << "rank " << i;
  ASSERT_EQ(a.smallest_infeasible.has_value(), b.smallest_infeasible.has_value());
  if (a.smallest_infeasible) {
    EXPECT_EQ(key(*a.smallest_infeasible), key(*b.smallest_infeasible));
  }
}

TEST(Search, RemembersThePlanThatCameClosestToFitting) {
  const SearchResult r = search_plans(tiny_space(8), toy_score);
  ASSERT_TRUE(r.smallest_infeasible.has_value());
  // The toy calls tp=1 pp=1 without recomputation infeasible; its memory 1e9 + 1e8 mbs - 1e7 zero
  // is least at micro-batch 1 with ZeRO 3.
  const auto& s = *r.smallest_infeasible;
  EXPECT_EQ(s.plan.tp, 1);
  EXPECT_EQ(s.plan.pp, 1);
  EXPECT_EQ(s.plan.micro_batch_size, 1);
  EXPECT_EQ(s.plan.zero_stage, 3);
  EXPECT_DOUBLE_EQ(s.score.peak_memory_bytes, 1e9 + 1e8 - 3e7);

  // A model whose weights alone never fit: every plan is pruned before scoring, and the least
  // static memory is reported.
  SearchSpace big = tiny_space(8);
  big.model = spec::load_model("llama3-405b");
  big.global_batch = 8;
  const SearchResult none = search_plans(big, toy_score);
  EXPECT_TRUE(none.ranked.empty());
  ASSERT_TRUE(none.smallest_infeasible.has_value());
  EXPECT_GT(none.smallest_infeasible->score.peak_memory_bytes, 80e9);
  EXPECT_EQ(none.candidates_evaluated, 0);
}

TEST(Search, AClosestPlanSkippedAsUnableToFitIsScoredWhenNothingFits) {
  // Nothing fits (every toy score is infeasible), and the bound says so for the plan needing the
  // least memory only (valid: it does not fit). The search skips that plan unscored, finds no
  // feasible plan, and then scores it: it is the closest to fitting, the one to report.
  const auto score = [](const spec::ParallelPlan& p) {
    CandidateScore c = toy_score(p);
    c.feasible = false;
    c.peak_memory_bytes += 100e9;
    return c;
  };
  SearchSpace s = tiny_space(8);
  s.keep = 5;
  const SearchResult plain = search_plans(s, score);  // no bounder: every plan scored
  ASSERT_TRUE(plain.smallest_infeasible);
  const std::string closest = key(*plain.smallest_infeasible);
  const spec::ParallelPlan closest_plan = plain.smallest_infeasible->plan;
  const ScorerFactory factory = [&] {
    PlanBounder bound = [&](const spec::ParallelPlan& p) {
      CandidateBound b;
      b.peak_memory_bytes = score(p).peak_memory_bytes;
      b.fits = !(p == closest_plan);
      return b;
    };
    return Scorer(score, bound);
  };
  const SearchResult r = search_plans(s, factory);
  EXPECT_TRUE(r.ranked.empty());
  ASSERT_TRUE(r.smallest_infeasible);
  EXPECT_EQ(key(*r.smallest_infeasible), closest);
  EXPECT_EQ(r.smallest_infeasible->score.peak_memory_bytes,
            plain.smallest_infeasible->score.peak_memory_bytes);
}

TEST(Search, AnExhaustiveSearchLeavesThePlansThatCannotFitUnscored) {
  // keep 0 scores every plan, except those whose bound already overflows the memory: they are
  // counted out of memory unscored, and the rest is ranked as without a bounder. The bound is
  // valid (it refuses infeasible plans only: those with micro-batches of 2 and 8) and tight in time
  // (each plan's own time), which branch and bound would prune by; keep 0 must not.
  SearchSpace s = tiny_space(8);
  s.keep = 0;
  const SearchResult plain = search_plans(s, toy_score);
  std::atomic<int> scored{0};
  const auto refused = [](const spec::ParallelPlan& p) {
    return !toy_score(p).feasible && p.micro_batch_size % 3 != 1;
  };
  const ScorerFactory factory = [&] {
    PlanScorer score = [&](const spec::ParallelPlan& p) {
      ++scored;
      return toy_score(p);
    };
    PlanBounder bound = [&](const spec::ParallelPlan& p) {
      CandidateBound b;
      b.iteration_time = toy_score(p).iteration_time;
      b.peak_memory_bytes = toy_score(p).peak_memory_bytes;
      b.fits = !refused(p);
      return b;
    };
    return Scorer(score, bound);
  };
  const SearchResult r = search_plans(s, factory);
  for (const ScoredPlan& c : plain.ranked) EXPECT_FALSE(refused(c.plan)) << key(c);
  ASSERT_TRUE(plain.smallest_infeasible);
  EXPECT_FALSE(refused(plain.smallest_infeasible->plan));  // the closest one is still scored
  EXPECT_EQ(key(*r.smallest_infeasible), key(*plain.smallest_infeasible));
  EXPECT_EQ(plain.candidates_evaluated - r.candidates_evaluated, 8);  // 2 sizes x 4 ZeRO stages
  EXPECT_EQ(scored.load(), r.candidates_evaluated);
  EXPECT_EQ(r.pruned, plain.pruned);  // out of memory either way
  ASSERT_EQ(r.ranked.size(), plain.ranked.size());
  for (std::size_t i = 0; i < r.ranked.size(); ++i)
    ASSERT_EQ(key(r.ranked[i]), key(plain.ranked[i])) << "rank " << i;
  ASSERT_EQ(r.pareto.size(), plain.pareto.size());
  for (std::size_t i = 0; i < r.pareto.size(); ++i)
    EXPECT_EQ(key(r.pareto[i]), key(plain.pareto[i])) << "front " << i;
}

TEST(Search, RedistributedSplitMatchesAHandCalculation) {
  // 32 layers, 4 stages, the output layer worth 6.6 layers: 38.6 / 4 = 9.65 per stage; the first
  // stage takes 10, the last 9.65 - 6.6 = 3.05 -> 3, the middle two share the other 19.
  EXPECT_EQ(redistributed_layer_split(32, 4, 0.0, 6.6), (std::vector<int>{10, 10, 9, 3}));
  EXPECT_EQ(redistributed_layer_split(8, 2, 0.0, 2.0), (std::vector<int>{5, 3}));
  EXPECT_EQ(redistributed_layer_split(4, 4, 0.0, 40.0), (std::vector<int>{4, 0, 0, 0}));
  for (int pp : {2, 3, 5, 8}) {
    const auto split = redistributed_layer_split(61, pp, 0.5, 7.3);
    int sum = 0;
    for (int n : split) sum += n;
    EXPECT_EQ(sum, 61) << "pp=" << pp;
  }
  // GPT-style output layer in layer units: 6 V / (72 h + 6 s).
  spec::ModelSpec m = spec::load_model("tiny");  // V 512, h 64, s 32
  EXPECT_NEAR(output_layer_in_layers(m), 6.0 * 512 / (72.0 * 64 + 6.0 * 32), 1e-12);
}

TEST(Search, NoFactorisationNamesWhy) {
  SearchSpace s = tiny_space(3);
  s.model.layers = 2;
  s.global_batch = 4;
  try {
    search_plans(s, toy_score);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no valid factorisation of 3 GPUs"), std::string::npos) << m;
    EXPECT_NE(m.find("tp does not divide the attention heads"), std::string::npos) << m;
    EXPECT_NE(m.find("pp exceeds the layers"), std::string::npos) << m;
  }
  s = tiny_space(8);
  s.global_batch = 0;
  EXPECT_THROW(search_plans(s, toy_score), InputError);
}

TEST(Search, EvaluatorErrorsArePrunedAndCancelStopsEarly) {
  SearchSpace s = tiny_space(8);
  const SearchResult r = search_plans(s, [](const spec::ParallelPlan& p) {
    if (p.schedule == "zb-v")
      throw ScheduleError("zb-v needs " + std::to_string(p.microbatches) + " micro-batches");
    return toy_score(p);
  });
  EXPECT_GT(r.pruned.at("schedule: zb-v needs N micro-batches"), 0);

  std::atomic<bool> cancel{false};
  std::atomic<int> calls{0};
  std::int64_t last_done = -1, last_total = -1;
  const SearchResult c = search_plans(
      s,
      [&](const spec::ParallelPlan& p) {
        if (++calls == 20) cancel = true;
        return toy_score(p);
      },
      [&](std::int64_t done, std::int64_t total) {
        last_done = done;
        last_total = total;
      },
      &cancel);
  EXPECT_TRUE(c.cancelled);
  EXPECT_LT(c.candidates_evaluated, r.candidates_evaluated);
  EXPECT_GE(c.candidates_evaluated, 1);
  // The last progress report of a cancelled search says how far it got, not 100%.
  EXPECT_GT(last_total, 0);
  EXPECT_LT(last_done, last_total);
}

}  // namespace
}  // namespace pipetune::tuner
