// The simulator's offload tier (KARMA: activations copied to host memory after their forward and
// back before their backward, tuner/sim/simulator.hpp) against timelines worked out by hand.
// Costs per chunk and micro-batch: F = 1, B = W = 1 (so BW = 2), copy c each way; no transfer
// cost. In 1F1B and GPipe every backward is a fused BW.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "support/schedule_helpers.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::sim {
namespace {

using schedule::CostTable;
using schedule::testing::params;
using schedule::testing::where;

constexpr double kEps = 1e-9;

CostTable offloading(int p, double c, bool copies_block_compute = false) {
  CostTable t = CostTable::uniform(p, 1.0, 1.0, 1.0);
  for (auto& s : t.stages) s.offload = c;
  t.copies_block_compute = copies_block_compute;
  return t;
}

SimResult run(const std::string& name, int p, int m, const CostTable& costs,
              std::vector<double> bytes = {}) {
  SimOptions o;
  o.activation_bytes_per_microbatch = std::move(bytes);
  return simulate(schedule::generate(params(name, p, m)), costs, o);
}

// Copy spans of one rank's offload lanes: (stream index 0 offload / 1 reload) -> spans.
std::map<int, std::vector<profiler::Span>> copy_spans(const SimResult& r, int rank) {
  std::map<int, std::vector<profiler::Span>> out;
  for (const auto& s : r.trace.spans) {
    const profiler::Lane& l = r.trace.lanes[static_cast<std::size_t>(s.lane)];
    if (l.rank == rank && l.stream == profiler::Stream::Offload) out[l.index].push_back(s);
  }
  return out;
}

TEST(OffloadSim, HiddenCopiesKeepTheIterationTime) {
  // A reload starts no later than c after the start of the op before its backward (that op
  // starts after the forward ended, whose offload took c), so with 2c below the shortest op it
  // ends before that op does: nothing waits, and 1F1B and GPipe keep (m + p - 1)(F + BW).
  for (const char* name : {"1f1b", "gpipe"})
    for (int p : {2, 4})
      for (int m : {4, 8}) {
        const SimResult r = run(name, p, m, offloading(p, 0.25));
        EXPECT_NEAR(r.iteration_time, 3.0 * (m + p - 1), kEps) << name << " " << where(p, m);
        for (const auto& st : r.stages)
          EXPECT_NEAR(st.copy_stall, 0.0, kEps)
              << name << " " << where(p, m) << " stage " << st.stage;
      }
}

TEST(OffloadSim, GpipeTwoStagesHoldsThreeOnTheDeviceInsteadOfFour) {
  // GPipe, p = 2, m = 4, c = 0.25 (without offload each stage peaks at m = 4).
  // Stage 0: F0..F3 at [0,4]; each offload [k+1, k+1.25]. BW0's reload prefetches from the start
  // of F3 (3): at t = 3 the device holds F3, F2 (its copy ends at 3.25) and the reloaded F0 = 3;
  // F1 and F2's copies then land on the host, F3's at 4.25: host F1, F2, F3 = 3 until BW1's
  // reload starts at BW0's start (7). Later each reload starts as the previous BW frees: 2.
  // Stage 1: F0..F3 at [1,5]; at t = 4 the device holds F3, F2 (until 4.25) and F0 = 3. F3's
  // copy ends at 5.25, after BW1's reload started at BW0's start (5): host F2, F3 = 2.
  const std::vector<double> bytes = {100.0, 10.0};
  const SimResult with = run("gpipe", 2, 4, offloading(2, 0.25), bytes);
  const SimResult without = run("gpipe", 2, 4, CostTable::uniform(2, 1, 1, 1), bytes);
  const double device[] = {3.0, 3.0}, host[] = {3.0, 2.0};
  EXPECT_NEAR(with.iteration_time, without.iteration_time, kEps);
  for (int r = 0; r < 2; ++r) {
    const auto i = static_cast<std::size_t>(r);
    SCOPED_TRACE("stage " + std::to_string(r));
    EXPECT_NEAR(without.stages[i].peak_activation_microbatches, 4.0, kEps);
    EXPECT_NEAR(with.stages[i].peak_activation_microbatches, device[i], kEps);
    EXPECT_NEAR(with.stages[i].peak_host_activation_microbatches, host[i], kEps);
    EXPECT_NEAR(with.stages[i].peak_activation_bytes, device[i] * bytes[i], kEps);
    EXPECT_NEAR(with.stages[i].peak_host_activation_bytes, host[i] * bytes[i], kEps);
    EXPECT_NEAR(without.stages[i].peak_host_activation_microbatches, 0.0, kEps);
  }
}

TEST(OffloadSim, OneFOneBTwoStagesOffloadsOnlyWhereABackwardDoesNotFollow) {
  // 1F1B, p = 2, m = 4, c = 0.25. Stage 1 runs F0 BW0 F1 BW1 ...: each forward's own backward
  // is next, so it keeps everything (peak 1, nothing on the host, no copy span). Stage 0 runs
  // F0 F1 BW0 F2 BW1 F3 BW2 BW3 and offloads all four; its peak stays p - r = 2 (F1 starts while
  // F0's copy runs; later each reload prefetches beside the forward before its backward), and
  // the host holds one micro-batch at a time: F1 from 2.25 until BW1's reload at F2's start (6).
  const SimResult r = run("1f1b", 2, 4, offloading(2, 0.25));
  EXPECT_NEAR(r.iteration_time, 15.0, kEps);
  EXPECT_NEAR(r.stages[0].peak_activation_microbatches, 2.0, kEps);
  EXPECT_NEAR(r.stages[0].peak_host_activation_microbatches, 1.0, kEps);
  EXPECT_NEAR(r.stages[1].peak_activation_microbatches, 1.0, kEps);
  EXPECT_NEAR(r.stages[1].peak_host_activation_microbatches, 0.0, kEps);
  EXPECT_EQ(copy_spans(r, 0)[0].size(), 4u);
  EXPECT_EQ(copy_spans(r, 0)[1].size(), 4u);
  EXPECT_TRUE(copy_spans(r, 1).empty()) << "stage 1 has an offload lane";
}

TEST(OffloadSim, SlowCopiesStallTheBackwardsOfOneStage) {
  // One stage, GPipe, m = 4, c = 3: F_k at [k, k+1]; the offload stream runs F0..F3's copies
  // back to back: [1,4] [4,7] [7,10] [10,13].
  //   BW0: reload from max(F0's copy end 4, F3's start 3) = 4 to 7; BW0 [7, 9]   (waits 3)
  //   BW1: reload from max(stream 7, copy end 7, BW0's start 7) to 10; BW1 [10, 12] (waits 1)
  //   BW2: reload from max(10, 10, BW1's start 10) to 13; BW2 [13, 15]             (waits 1)
  //   BW3: reload max(13, 13, 13) = 13 to 16; BW3 [16, 18]                          (waits 1)
  // Iteration 18 = 4 (F + BW) + 6 of stall. Nothing leaves the device before F3 starts (peak
  // m = 4), and each copy lands on the host as its reload starts (host peak 0).
  const SimResult r = run("gpipe", 1, 4, offloading(1, 3.0));
  EXPECT_NEAR(r.iteration_time, 18.0, kEps);
  EXPECT_NEAR(r.stages[0].copy_stall, 6.0, kEps);
  EXPECT_NEAR(r.stages[0].busy, 12.0, kEps);
  EXPECT_NEAR(r.stages[0].peak_activation_microbatches, 4.0, kEps);
  EXPECT_NEAR(r.stages[0].peak_host_activation_microbatches, 0.0, kEps);
  const auto spans = copy_spans(r, 0);
  const double reload_start[] = {4.0, 7.0, 10.0, 13.0};
  ASSERT_EQ(spans.at(1).size(), 4u);
  for (int k = 0; k < 4; ++k) {
    const auto& s = spans.at(1)[static_cast<std::size_t>(k)];
    EXPECT_EQ(s.microbatch, k);
    EXPECT_EQ(s.start_ns, std::llround(reload_start[k] * 1e9)) << "reload of micro-batch " << k;
    EXPECT_EQ(s.end_ns, std::llround((reload_start[k] + 3.0) * 1e9)) << "micro-batch " << k;
  }
}

TEST(OffloadSim, OneFOneBOnOneStageCopiesNothing) {
  // One stage of 1F1B is F0 BW0 F1 BW1 ...: every backward follows its own forward, so however
  // slow the copies are, the run is the one without offload, 4 (F + BW) = 12.
  const SimResult r = run("1f1b", 1, 4, offloading(1, 3.0));
  EXPECT_NEAR(r.iteration_time, 12.0, kEps);
  EXPECT_NEAR(r.stages[0].copy_stall, 0.0, kEps);
  EXPECT_TRUE(copy_spans(r, 0).empty());
}

TEST(OffloadSim, CopiesOnTheComputeStreamAddTwoCPerForwardBackwardPair) {
  // copies_block_compute, one stage, GPipe: each F is followed by its offload and each BW
  // preceded by its reload on the compute stream, so 4 (F + BW) + 4 * 2c. Each forward's copy
  // ends as the next forward starts: the device holds one micro-batch, the host the rest
  // (F0, F1, F2 until BW0's reload starts as F3's copy ends: 3).
  for (double c : {0.5, 2.0}) {
    const SimResult r = run("gpipe", 1, 4, offloading(1, c, true));
    EXPECT_NEAR(r.iteration_time, 12.0 + 4 * 2 * c, kEps) << "c=" << c;
    EXPECT_NEAR(r.stages[0].copy_stall, 4 * 2 * c, kEps) << "c=" << c;
    EXPECT_NEAR(r.stages[0].busy, 12.0, kEps) << "c=" << c;
    EXPECT_NEAR(r.stages[0].peak_activation_microbatches, 1.0, kEps) << "c=" << c;
    EXPECT_NEAR(r.stages[0].peak_host_activation_microbatches, 3.0, kEps) << "c=" << c;
  }
}

TEST(OffloadSim, TraceHasAnOffloadAndAReloadPerMicroBatchOnEachStage) {
  // GPipe offloads every forward (its backward never follows it directly for m > 1): m copies
  // out on lane (rank, Offload, 0) and m back on (rank, Offload, 1), each c long, after its F
  // and before its BW, named by micro-batch and chunk.
  const int p = 2, m = 4;
  const double c = 0.25;
  const SimResult r = run("gpipe", p, m, offloading(p, c));
  for (int rank = 0; rank < p; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::map<std::pair<profiler::SpanKind, int>, profiler::Span> compute;
    for (const auto& s : r.trace.spans)
      if (r.trace.lanes[static_cast<std::size_t>(s.lane)].rank == rank &&
          profiler::is_compute(s.kind))
        compute[{s.kind, s.microbatch}] = s;
    auto spans = copy_spans(r, rank);
    ASSERT_EQ(spans[0].size() + spans[1].size(), static_cast<std::size_t>(2 * m));
    for (int lane = 0; lane < 2; ++lane) {
      ASSERT_EQ(spans[lane].size(), static_cast<std::size_t>(m)) << "lane index " << lane;
      for (const auto& s : spans[lane]) {
        EXPECT_EQ(s.kind, lane == 0 ? profiler::SpanKind::Offload : profiler::SpanKind::Reload);
        EXPECT_EQ(s.chunk, 0);
        EXPECT_EQ(s.end_ns - s.start_ns, std::llround(c * 1e9));
        if (lane == 0)
          EXPECT_GE(s.start_ns, compute.at({profiler::SpanKind::F, s.microbatch}).end_ns);
        else
          EXPECT_LE(s.end_ns, compute.at({profiler::SpanKind::BW, s.microbatch}).start_ns);
      }
    }
  }
  // Without offload there is no such lane.
  const SimResult plain = run("gpipe", p, m, CostTable::uniform(p, 1, 1, 1));
  for (const auto& l : plain.trace.lanes) EXPECT_NE(l.stream, profiler::Stream::Offload) << l.name;
}

TEST(OffloadSim, EveryScheduleKeepsItsUnitsAndOrder) {
  // Any schedule: the copies only delay (never speed up) the run, a reload follows its offload,
  // and device + host hold at most what the run without offload holds on the device at its peak
  // plus what is in flight on the copy streams (bounded here by the micro-batches).
  for (const char* name : {"1f1b", "interleaved-1f1b", "zb-h1", "zb-v", "v-half", "gpipe"}) {
    schedule::GeneratorParams g = params(name, 4, 8);
    if (std::string(name) == "interleaved-1f1b") g.chunks = 2;
    const schedule::Schedule s = schedule::generate(g);
    for (double c : {0.1, 1.0, 4.0}) {
      SCOPED_TRACE(std::string(name) + " c=" + std::to_string(c));
      const SimResult without = simulate(s, CostTable::uniform(4, 1, 1, 1));
      const SimResult with = simulate(s, offloading(4, c));
      EXPECT_GE(with.iteration_time, without.iteration_time - kEps);
      for (std::size_t r = 0; r < with.stages.size(); ++r) {
        EXPECT_GE(with.stages[r].copy_stall, 0.0);
        EXPECT_LE(with.stages[r].peak_activation_microbatches,
                  without.stages[r].peak_activation_microbatches + kEps)
            << "stage " << r;
        EXPECT_LE(with.stages[r].peak_host_activation_microbatches, 8.0 + kEps) << "stage " << r;
      }
      for (int rank = 0; rank < 4; ++rank) {
        auto spans = copy_spans(with, rank);
        ASSERT_EQ(spans[0].size(), spans[1].size()) << "rank " << rank;
        std::map<std::pair<int, int>, std::int64_t> offload_end;
        for (const auto& o : spans[0]) offload_end[{o.microbatch, o.chunk}] = o.end_ns;
        for (const auto& l : spans[1])
          EXPECT_GE(l.start_ns, offload_end.at({l.microbatch, l.chunk})) << "rank " << rank;
      }
    }
  }
}

TEST(OffloadSim, RefusesANegativeOrNonFiniteCopyTime) {
  const schedule::Schedule s = schedule::generate(params("gpipe", 2, 2));
  for (double c :
       {-1.0, std::numeric_limits<double>::infinity(), std::numeric_limits<double>::quiet_NaN()}) {
    EXPECT_THROW(simulate(s, offloading(2, c)), InputError) << "offload " << c;
  }
}

}  // namespace
}  // namespace pipetune::sim
