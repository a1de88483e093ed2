// ZeRO-2 and 3 (zero_stage = 2: gradients sharded over DP as well as the optimizer state; 3: the
// values too) on the CPU engine, beyond the parallel-equivalence matrix's training against the
// single-rank run (plan_matrix.hpp: dp2_zero2, dp3_zero2, ..., dp3_zero3, moe_ep2_dp4_zero3). In
// closed form from the model's shapes:
//  - what a rank keeps through the iteration: its shard of each unit's gradient (a layer, a
//    vocabulary table, the final LayerNorm), each unit padded to a multiple of the DP group, the
//    Adam moments of the same elements and, under ZeRO-3, the values of the same elements;
//  - a unit's full gradient (and under ZeRO-3 its full values) is open only while its layer (or
//    table) computes (uses) it; a closed layer's buffer is kept for the next layer, so the peak
//    is the kept shards plus one layer (and a table or the final LayerNorm while it is open),
//    however many layers the rank holds;
//  - the memory ledger counts what the rank's storage holds: its allocator's peaks are the
//    ledger's;
//  - one reduce-scatter per unit computed and, under ZeRO-3, one all-gather per unit used, per
//    micro-batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/runtime/trainer.hpp"
#include "tests/engine/runtime/guarded_device.hpp"
#include "tests/engine/runtime/small_gelu_model.hpp"

namespace pipetune::runtime {
namespace {

// The small GELU model: hidden 32, FFN 64, vocabulary 61, sequence 16.
constexpr std::int64_t C = 32, F = 64, V = 61, T = 16;
constexpr std::int64_t kLayer = 2 * C + (3 * C * C + 3 * C) + (C * C + C) + 2 * C + (F * C + F) +
                                (C * F + C);  // ln1, qkv, proj, ln2, fc, mlp proj
constexpr std::int64_t kFloat = sizeof(float);
constexpr int kSteps = 2, kMicrobatches = 2;

TrainOptions options(int layers, int dp, int zero) {
  TrainOptions o;
  o.model = testing::small_gelu_model("zero", layers);
  o.plan.dp = dp;
  o.plan.zero_stage = zero;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = kMicrobatches;
  o.steps = kSteps;
  o.threads_per_rank = 1;
  return o;
}

std::int64_t shard(std::int64_t numel, int dp) {
  return (numel + dp - 1) / dp;
}

// The units of a one-stage rank: wte, wpe, the layers, lnf, head.
std::vector<std::int64_t> units(int layers) {
  std::vector<std::int64_t> u = {V * C, T * C};
  for (int l = 0; l < layers; ++l) u.push_back(kLayer);
  u.push_back(2 * C);
  u.push_back(V * C);
  return u;
}

class Zero2Kept : public ::testing::TestWithParam<int> {};

TEST_P(Zero2Kept, EachRankKeepsItsShardOfEveryUnitsGradientAndMoments) {
  const int dp = GetParam(), layers = 2;
  std::int64_t all = 0, kept = 0;
  for (std::int64_t n : units(layers)) all += n, kept += shard(n, dp);
  const TrainResult plain = train(options(layers, dp, 0));
  const TrainResult sharded = train(options(layers, dp, 2));
  for (int rank = 0; rank < dp; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    EXPECT_EQ(plain.ranks.at(rank).gradient_bytes, all * kFloat);
    EXPECT_EQ(sharded.ranks.at(rank).gradient_bytes, kept * kFloat);
    EXPECT_EQ(sharded.ranks.at(rank).optimizer_bytes, 2 * kept * kFloat);
    EXPECT_EQ(plain.ranks.at(rank).optimizer_bytes, 2 * all * kFloat);
  }
}

// dp=3 divides none of the units: each is padded.
INSTANTIATE_TEST_SUITE_P(Dp, Zero2Kept, ::testing::Values(2, 3),
                         [](const auto& info) { return "dp" + std::to_string(info.param); });

// A run with its trace (the memory samples and collective spans).
TrainResult traced(int layers, int dp, int zero) {
  TrainOptions o = options(layers, dp, zero);
  o.record_trace = true;
  return train(o);
}

// The highest balance of a memory category on rank 0, from the trace's samples.
std::int64_t peak(const TrainResult& r, profiler::MemoryCategory category) {
  std::int64_t p = 0;
  for (const profiler::MemorySample& s : r.trace.memory)
    if (s.rank == 0 && s.category == category) p = std::max(p, s.bytes);
  return p;
}

// The balance of a memory category on rank 0 at the end of the run.
std::int64_t last(const TrainResult& r, profiler::MemoryCategory category) {
  std::int64_t b = 0;
  for (const profiler::MemorySample& s : r.trace.memory)
    if (s.rank == 0 && s.category == category) b = s.bytes;
  return b;
}

TEST(Zero2Peak, AFullGradientLivesOnlyWhileItsLayerComputesIt) {
  const int dp = 3;
  for (int layers : {2, 4}) {
    SCOPED_TRACE(std::to_string(layers) + " layers");
    const TrainResult r = traced(layers, dp, 2);
    // Gradients: the layers' and the final LayerNorm's shards, one layer's full gradient (padded
    // to a multiple of 3; open, or kept for the next layer), and the final LayerNorm's while the
    // BW op computes it.
    const std::int64_t kept = layers * shard(kLayer, dp) + shard(2 * C, dp);
    const std::int64_t layer = dp * shard(kLayer, dp), lnf = dp * shard(2 * C, dp);
    EXPECT_EQ(peak(r, profiler::MemoryCategory::Gradients), (kept + layer + lnf) * kFloat);
    // At the end: the shards and the one layer buffer kept, which the ledger counts as held.
    EXPECT_EQ(last(r, profiler::MemoryCategory::Gradients), (kept + layer) * kFloat);
    // Vocabulary layers: the tables, their gradients' shards, and the embeddings' full gradients
    // (wte and wpe are computed together; the head's alone is smaller).
    const std::int64_t tables = 2 * V * C + T * C;
    const std::int64_t kept_tables = 2 * shard(V * C, dp) + shard(T * C, dp);
    const std::int64_t embeddings = dp * (shard(V * C, dp) + shard(T * C, dp));
    EXPECT_EQ(peak(r, profiler::MemoryCategory::VocabularyLayers),
              (tables + kept_tables + embeddings) * kFloat);
  }
}

// What rank 0's storage held at its peak, by category, and the run with its trace: on guarded
// device storage (host memory behind the device interface), its allocator read when the rank is
// done.
struct StoragePeaks {
  std::int64_t parameters = 0, gradients = 0;
  TrainResult run;  // with its trace
};
StoragePeaks storage_peaks(TrainOptions o) {
  StoragePeaks peaks;
  std::mutex mutex;
  o.record_trace = true;
  o.rank_device = testing::reporting_rank_devices([&](int rank, const tensor::DeviceAllocator& a) {
    if (rank != 0) return;
    std::lock_guard lock(mutex);
    peaks.parameters = a.peak_bytes(profiler::MemoryCategory::Parameters);
    peaks.gradients = a.peak_bytes(profiler::MemoryCategory::Gradients);
  });
  peaks.run = train(o);
  return peaks;
}

// The peak over rank 0's memory samples, replayed in order, of the sum of `categories`.
std::int64_t peak_of_sum(const TrainResult& r,
                         std::initializer_list<profiler::MemoryCategory> categories) {
  std::map<profiler::MemoryCategory, std::int64_t> balance;
  std::int64_t p = 0;
  for (const profiler::MemorySample& s : r.trace.memory) {
    if (s.rank != 0) continue;
    balance[s.category] = s.bytes;
    std::int64_t sum = 0;
    for (auto c : categories) sum += balance[c];
    p = std::max(p, sum);
  }
  return p;
}

// The ledger counts what the storage holds: under ZeRO-2 the allocator's gradient blocks at their
// peak are the ledger's gradients plus the vocabulary tables' gradients (the ledger counts those,
// with the tables' full values, as vocabulary layers), and both are the closed form.
TEST(ZeroAccounting, TheLedgerCountsWhatTheStorageHolds) {
  const int dp = 3, layers = 2;
  std::int64_t shards = 0;  // of every unit's gradient
  for (std::int64_t n : units(layers)) shards += shard(n, dp);
  const std::int64_t layer = dp * shard(kLayer, dp);
  // The embeddings' full gradients, opened together while the kept layer buffer is held (more
  // than the head's and the final LayerNorm's in BW).
  const std::int64_t embeddings = dp * (shard(V * C, dp) + shard(T * C, dp));

  TrainOptions o = options(layers, dp, 2);
  const StoragePeaks held = storage_peaks(o);
  EXPECT_EQ(held.gradients, (shards + layer + embeddings) * kFloat);
  const std::int64_t table_values = (2 * V * C + T * C) * kFloat;  // full under ZeRO-2
  EXPECT_EQ(peak_of_sum(held.run, {profiler::MemoryCategory::Gradients,
                                   profiler::MemoryCategory::VocabularyLayers}) -
                table_values,
            held.gradients);

  // ZeRO-3: the values alike (the embeddings' full values in F, the kept layer buffer held).
  o.plan.zero_stage = 3;
  const StoragePeaks held3 = storage_peaks(o);
  EXPECT_EQ(held3.parameters, (shards + layer + embeddings) * kFloat);
  EXPECT_EQ(held3.gradients, (shards + layer + embeddings) * kFloat);
  // The ledger's values and gradients together peak in the head's BW op: the head's and the
  // final LayerNorm's full values, and the head's full gradient (the final LayerNorm's gradient
  // is computed in a scope of its own), beside both kinds' shards and kept layer buffers.
  const std::int64_t head = dp * shard(V * C, dp), norm = dp * shard(2 * C, dp);
  EXPECT_EQ(peak_of_sum(held3.run,
                        {profiler::MemoryCategory::Parameters, profiler::MemoryCategory::Gradients,
                         profiler::MemoryCategory::VocabularyLayers}),
            (2 * (shards + layer + head) + norm) * kFloat);
}

// The spans of `kind` named `name`, by rank.
std::map<int, int> count_spans(const TrainResult& r, profiler::SpanKind kind,
                               const std::string& name) {
  std::map<int, int> n;
  for (const profiler::Span& s : r.trace.spans)
    if (s.kind == kind && r.trace.names.at(s.name) == name)
      ++n[r.trace.lanes.at(static_cast<std::size_t>(s.lane)).rank];
  return n;
}

TEST(Zero2Collectives, OneReduceScatterPerUnitComputedPerMicroBatch) {
  const int layers = 3;
  std::map<int, int> scatters = count_spans(traced(layers, 2, 2), profiler::SpanKind::ReduceScatter,
                                            "gradient reduce-scatter");
  // Per micro-batch (1F1B on one stage: BW ops): the head, each layer, the final LayerNorm, the
  // embeddings together.
  const int want = kSteps * kMicrobatches * (1 + layers + 1 + 1);
  EXPECT_EQ(scatters[0], want);
  EXPECT_EQ(scatters[1], want);
  // None without ZeRO-2.
  for (const profiler::Span& s : traced(layers, 2, 1).trace.spans)
    EXPECT_NE(s.kind, profiler::SpanKind::ReduceScatter);
}

class Zero3Kept : public ::testing::TestWithParam<int> {};

TEST_P(Zero3Kept, EachRankKeepsItsShardOfEveryUnitsValuesToo) {
  const int dp = GetParam(), layers = 2;
  std::int64_t kept = 0;
  for (std::int64_t n : units(layers)) kept += shard(n, dp);
  const TrainResult two = train(options(layers, dp, 2));
  const TrainResult three = train(options(layers, dp, 3));
  for (int rank = 0; rank < dp; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    // ZeRO-2 holds every unit whole, padded to a multiple of dp.
    EXPECT_EQ(two.ranks.at(rank).parameter_bytes, dp * kept * kFloat);
    EXPECT_EQ(three.ranks.at(rank).parameter_bytes, kept * kFloat);
    EXPECT_EQ(three.ranks.at(rank).gradient_bytes, kept * kFloat);
    EXPECT_EQ(three.ranks.at(rank).optimizer_bytes, 2 * kept * kFloat);
  }
  // The same training as ZeRO-2: the same sums in the same order, values gathered from the
  // shards the step updated.
  ASSERT_EQ(three.steps.size(), two.steps.size());
  for (std::size_t s = 0; s < two.steps.size(); ++s)
    EXPECT_EQ(three.steps[s].loss, two.steps[s].loss) << "step " << s + 1;
}

INSTANTIATE_TEST_SUITE_P(Dp, Zero3Kept, ::testing::Values(2, 3),
                         [](const auto& info) { return "dp" + std::to_string(info.param); });

// What a rank's shards hold goes in and out of full-model tensors: the final parameters of ZeRO-3
// are ZeRO-2's, bit for bit, and ZeRO-3 started from given parameters computes ZeRO-0's first
// loss from them, bit for bit (the same forward on the same values).
TEST(Zero3Parameters, FinalAndInitialParametersGoThroughTheShards) {
  const int dp = 3, layers = 2;
  TrainOptions o = options(layers, dp, 2);
  o.capture_parameters = true;
  const TrainResult two = train(o);
  o.plan.zero_stage = 3;
  const TrainResult three = train(o);
  ASSERT_EQ(three.final_parameters.size(), two.final_parameters.size());
  for (const auto& [name, want] : two.final_parameters) {
    const auto it = three.final_parameters.find(name);
    ASSERT_NE(it, three.final_parameters.end()) << name;
    ASSERT_EQ(it->second.numel(), want.numel()) << name;
    for (std::int64_t i = 0; i < want.numel(); ++i)
      ASSERT_EQ(it->second[i], want[i]) << name << " element " << i;
  }
  TrainOptions from = options(layers, dp, 0);
  from.initial_parameters = &two.final_parameters;
  const TrainResult plain = train(from);
  from.plan.zero_stage = 3;
  const TrainResult sharded = train(from);
  EXPECT_EQ(sharded.steps.at(0).loss, plain.steps.at(0).loss);
  EXPECT_NE(sharded.steps.at(0).loss, two.steps.at(0).loss) << "the given parameters were not used";
}

TEST(Zero3Peak, FullValuesLiveOnlyWhileTheirLayerUsesThem) {
  const int dp = 3;
  for (int layers : {2, 4}) {
    SCOPED_TRACE(std::to_string(layers) + " layers");
    const TrainResult r = traced(layers, dp, 3);
    // Parameters: the layers' and the final LayerNorm's shards, one layer's full values (open
    // or kept), and the final LayerNorm's while an op uses them. The same for the gradients.
    const std::int64_t kept = layers * shard(kLayer, dp) + shard(2 * C, dp);
    const std::int64_t layer = dp * shard(kLayer, dp), lnf = dp * shard(2 * C, dp);
    for (auto category :
         {profiler::MemoryCategory::Parameters, profiler::MemoryCategory::Gradients}) {
      EXPECT_EQ(peak(r, category), (kept + layer + lnf) * kFloat);
      EXPECT_EQ(last(r, category), (kept + layer) * kFloat);
    }
    // Vocabulary layers: the tables' values and gradients as shards, and at most the head's
    // full values and full gradient at once (the BW op's output layer: 2 x 61 x 32 padded).
    const std::int64_t kept_tables = 2 * (2 * shard(V * C, dp) + shard(T * C, dp));
    EXPECT_EQ(peak(r, profiler::MemoryCategory::VocabularyLayers),
              (kept_tables + 2 * dp * shard(V * C, dp)) * kFloat);
  }
}

TEST(Zero3Collectives, OneAllGatherPerUnitUsedPerMicroBatch) {
  const int layers = 3;
  const TrainResult r = traced(layers, 2, 3);
  std::map<int, int> gathers =
      count_spans(r, profiler::SpanKind::AllGather, "parameter all-gather");
  std::map<int, int> scatters =
      count_spans(r, profiler::SpanKind::ReduceScatter, "gradient reduce-scatter");
  // Per micro-batch: the forward gathers the embeddings, each layer, and the final LayerNorm with
  // the head; the backward (BW) the head with the final LayerNorm and each layer again.
  const int per_microbatch = (1 + layers + 1) + (1 + layers);
  for (int rank : {0, 1}) {
    EXPECT_EQ(gathers[rank], kSteps * kMicrobatches * per_microbatch);
    EXPECT_EQ(scatters[rank], kSteps * kMicrobatches * (1 + layers + 1 + 1));
  }
}

}  // namespace
}  // namespace pipetune::runtime
