// A search request as both front ends make it: its lists and limits are checked with the field
// and the rule, its target resolved into the space searched; and a search that finds nothing is
// explained with the smallest plan's memory or with every reason plans were pruned, counted.
#include "tuner/search/search_request.hpp"

#include <gtest/gtest.h>

#include <string>

#include "engine/spec/load.hpp"
#include "profiler/units.hpp"
#include "tuner/search/evaluator_scorer.hpp"

namespace pipetune::tuner {
namespace {

SearchRequest tiny_request() {
  SearchRequest r;
  r.target = {"tiny", "h100-sxm", 8, 0, 32, 32, ""};
  r.threads = 2;
  return r;
}

// The field and rule a request breaks, or "" when it is accepted.
std::string broken(const SearchRequest& r) {
  try {
    (void)search_space(r);
    return "";
  } catch (const SearchRequestError& e) {
    EXPECT_EQ(std::string(e.what()), e.field() + " " + e.rule());
    return e.field() + ": " + e.rule();
  }
}

TEST(SearchRequest, LimitsAndModesAreCheckedWithTheFieldAndTheRule) {
  SearchRequest r = tiny_request();
  EXPECT_EQ(broken(r), "");
  r.keep = -1;
  EXPECT_EQ(broken(r), "keep: must be >= 0 (got -1)");
  r = tiny_request();
  r.max_candidates = -5;
  EXPECT_EQ(broken(r), "max_candidates: must be >= 0");
  r = tiny_request();
  r.threads = -1;
  EXPECT_EQ(broken(r), "threads: must be >= 0");
  r = tiny_request();
  r.vocab_modes = {"redis", "zzz"};
  EXPECT_EQ(broken(r),
            "vocab_modes: names an unknown mode 'zzz' (valid: none, redis, auto, vocab-1, "
            "vocab-2, interlaced)");
  // An unknown schedule lists the valid ones; the target's errors name its field.
  r = tiny_request();
  r.schedules = {"2f2b"};
  try {
    (void)search_space(r);
    ADD_FAILURE() << "2f2b accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("2f2b"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1f1b"), std::string::npos) << e.what();
  }
  r = tiny_request();
  r.target.gpus = 0;
  try {
    (void)search_space(r);
    ADD_FAILURE() << "0 GPUs accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "gpus must be positive (got 0)");
  }
}

TEST(SearchRequest, TheSpaceIsTheRequestWithItsTargetResolved) {
  SearchRequest r = tiny_request();
  r.target.seq = 48;
  r.schedules = {"1f1b", "gpipe"};
  r.vocab_modes = {"none", "vocab-1"};
  r.max_candidates = 7;
  r.keep = 3;
  const SearchSpace s = search_space(r);
  EXPECT_EQ(s.model.name, spec::load_model("tiny").name);
  EXPECT_EQ(s.model.seq_len, 48);
  EXPECT_EQ(s.cluster.devices, 8);
  EXPECT_EQ(s.cluster.hardware.name, spec::load_hardware("h100-sxm").name);
  EXPECT_EQ(s.global_batch, 32);
  EXPECT_EQ(s.schedules, r.schedules);
  EXPECT_EQ(s.vocab_modes, r.vocab_modes);
  EXPECT_EQ(s.max_candidates, 7);
  EXPECT_EQ(s.keep, 3);
  EXPECT_EQ(s.threads, 2);
}

TEST(SearchRequest, APrunedSearchIsExplainedWithEveryReasonCounted) {
  const spec::ModelSpec model = spec::load_model("tiny");
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  SearchResult made;
  made.pruned = {{"a rare reason", 1}, {"tp does not divide the attention heads", 12}, {"z", 5}};
  EXPECT_EQ(no_feasible_plan_explanation(made, model, cluster),
            "no feasible plan for " + model.name + " on 8 x " + cluster.hardware.name +
                ": every plan was pruned (12 tp does not divide the attention heads; 5 z; 1 a "
                "rare reason)");

  // A real search that prunes everything: zb-v has no vocab-1, and without a pipeline no plan
  // has a vocabulary mode.
  SearchRequest r = tiny_request();
  r.schedules = {"zb-v"};
  r.vocab_modes = {"vocab-1"};
  const SearchSpace space = search_space(r);
  const SearchResult result = search_plans(space, evaluator_scorers(space.model, space.cluster));
  ASSERT_TRUE(result.ranked.empty());
  ASSERT_FALSE(result.smallest_infeasible);
  const std::string why = no_feasible_plan_explanation(result, space.model, space.cluster);
  EXPECT_EQ(why.rfind("no feasible plan for " + model.name + " on 8 x " + cluster.hardware.name +
                          ": every plan was pruned (",
                      0),
            0u)
      << why;
  for (const auto& [reason, n] : result.pruned)
    EXPECT_NE(why.find(std::to_string(n) + " " + reason), std::string::npos) << why;
  EXPECT_NE(why.find("zb-v does not support vocab-1"), std::string::npos) << why;
  EXPECT_NE(why.find("vocab-1 needs a pipeline (pp > 1)"), std::string::npos) << why;
}

TEST(SearchRequest, AnOutOfMemorySearchNamesTheSmallestPlan) {
  const spec::ModelSpec model = spec::load_model("tiny");
  const spec::ClusterSpec cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  SearchResult r;
  r.pruned = {{"out of memory", 40}};
  ScoredPlan smallest;
  smallest.plan.tp = 2;
  smallest.plan.pp = 4;
  smallest.plan.dp = 1;
  smallest.plan.schedule = "1f1b";
  smallest.vocab_label = "none";
  smallest.score.peak_memory_bytes = 3.0 * 1024 * 1024 * 1024;
  r.smallest_infeasible = smallest;
  const std::string why = no_feasible_plan_explanation(r, model, cluster);
  EXPECT_EQ(why, "no feasible plan for " + model.name + " on 8 x " + cluster.hardware.name +
                     ": the smallest plan needs 3.00 GiB per GPU (" +
                     plan_summary(smallest.plan, "none") + "), the device has " +
                     profiler::format_bytes(static_cast<double>(cluster.hardware.hbm_bytes)));
}

}  // namespace
}  // namespace pipetune::tuner
