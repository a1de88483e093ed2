// The search space's own rules: each list names an entry once (a repeated one would
// score its plans twice), a combination that cannot exist is counted with its reason rather
// than dropped without one, and ZeRO stages 0 to 3 are all searched where data parallelism can
// shard.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "engine/errors.hpp"
#include "engine/spec/load.hpp"
#include "tuner/search/search.hpp"

namespace pipetune::tuner {
namespace {

SearchSpace tiny_space() {
  SearchSpace s;
  s.model = spec::load_model("tiny");  // 8 layers, 4 heads
  s.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  s.global_batch = 16;
  s.threads = 2;
  return s;
}

CandidateScore feasible(const spec::ParallelPlan& p) {
  CandidateScore c;
  c.feasible = true;
  c.iteration_time = 1.0 + p.zero_stage;
  c.tokens_per_s = 1.0 / c.iteration_time;
  c.peak_memory_bytes = 1e9;
  return c;
}

std::string error_of(const SearchSpace& s) {
  try {
    (void)search_plans(s, feasible);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(SearchSpaceRules, ARepeatedEntryOfAnyListIsRefusedByName) {
  SearchSpace s = tiny_space();
  s.schedules = {"1f1b", "gpipe", "1f1b"};
  EXPECT_EQ(error_of(s), "schedules: '1f1b' is listed twice");
  s = tiny_space();
  s.vocab_modes = {"redis", "redis"};
  EXPECT_EQ(error_of(s), "vocabulary modes: 'redis' is listed twice");
  s = tiny_space();
  s.micro_batch_sizes = {2, 1, 2};
  EXPECT_EQ(error_of(s), "micro-batch sizes: '2' is listed twice");
  s = tiny_space();
  s.recomputes = {spec::Recompute::Full, spec::Recompute::Full};
  EXPECT_EQ(error_of(s), "recomputation modes: 'full' is listed twice");
  s = tiny_space();
  s.zero_stages = {3, 3};
  EXPECT_EQ(error_of(s), "ZeRO stages: '3' is listed twice");
}

TEST(SearchSpaceRules, AnImpossibleCombinationIsCountedWithItsReason) {
  SearchSpace s = tiny_space();
  s.schedules = {"zb-v"};
  s.vocab_modes = {"vocab-1"};
  const SearchResult r = search_plans(s, feasible);
  EXPECT_TRUE(r.ranked.empty());
  EXPECT_GT(r.pruned.at("zb-v does not support vocab-1"), 0);
  EXPECT_GT(r.pruned.at("vocab-1 needs a pipeline (pp > 1)"), 0);
  s.vocab_modes = {"redis"};
  const SearchResult redis = search_plans(s, feasible);
  EXPECT_GT(redis.pruned.at("redis needs one layer group per stage (zb-v has more)"), 0);
  // Every mode (none named) is each mode where it can exist: nothing to count.
  s.vocab_modes.clear();
  const SearchResult every = search_plans(s, feasible);
  EXPECT_FALSE(every.ranked.empty());
  EXPECT_EQ(every.pruned.count("zb-v does not support vocab-1"), 0u);
  std::set<std::string> labels;
  for (const ScoredPlan& c : every.ranked) labels.insert(c.vocab_label);
  EXPECT_EQ(labels, (std::set<std::string>{"none"}));  // zb-v supports no vocabulary mode
}

TEST(SearchSpaceRules, EveryZeroStageIsSearchedWhereDataParallelismShards) {
  const SearchResult r = search_plans(tiny_space(), feasible);
  std::map<int, int> by_stage, per_group_by_stage;
  for (const ScoredPlan& c : r.ranked) {
    ++by_stage[c.plan.zero_stage];
    if (spec::reduces_per_group(c.plan)) ++per_group_by_stage[c.plan.zero_stage];
    if (c.plan.dp == 1) {
      EXPECT_EQ(c.plan.zero_stage, 0);
    }
  }
  for (int z : {0, 1, 2, 3}) EXPECT_GT(by_stage[z], 0) << "ZeRO " << z;
  // Each plan with dp > 1 is there at every stage, but for ZeRO-1 with layer-group reductions
  // (refused: its shards cross the groups); ZeRO-2 and 3 hold the groups instead.
  EXPECT_EQ(per_group_by_stage[1], 0);
  EXPECT_GT(per_group_by_stage[2], 0);
  EXPECT_EQ(by_stage[1], by_stage[2] - per_group_by_stage[2]);
  EXPECT_EQ(by_stage[2], by_stage[3]);
}

}  // namespace
}  // namespace pipetune::tuner
