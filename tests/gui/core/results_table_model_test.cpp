// ResultsTableModel: rows, sorting by each column, the Pareto front and the pruned counts, on a
// hand-made search result (values known by construction) and on a real search (the front
// checked against the definition of dominance).
#include "gui/core/results_table_model.hpp"

#include <gtest/gtest.h>

#include <string>

#include "engine/spec/load.hpp"
#include "tuner/search/evaluator_scorer.hpp"

namespace pipetune::gui {
namespace {

tuner::ScoredPlan make(int tp, int pp, int dp, double iter_s, double tok_s, double mfu,
                       double mem) {
  tuner::ScoredPlan c;
  c.plan.tp = tp;
  c.plan.pp = pp;
  c.plan.dp = dp;
  c.vocab_label = "none";
  c.score.feasible = true;
  c.score.iteration_time = iter_s;
  c.score.tokens_per_s = tok_s;
  c.score.mfu = mfu;
  c.score.peak_memory_bytes = mem;
  return c;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Three plans: A fastest and biggest, B slower with less memory, C dominated by B.
tuner::SearchResult hand_result() {
  tuner::SearchResult r;
  r.ranked = {make(8, 1, 1, 0.5, 4000, 0.50, 60 * kGiB), make(4, 2, 1, 0.8, 2500, 0.31, 30 * kGiB),
              make(2, 4, 1, 0.9, 2200, 0.27, 40 * kGiB)};
  r.pareto = {r.ranked[1], r.ranked[0]};
  r.pruned = {{"out of memory", 7}, {"tp=3 does not divide heads=32", 12}, {"zb-v: needs", 1}};
  r.candidates_enumerated = 23;
  r.candidates_evaluated = 10;
  return r;
}

std::vector<std::string> column_text(const ResultsTableModel& m, int column) {
  std::vector<std::string> out;
  for (int r = 0; r < m.rowCount(); ++r)
    out.push_back(m.data(m.index(r, column)).toString().toStdString());
  return out;
}

TEST(ResultsTableModel, ShowsTheRankedPlans) {
  ResultsTableModel m;
  m.set_result(hand_result());
  ASSERT_EQ(m.rowCount(), 3);
  EXPECT_EQ(m.columnCount(), ResultsTableModel::ColumnCount);
  EXPECT_EQ(m.data(m.index(0, ResultsTableModel::Plan)).toString(),
            "tp=8 pp=1 dp=1 mbs=1 1f1b vocab=none recompute=none zero=0");
  EXPECT_EQ(column_text(m, ResultsTableModel::IterationTime),
            (std::vector<std::string>{"500 ms", "800 ms", "900 ms"}));
  EXPECT_EQ(column_text(m, ResultsTableModel::TokensPerS),
            (std::vector<std::string>{"4000", "2500", "2200"}));
  EXPECT_EQ(column_text(m, ResultsTableModel::Mfu),
            (std::vector<std::string>{"50.0%", "31.0%", "27.0%"}));
  EXPECT_EQ(column_text(m, ResultsTableModel::PeakMemory),
            (std::vector<std::string>{"60.00 GiB", "30.00 GiB", "40.00 GiB"}));
  EXPECT_EQ(m.headerData(ResultsTableModel::PeakMemory, Qt::Horizontal).toString(), "peak memory");
  EXPECT_EQ(m.candidates_enumerated(), 23);
}

TEST(ResultsTableModel, SortsByEveryColumn) {
  ResultsTableModel m;
  m.set_result(hand_result());
  auto tps = [&] { return column_text(m, ResultsTableModel::TokensPerS); };
  m.sort(ResultsTableModel::PeakMemory, Qt::AscendingOrder);
  EXPECT_EQ(tps(), (std::vector<std::string>{"2500", "2200", "4000"}));
  m.sort(ResultsTableModel::PeakMemory, Qt::DescendingOrder);
  EXPECT_EQ(tps(), (std::vector<std::string>{"4000", "2200", "2500"}));
  m.sort(ResultsTableModel::IterationTime, Qt::DescendingOrder);
  EXPECT_EQ(tps(), (std::vector<std::string>{"2200", "2500", "4000"}));
  m.sort(ResultsTableModel::Mfu, Qt::AscendingOrder);
  EXPECT_EQ(tps(), (std::vector<std::string>{"2200", "2500", "4000"}));
  m.sort(ResultsTableModel::TokensPerS, Qt::DescendingOrder);
  EXPECT_EQ(tps(), (std::vector<std::string>{"4000", "2500", "2200"}));
  // Plan labels sort as text: "tp=2..." < "tp=4..." < "tp=8...".
  m.sort(ResultsTableModel::Plan, Qt::AscendingOrder);
  EXPECT_EQ(tps(), (std::vector<std::string>{"2200", "2500", "4000"}));
  // Rows map back to the search's order.
  EXPECT_EQ(m.result_index(0), 2);
  EXPECT_EQ(m.row_of(0), 2);
  EXPECT_EQ(m.plan_at(0).plan.tp, 2);
}

TEST(ResultsTableModel, ParetoFrontAndPrunedCounts) {
  ResultsTableModel m;
  m.set_result(hand_result());
  const auto front = m.pareto_points();
  ASSERT_EQ(front.size(), 2u);
  EXPECT_EQ(front[0].index, 1);  // 30 GiB first
  EXPECT_EQ(front[1].index, 0);
  EXPECT_DOUBLE_EQ(front[0].peak_memory_bytes, 30 * kGiB);
  EXPECT_DOUBLE_EQ(front[1].tokens_per_s, 4000);
  EXPECT_EQ(m.points().size(), 3u);
  EXPECT_EQ(m.pruned_lines(), QStringList({"tp=3 does not divide heads=32: 12", "out of memory: 7",
                                           "zb-v: needs: 1"}));
}

bool dominates(const ResultPoint& a, const ResultPoint& b) {
  return a.tokens_per_s >= b.tokens_per_s && a.peak_memory_bytes <= b.peak_memory_bytes &&
         (a.tokens_per_s > b.tokens_per_s || a.peak_memory_bytes < b.peak_memory_bytes);
}

TEST(ResultsTableModel, RealSearchFrontIsTheNonDominatedSet) {
  tuner::SearchSpace space;
  space.model = spec::load_model("llama3-8b");
  space.cluster = spec::make_cluster(spec::load_hardware("h100-sxm"), 8);
  space.global_batch = 32;
  space.schedules = {"1f1b", "interleaved-1f1b", "zb-h1"};
  const tuner::SearchResult r =
      tuner::search_plans(space, tuner::evaluator_scorers(space.model, space.cluster));
  ResultsTableModel m;
  m.set_result(r);
  ASSERT_GT(m.rowCount(), 3);
  const auto all = m.points();
  const auto front = m.pareto_points();
  ASSERT_EQ(front.size(), r.pareto.size());
  std::vector<bool> on_front(all.size(), false);
  for (const auto& f : front) {
    on_front[static_cast<std::size_t>(f.index)] = true;
    for (const auto& p : all)
      EXPECT_FALSE(dominates(p, f)) << "front point " << f.index << " is dominated by " << p.index;
  }
  for (const auto& p : all) {
    if (on_front[static_cast<std::size_t>(p.index)]) continue;
    bool beaten = false;
    for (const auto& q : all)
      beaten = beaten || dominates(q, p) ||
               (q.index != p.index && on_front[q.index] && q.tokens_per_s == p.tokens_per_s &&
                q.peak_memory_bytes == p.peak_memory_bytes);
    EXPECT_TRUE(beaten) << "plan " << p.index << " is off the front but not dominated";
  }
}

}  // namespace
}  // namespace pipetune::gui
