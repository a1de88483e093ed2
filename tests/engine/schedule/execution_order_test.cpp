// The recorded execution order and the lists' fingerprint against the schedules they describe.
#include "engine/schedule/execution_order.hpp"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/costs.hpp"
#include "engine/schedule/dependencies.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/planned_time.hpp"

namespace pipetune::schedule {
namespace {

Schedule generated(const char* name, VocabMode vocab, int p, int m) {
  GeneratorParams params;
  params.name = name;
  params.vocab = vocab;
  params.stages = p;
  params.microbatches = m;
  return generate(params);
}

TEST(ExecutionOrder, EveryOpOnceAfterItsInputAndItsRanksOpBefore) {
  // Checked against the schedule's own lists and dependencies, independently of the executor:
  // each rank's ops appear in list order, each op after the op (or barrier) it needs, and each
  // barrier completes once, at its p-th arrival, before any op that needs it.
  const std::pair<const char*, VocabMode> cases[] = {
      {"1f1b", VocabMode::None},       {"1f1b", VocabMode::Vocab1},
      {"1f1b", VocabMode::Interlaced}, {"interleaved-1f1b", VocabMode::Vocab2},
      {"zb-v", VocabMode::None},       {"v-half", VocabMode::Vocab1},
      {"gpipe", VocabMode::None}};
  for (const auto& [name, vocab] : cases) {
    const Schedule s = generated(name, vocab, 4, 8);
    const ExecutionOrder order = record_execution_order(s);
    const std::string at = std::string(name) + " vocab " + std::to_string(static_cast<int>(vocab));
    EXPECT_EQ(order.fingerprint, op_fingerprint(s)) << at;
    std::vector<std::size_t> next(static_cast<std::size_t>(s.stages), 0);
    std::vector<char> done(order.events, 0);
    std::vector<int> arrivals(order.events, 0);
    std::size_t ops = 0;
    for (const ExecutionStep& st : order.steps) {
      const auto r = static_cast<std::size_t>(st.rank);
      if ((st.flags & ExecutionStep::kWait) != 0) {
        ASSERT_GE(st.input, 0) << at;
        EXPECT_TRUE(done[static_cast<std::size_t>(st.input)])
            << at << ": a wait before its barrier";
        continue;
      }
      ASSERT_LT(next[r], s.ranks[r].size()) << at;
      const Op& op = s.ranks[r][next[r]++];
      ++ops;
      EXPECT_EQ(st.kind, op.kind) << at << " rank " << r << " op " << next[r] - 1;
      const Requirement req = requirement_of(s, st.rank, op);
      EXPECT_EQ(st.input >= 0, req.present) << at;
      EXPECT_EQ((st.flags & ExecutionStep::kTransfer) != 0, req.present && req.transfer) << at;
      if (st.input >= 0) {
        EXPECT_TRUE(done[static_cast<std::size_t>(st.input)])
            << at << ": " << op_label(op) << " on rank " << r << " before its input";
      }
      const Production prod = production_of(s, st.rank, op);
      EXPECT_EQ(st.output >= 0, prod.present) << at;
      EXPECT_EQ((st.flags & ExecutionStep::kJoinsBarrier) != 0, prod.present && prod.joins_barrier)
          << at;
      if (st.output < 0) continue;
      const auto out = static_cast<std::size_t>(st.output);
      if (!prod.joins_barrier) {
        EXPECT_FALSE(done[out]) << at << ": an event produced twice";
        done[out] = 1;
        continue;
      }
      const bool last = ++arrivals[out] == s.stages;
      EXPECT_EQ((st.flags & ExecutionStep::kCompletesBarrier) != 0, last) << at;
      if (last) done[out] = 1;
    }
    EXPECT_EQ(ops, s.op_count()) << at;
  }
}

TEST(ExecutionOrder, ADeadlockedScheduleHasNone) {
  Schedule s = generated("gpipe", VocabMode::None, 2, 2);
  std::swap(s.ranks[1][0], s.ranks[1][2]);  // a backward before any forward
  EXPECT_THROW(record_execution_order(s), DeadlockError);
}

TEST(ExecutionOrder, TheFingerprintTellsChangedListsApart) {
  const Schedule s = generated("zb-h1", VocabMode::None, 4, 12);
  const std::uint64_t f = op_fingerprint(s);
  EXPECT_EQ(op_fingerprint(Schedule(s)), f);
  std::vector<std::pair<std::string, Schedule>> changed;
  // Two neighbours swapped at each of the four lanes' positions, and far apart.
  for (std::size_t i = 0; i < 5; ++i) {
    Schedule t = s;
    std::swap(t.ranks[2][i], t.ranks[2][i + 1]);
    changed.emplace_back("swapped at " + std::to_string(i), t);
  }
  Schedule t = s;
  std::swap(t.ranks[1][1], t.ranks[1][9]);
  changed.emplace_back("swapped 1 and 9", t);
  t = s;
  t.ranks[3].push_back(t.ranks[2].back());  // the last op moved to the next rank
  t.ranks[2].pop_back();
  changed.emplace_back("moved across ranks", t);
  for (auto field : {0, 1, 2, 3}) {
    t = s;
    Op& op = t.ranks[0][3];
    if (field == 0) op.kind = op.kind == OpKind::F ? OpKind::B : OpKind::F;
    if (field == 1) op.chunk = 1;
    if (field == 2) op.microbatch += 1;
    if (field == 3) op.overlaps_previous = true;
    changed.emplace_back("field " + std::to_string(field), t);
  }
  for (const auto& [what, lists] : changed) EXPECT_NE(op_fingerprint(lists), f) << what;
}

TEST(PlannedTimeAttach, ListsWithReductionsOrPairsKeepNone) {
  // The planned model has no reduction stream and no pairs: such lists are executed instead.
  Schedule s = generated("1f1b", VocabMode::None, 2, 4);
  const CostTable c = CostTable::uniform(2, 1.0, 1.0, 1.0);
  set_planned_time(s, c, 1.0);
  ASSERT_NE(s.planned_time, nullptr);
  Schedule reduced = s;
  add_gradient_reductions(reduced);
  set_planned_time(reduced, c, 1.0);
  EXPECT_EQ(reduced.planned_time, nullptr);
  Schedule paired = s;
  paired.ranks[0][1].overlaps_previous = true;
  set_planned_time(paired, c, 1.0);
  EXPECT_EQ(paired.planned_time, nullptr);
}

}  // namespace
}  // namespace pipetune::schedule
