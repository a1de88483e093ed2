// Tuner trials: a search is stored in one go under a new search id, and read back in order.
#include <gtest/gtest.h>

#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "store_test_support.hpp"

namespace pipetune::db {
namespace {

TrialRecord trial(double tokens, bool feasible) {
  TrialRecord t;
  t.plan_json = R"({"tp":2,"pp":4})";
  t.iteration_s = 1.0 / tokens;
  t.tokens_per_s = tokens;
  t.mfu = tokens / 1e6;
  t.peak_memory_bytes = static_cast<std::int64_t>(tokens * 1000);
  t.feasible = feasible;
  t.pruned_reason = feasible ? "" : "out of memory";
  return t;
}

TEST(StoreTrials, SearchesGetIncreasingIdsAndKeepTheirOrder) {
  testing::TempDir dir;
  Workspace ws(dir.file("w.db"), OpenMode::Create);
  EXPECT_EQ(ws.latest_search_id(), -1);
  const std::int64_t first = ws.add_search({trial(100, true), trial(50, false), trial(75, true)});
  const std::int64_t second = ws.add_search({trial(10, true)});
  EXPECT_EQ(second, first + 1);
  EXPECT_EQ(ws.latest_search_id(), second);
  const auto a = ws.trials(first);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0].tokens_per_s, 100);
  EXPECT_FALSE(a[1].feasible);
  EXPECT_EQ(a[1].pruned_reason, "out of memory");
  EXPECT_EQ(a[2].peak_memory_bytes, 75000);
  for (const auto& t : a) EXPECT_EQ(t.search_id, first);
  EXPECT_EQ(ws.trials(second).size(), 1u);

  TrialRecord bad = trial(1, true);
  bad.plan_json = "{not json";
  EXPECT_THROW(ws.add_search({trial(2, true), bad}), InputError);
  EXPECT_EQ(ws.latest_search_id(), second) << "a refused search stores nothing";
}

}  // namespace
}  // namespace pipetune::db
