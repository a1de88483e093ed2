// Sequence parallelism (the plan's sequence_parallel, Korthikanti et al. 2022) on the CPU engine,
// beyond the parallel-equivalence matrix's training against the single-rank run
// (plan_matrix.hpp: tp2_sp, tp2_pp2_sp_zbh1, tp2_pp2_sp_vocab1, tp4_dp2_sp, moe_tp2_ep2_dp2_sp):
//  - what a layer in flight keeps: the row-wise activations (block input, both LayerNorm outputs
//    and the attention residual, (N, C) each, and the LayerNorms' (N) statistics) are 1/tp of
//    the run without it, the rest as before;
//  - the collectives: per layer the forward all-gathers twice and reduce-scatters twice, the
//    backward all-gathers four times and reduce-scatters twice, as the tuner's cost model counts
//    them (tuner/cost/work.cpp), and the embedding, final LayerNorm and output layer add one of
//    each in each direction;
//  - a micro-batch whose rows tp does not divide is refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/small_gelu_model.hpp"

namespace pipetune::runtime {
namespace {

constexpr std::int64_t kBatch = 2, kSeq = 16, kHidden = 32;

TrainOptions options(int layers, int tp, bool sequence_parallel) {
  TrainOptions o;
  o.model = testing::small_gelu_model("sequence-parallel", layers);
  o.plan.tp = tp;
  o.plan.micro_batch_size = kBatch;
  o.plan.microbatches = 1;
  o.plan.sequence_parallel = sequence_parallel;
  o.steps = 1;
  o.threads_per_rank = 1;
  return o;
}

// What one more layer adds to TP rank 0's activation peak (one micro-batch: the end of the
// forward, where it holds every layer).
std::int64_t bytes_per_layer(int tp, bool sequence_parallel) {
  const auto peak = [&](int layers) {
    const TrainResult r = train(options(layers, tp, sequence_parallel));
    return r.ranks.at(0).peak_activation_bytes;
  };
  return (peak(4) - peak(2)) / 2;
}

class SequenceParallelMemory : public ::testing::TestWithParam<int> {};

TEST_P(SequenceParallelMemory, EachTpRankKeepsItsShareOfTheRowWiseActivations) {
  const int tp = GetParam();
  const std::int64_t N = kBatch * kSeq, C = kHidden;
  // x, ln1, x2, ln2 (N, C) and ln1's and ln2's mean and rstd (N).
  const std::int64_t row_wise = (4 * N * C + 4 * N) * static_cast<std::int64_t>(sizeof(float));
  EXPECT_EQ(bytes_per_layer(tp, false) - bytes_per_layer(tp, true), row_wise - row_wise / tp);
}

INSTANTIATE_TEST_SUITE_P(Tp, SequenceParallelMemory, ::testing::Values(2, 4),
                         [](const auto& info) { return "tp" + std::to_string(info.param); });

TEST(SequenceParallelCollectives, AllGathersAndReduceScattersAsTheCostModelCounts) {
  const int layers = 3, microbatches = 2;
  TrainOptions o = options(layers, 2, true);
  o.plan.microbatches = microbatches;
  o.record_trace = true;
  const TrainResult r = train(o);
  std::map<int, int> gathers, scatters;  // by rank
  for (const profiler::Span& s : r.trace.spans) {
    const int rank = r.trace.lanes.at(static_cast<std::size_t>(s.lane)).rank;
    if (s.kind == profiler::SpanKind::AllGather) ++gathers[rank];
    if (s.kind == profiler::SpanKind::ReduceScatter) ++scatters[rank];
  }
  // Per micro-batch: layers x (2 + 4) all-gathers, the final LayerNorm's output and the
  // embedding's gradient; layers x (2 + 2) reduce-scatters, the embedding's output and the final
  // LayerNorm's input gradient.
  const int want_gathers = microbatches * (layers * 6 + 2);
  const int want_scatters = microbatches * (layers * 4 + 2);
  for (int rank : {0, 1}) {
    EXPECT_EQ(gathers[rank], want_gathers) << "rank " << rank;
    EXPECT_EQ(scatters[rank], want_scatters) << "rank " << rank;
  }
  // Without sequence parallelism there are none (the TP sums are all-reduces).
  o.plan.sequence_parallel = false;
  const TrainResult plain = train(o);
  for (const profiler::Span& s : plain.trace.spans) {
    EXPECT_NE(s.kind, profiler::SpanKind::AllGather);
    EXPECT_NE(s.kind, profiler::SpanKind::ReduceScatter);
  }
}

TEST(SequenceParallelCollectives, RowsTpDoesNotDivideAreRefused) {
  TrainOptions o = options(2, 2, true);
  o.model = testing::small_gelu_model("odd-rows", 2, 15);
  o.plan.micro_batch_size = 1;
  try {
    train(o);
    FAIL() << "15 rows over tp=2 trained";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("15 rows over tp=2"), std::string::npos) << e.what();
  }
  o.plan.sequence_parallel = false;  // the same plan without it trains
  EXPECT_EQ(train(o).steps.size(), 1u);
}

}  // namespace
}  // namespace pipetune::runtime
