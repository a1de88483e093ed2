// Overlapped pairs in the op IR (Op::overlaps_previous): what the validator accepts and refuses,
// that the executor starts a pair only once both inputs are there, and DualPipeV's pairs counted
// against its eight steps written out by hand (schedules.md a.10).
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/executor.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/validator.hpp"
#include "support/schedule_helpers.hpp"

namespace pipetune::schedule {
namespace {

std::string error_of(const Schedule& s) {
  try {
    validate(s);
  } catch (const ScheduleError& e) {  // DeadlockError too
    return e.what();
  }
  return "(no error)";
}

using testing::one_overlapped_pair;

TEST(OverlappedPair, AForwardWithAnIndependentBackwardIsValid) {
  EXPECT_EQ(error_of(one_overlapped_pair()), "(no error)");
  EXPECT_EQ(pair_label(one_overlapped_pair().ranks[0][2], one_overlapped_pair().ranks[0][3]),
            "F2.0&BW0.0");
}

TEST(OverlappedPair, TheValidatorNamesWhatIsWrongWithAPair) {
  {
    Schedule s = one_overlapped_pair();
    s.ranks[0][0].overlaps_previous = true;
    EXPECT_NE(error_of(s).find("rank 0 op 0 (F0.0): overlaps the op before it, but is first"),
              std::string::npos)
        << error_of(s);
  }
  {
    Schedule s = one_overlapped_pair();  // F1 & F2: two forwards
    s.ranks[0][2].overlaps_previous = true;
    s.ranks[0][3].overlaps_previous = false;
    EXPECT_NE(error_of(s).find("ops 1-2 (F1.0&F2.0): an overlapped pair is a forward (F) with a "
                               "backward (B or BW)"),
              std::string::npos)
        << error_of(s);
  }
  {
    Schedule s = one_overlapped_pair();  // F2 & BW0 & BW1: three in a row
    s.ranks[0][4].overlaps_previous = true;
    EXPECT_NE(error_of(s).find("pairs, not runs of three"), std::string::npos) << error_of(s);
  }
  {
    Schedule s = one_overlapped_pair();  // rank 1: F0 & BW0, whose loss needs that forward
    s.ranks[1][1].overlaps_previous = true;
    EXPECT_NE(error_of(s).find("rank 1 ops 0-1 (F0.0&BW0.0): the second op needs the first "
                               "one's F(g1, mb0), so they cannot run together"),
              std::string::npos)
        << error_of(s);
  }
  {
    // Rank 0 pairs F1 with BW0, rank 1 BW0 with F1: each pair waits for the other's product.
    Schedule s = one_overlapped_pair();
    s.ranks[0] = {{OpKind::F, 0, 0}, {OpKind::F, 0, 1},  {OpKind::BW, 0, 0, true},
                  {OpKind::F, 0, 2}, {OpKind::BW, 0, 1}, {OpKind::BW, 0, 2}};
    s.ranks[1][2].overlaps_previous = true;  // BW0 & F1
    const std::string e = error_of(s);
    EXPECT_NE(e.find("deadlock"), std::string::npos) << e;
    EXPECT_NE(e.find("F1.0&BW0.0"), std::string::npos) << e;
    EXPECT_NE(e.find("BW0.0&F1.0"), std::string::npos) << e;
  }
}

// Hooks that record when each op started: a pair's ops start when the later of its two inputs is
// there, whatever the order they come in.
struct StartTimes {
  double op(int rank, std::size_t, const Op& op, const Requirement&, double req_time) {
    const double start = std::max(free[static_cast<std::size_t>(rank)], req_time);
    free[static_cast<std::size_t>(rank)] = start + 1.0;
    starts.push_back(std::to_string(rank) + ":" + op_label(op) + "@" + std::to_string(start));
    return start + 1.0;
  }
  std::array<double, 2> pair(int rank, std::size_t, const Op& a, const Requirement&, double a_time,
                             const Op& b, const Requirement&, double b_time) {
    const double start = std::max({free[static_cast<std::size_t>(rank)], a_time, b_time});
    free[static_cast<std::size_t>(rank)] = start + 2.0;
    starts.push_back(std::to_string(rank) + ":" + pair_label(a, b) + "@" + std::to_string(start));
    return {start + 1.0, start + 2.0};
  }
  double barrier(const Event&, double t) { return t; }
  void wait(int, double) {}
  std::vector<double> free = std::vector<double>(2, 0.0);
  std::vector<std::string> starts;
};

TEST(OverlappedPair, TheExecutorStartsAPairWhenBothInputsAreThere) {
  StartTimes hooks;
  execute(one_overlapped_pair(), hooks);
  // Rank 0: F0 0-1, F1 1-2; rank 1: F0 1-2, BW0 2-3. The pair's F2 needs nothing, its BW0 the
  // gradient ready at 3: the pair starts at 3, not at 2.
  // (The executor runs a rank until it blocks, so rank 1 gets to BW1 before rank 0's pair.)
  const std::vector<std::string> want = {
      "0:F0.0@0.000000", "0:F1.0@1.000000",  "1:F0.0@1.000000",       "1:BW0.0@2.000000",
      "1:F1.0@3.000000", "1:BW1.0@4.000000", "0:F2.0&BW0.0@3.000000", "0:BW1.0@5.000000",
      "1:F2.0@5.000000", "1:BW2.0@6.000000", "0:BW2.0@7.000000"};
  EXPECT_EQ(hooks.starts, want);
}

// DualPipeV's pairs are its "F & B" steps: step 4 twice per iteration (less the turn of the V's
// first, which DualPipeV runs apart), step 5 once. Each is a chunk's F with the other chunk's
// fused backward, of other micro-batches.
TEST(OverlappedPair, DualPipeVPairsAreItsFAndBSteps) {
  for (int p : {1, 2, 3, 4, 8})
    for (int m : {2 * p, 2 * p + 3, 4 * p}) {
      SCOPED_TRACE(testing::where(p, m));
      const Schedule s = generate(testing::params("dualpipe-v", p, m));
      for (int r = 0; r < p; ++r) {
        const auto& ops = s.ranks[static_cast<std::size_t>(r)];
        int pairs = 0;
        for (std::size_t i = 0; i < ops.size(); ++i) {
          if (!ops[i].overlaps_previous) continue;
          ++pairs;
          const Op& f = ops[i - 1];
          const Op& b = ops[i];
          EXPECT_EQ(f.kind, OpKind::F) << pair_label(f, b);
          EXPECT_EQ(b.kind, OpKind::BW) << pair_label(f, b);
          EXPECT_NE(f.chunk, b.chunk) << pair_label(f, b);
        }
        const int step4 = m - 2 * p + r + 1, step5 = p - r - 1;
        EXPECT_EQ(pairs, 2 * step4 + step5 - (r == p - 1 ? 1 : 0)) << "rank " << r;
      }
    }
}

}  // namespace
}  // namespace pipetune::schedule
