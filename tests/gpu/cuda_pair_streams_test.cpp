// DualPipeV's overlapped pairs ("F & B", schedule::Op::overlaps_previous) on a GPU rank's two
// streams (CudaRankDevice: the second op on CudaBackend's second stream, ordered by events)
// against the same run with every pair's ops one after the other on the rank's one stream
// (TrainOptions::overlap_pairs = false).
//
// The reference is exact: each kernel computes the same bits whatever runs beside it (fixed
// reduction orders, no atomics, the same cuBLASLt algorithm for the same GEMM), so any difference
// is a race between the streams (a buffer one stream frees while the other's kernels use it, a
// scratch shared by both) or a missing order (the second op starting before its input was there).
// Against the CPU single-rank run the same plans are in cuda_train_test's matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "engine/cuda/cuda_rank_device.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/plan_matrix.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda {
namespace {

using pipetune::testing::PlanCase;

PlanCase plan_named(const std::string& name) {
  for (const PlanCase& c : pipetune::testing::plans_against_the_cpu())
    if (c.name == name) return c;
  ADD_FAILURE() << "no plan " << name << " in the matrix";
  return {};
}

runtime::TrainOptions options_for(const PlanCase& c, bool overlap_pairs) {
  runtime::TrainOptions o;
  o.model = spec::load_model(c.model);
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = c.microbatches;
  o.steps = 3;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 120;
  pipetune::testing::apply_plan(c, o);
  o.rank_device = single_gpu_rank_devices();
  o.overlap_pairs = overlap_pairs;
  return o;
}

class CudaPairStreams : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaPairStreams, PairsOnTwoStreamsEqualTheSerialRunBitForBit) {
  PIPETUNE_REQUIRE_GPU();
  const PlanCase c = plan_named(GetParam());
  const runtime::TrainResult serial = runtime::train(options_for(c, false));
  const runtime::TrainResult paired = runtime::train(options_for(c, true));

  for (const runtime::RankSummary& r : serial.ranks)
    EXPECT_EQ(r.pairs_run_at_once, 0) << "rank " << r.rank << " with overlap_pairs off";
  for (const runtime::RankSummary& r : paired.ranks)
    EXPECT_GT(r.pairs_run_at_once, 0) << "rank " << r.rank << " ran no pair on two streams";

  ASSERT_EQ(paired.steps.size(), serial.steps.size());
  for (std::size_t s = 0; s < serial.steps.size(); ++s)
    EXPECT_EQ(paired.steps[s].loss, serial.steps[s].loss) << "step " << s + 1;
  int differing = 0;
  for (const auto& [name, want] : serial.first_step_gradients) {
    const auto it = paired.first_step_gradients.find(name);
    ASSERT_NE(it, paired.first_step_gradients.end()) << name;
    std::int64_t first_bad = -1;
    for (std::int64_t i = 0; i < want.numel() && first_bad < 0; ++i)
      if (it->second[i] != want[i]) first_bad = i;
    if (first_bad >= 0) {
      ++differing;
      ADD_FAILURE() << name << "[" << first_bad << "]: two streams " << it->second[first_bad]
                    << ", one stream " << want[first_bad];
    }
  }
  EXPECT_EQ(differing, 0);
}

INSTANTIATE_TEST_SUITE_P(DualPipeV, CudaPairStreams,
                         ::testing::Values("pp2_dualpipev", "pp4_dualpipev", "tp2_pp2_dualpipev",
                                           "moe_ep2_dp2_pp2_dualpipev"));

// The second stream's kernels are captured and land on the rank that launched them, under the
// pair's ops: no record without its launch, and a rank whose pairs ran at once has kernels on
// two streams. Prints how long kernels of one rank's two streams ran at the same time.
TEST(CudaPairStreamsCapture, TheSecondStreamsKernelsLandUnderThePairsOps) {
  PIPETUNE_REQUIRE_GPU();
  runtime::TrainOptions o = options_for(plan_named("pp2_dualpipev"), true);
  o.steps = 2;
  o.capture_gradients = false;
  o.record_trace = true;
  const runtime::TrainResult r = runtime::train(o);
  ASSERT_GT(r.kernels.size(), 0u) << "no GPU activity captured";
  EXPECT_EQ(r.gpu_capture.without_launch, 0u);
  std::map<int, std::set<int>> streams_of_rank;
  std::map<int, std::vector<const profiler::KernelRecord*>> by_rank;
  for (const profiler::KernelRecord& k : r.kernels) {
    streams_of_rank[k.rank].insert(k.stream);
    by_rank[k.rank].push_back(&k);
  }
  ASSERT_EQ(streams_of_rank.size(), 2u);
  for (const auto& [rank, streams] : streams_of_rank)
    EXPECT_GE(streams.size(), 2u) << "rank " << rank << ": its pairs' second ops on no stream "
                                  << "of their own";
  // Time during which a rank had kernels running on two of its streams at once.
  for (auto& [rank, kernels] : by_rank) {
    std::int64_t together = 0;
    for (std::size_t i = 0; i < kernels.size(); ++i)
      for (std::size_t j = i + 1; j < kernels.size(); ++j) {
        const profiler::KernelRecord& a = *kernels[i];
        const profiler::KernelRecord& b = *kernels[j];
        if (a.stream == b.stream) continue;
        together += std::max<std::int64_t>(
            0, std::min(a.end_ns, b.end_ns) - std::max(a.start_ns, b.start_ns));
      }
    std::printf("rank %d: %zu records on %zu streams, %.3f ms with two streams' kernels running\n",
                rank, kernels.size(), streams_of_rank[rank].size(), together / 1e6);
  }
}

}  // namespace
}  // namespace pipetune::cuda
