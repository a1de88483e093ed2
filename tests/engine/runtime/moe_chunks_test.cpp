// The chunked MoE all-to-all (ParallelPlan::moe_chunks, engine/model/moe_exchange.hpp): every
// chunk count gives the one-chunk run's losses and gradients, in place and on the rank's
// collective stream, over ep, tp, pp, dp, token dropping and recomputation. Every row meets the
// same arithmetic, but a GEMM of fewer rows may take another of BLAS's kernels (OpenBLAS's small-
// matrix path), which sums in another order: equal within 1e-6 of each tensor's largest value
// (in most plans bit for bit). The stream runs the chunks (one all-to-all span per chunk each
// way), and the chunks split the slots as stated.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "engine/comm/forwarding_communicator.hpp"
#include "engine/model/moe_exchange.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/training_comparison.hpp"

namespace pipetune::runtime {
namespace {

struct Shape {
  std::string name;
  int tp = 1, pp = 1, dp = 2, ep = 2;
  double capacity_factor = 0.0;
  spec::Recompute recompute = spec::Recompute::None;
};

TrainOptions moe_run(const Shape& s, int chunks, bool stream) {
  TrainOptions o;
  o.model = spec::load_model("tiny-moe");  // 8 MoE layers of 4 experts, top-2
  o.plan.tp = s.tp;
  o.plan.pp = s.pp;
  o.plan.dp = s.dp;
  o.plan.ep = s.ep;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 2;
  o.plan.recompute = s.recompute;
  o.plan.moe_chunks = chunks;
  o.capacity_factor = s.capacity_factor;
  o.overlap_reductions = stream;
  o.steps = 3;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

class MoeChunks : public ::testing::TestWithParam<Shape> {};

TEST_P(MoeChunks, EveryChunkCountTrainsAsOneChunk) {
  const Shape& s = GetParam();
  const TrainResult one = train(moe_run(s, 1, true));
  for (const auto& [chunks, stream] :
       {std::pair{1, true}, std::pair{2, true}, std::pair{3, true}, std::pair{3, false}}) {
    SCOPED_TRACE(std::to_string(chunks) + " chunks " + (stream ? "on the stream" : "in place"));
    const TrainResult r = train(moe_run(s, chunks, stream));
    testing::expect_training_within(r, one, 1e-6);
    for (const RankSummary& rank : r.ranks)
      EXPECT_EQ(rank.moe_all_to_all_overlapped, stream && chunks > 1) << "rank";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Plans, MoeChunks,
    ::testing::Values(Shape{.name = "ep2_dp2"}, Shape{.name = "ep2_dp4", .dp = 4},
                      Shape{.name = "ep4_dp4", .dp = 4, .ep = 4},
                      Shape{.name = "tp2_ep2_dp2", .tp = 2}, Shape{.name = "pp2_ep2_dp2", .pp = 2},
                      Shape{.name = "ep2_dp2_dropping", .capacity_factor = 0.5},
                      Shape{.name = "ep2_dp2_full_recompute", .recompute = spec::Recompute::Full}),
    [](const auto& info) { return info.param.name; });

// Tutel's two-phase all-to-all (ParallelPlan::moe_a2a_node_ranks) moves the flat one's values
// to the same places: the same losses and gradients bit for bit, in place and on the stream, in
// one chunk and in three, over nodes of 2 EP ranks (ep 4, alone and beside TP).
TEST(MoeTwoPhaseAllToAll, TrainsAsTheFlatAllToAllBitForBit) {
  struct Case {
    Shape shape;
    int node_ranks;
  };
  for (const Case& c : {Case{Shape{.name = "ep4_dp4", .dp = 4, .ep = 4}, 2},
                        Case{Shape{.name = "tp2_ep4_dp4", .tp = 2, .dp = 4, .ep = 4}, 2}}) {
    for (const auto& [chunks, stream] :
         {std::pair{1, false}, std::pair{1, true}, std::pair{3, true}}) {
      SCOPED_TRACE(c.shape.name + ", " + std::to_string(chunks) + " chunks " +
                   (stream ? "on the stream" : "in place"));
      const TrainResult flat = train(moe_run(c.shape, chunks, stream));
      TrainOptions two = moe_run(c.shape, chunks, stream);
      two.plan.moe_a2a_node_ranks = c.node_ranks;
      testing::expect_training_within(train(two), flat, 0.0);
    }
  }
}

// Each rank's communicator wrapped to count the all-to-alls per group name ("ep", "ep-node",
// "ep-cross"), over the CPU device.
class AllToAllCounts {
 public:
  RankDeviceFactory devices() {
    return [this](comm::Communicator& comm, int threads) -> std::unique_ptr<RankDevice> {
      return std::make_unique<Device>(*this, comm, threads);
    };
  }
  std::map<std::string, int> by_group() const {
    std::lock_guard lock(mutex_);
    return counts_;
  }

 private:
  class Counting final : public comm::ForwardingCommunicator {
   public:
    Counting(AllToAllCounts& counts, comm::Communicator& inner)
        : ForwardingCommunicator(inner), counts_(counts) {}
    void all_to_all(const comm::ProcessGroup& group, std::span<const float> input,
                    std::span<float> output) override {
      {
        std::lock_guard lock(counts_.mutex_);
        ++counts_.counts_[group.name];
      }
      ForwardingCommunicator::all_to_all(group, input, output);
    }

   private:
    AllToAllCounts& counts_;
  };
  class Device final : public RankDevice {
   public:
    Device(AllToAllCounts& counts, comm::Communicator& comm, int threads)
        : comm_(counts, comm), inner_(make_cpu_rank_device(comm_, threads)) {}
    tensor::Backend& backend() override { return inner_->backend(); }
    tensor::DeviceAllocator* storage() override { return inner_->storage(); }
    comm::Communicator& communicator() override { return comm_; }

   private:
    Counting comm_;
    std::unique_ptr<RankDevice> inner_;
  };
  mutable std::mutex mutex_;
  std::map<std::string, int> counts_;
};

// The training runs above would also pass on the flat all-to-all: counted at the communicator,
// the two-phase run makes each of the flat run's all-to-alls on the EP group as one on the node's
// group and one across nodes, and none on the EP group itself.
TEST(MoeTwoPhaseAllToAll, RunsItsAllToAllsOverTheNodeAndCrossGroups) {
  const auto counted = [](int node_ranks) {
    AllToAllCounts counts;
    TrainOptions o = moe_run(Shape{.name = "ep4_dp4", .dp = 4, .ep = 4}, 1, false);
    o.steps = 1;
    o.plan.moe_a2a_node_ranks = node_ranks;
    o.rank_device = counts.devices();
    train(o);
    return counts.by_group();
  };
  const std::map<std::string, int> flat = counted(0), two = counted(2);
  ASSERT_GT(flat.count("ep"), 0u);
  EXPECT_EQ(flat.count("ep-node"), 0u);
  EXPECT_EQ(two.count("ep"), 0u);
  ASSERT_EQ(two.count("ep-node"), 1u);
  EXPECT_EQ(two.at("ep-node"), flat.at("ep"));
  EXPECT_EQ(two.at("ep-cross"), flat.at("ep"));
}

// On the stream, each MoE layer's dispatch and combine are one all-to-all per chunk each way, in
// the forward and again in the backward, every micro-batch: the spans the stream's thread timed.
TEST(MoeChunksTrace, TheStreamRunsOneAllToAllPerChunkEachWay) {
  TrainOptions o = moe_run(Shape{.name = "ep2_dp2"}, 4, true);
  o.steps = 1;
  o.record_trace = true;
  o.capture_gradients = false;
  const TrainResult r = train(o);
  std::vector<int> per_rank(2, 0);  // dp 2
  for (const profiler::Span& span : r.trace.spans)
    if (span.kind == profiler::SpanKind::AllToAll)
      ++per_rank[static_cast<std::size_t>(r.trace.lanes[static_cast<std::size_t>(span.lane)].rank)];
  // 8 layers x 2 micro-batches x (forward + backward) x 2 ways x 4 chunks.
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_EQ(per_rank[static_cast<std::size_t>(rank)], 8 * 2 * 2 * 2 * 4) << "rank " << rank;
}

TEST(MoeChunksSlots, NearEqualRunsTheLongerFirstAndNoMoreThanTheSlots) {
  const auto runs = [](std::int64_t cap, int k) {
    std::vector<std::pair<std::int64_t, std::int64_t>> out;
    for (const model::SlotChunk c : model::slot_chunks(cap, k)) out.emplace_back(c.lo, c.n);
    return out;
  };
  using Runs = std::vector<std::pair<std::int64_t, std::int64_t>>;
  EXPECT_EQ(runs(10, 3), (Runs{{0, 4}, {4, 3}, {7, 3}}));
  EXPECT_EQ(runs(8, 1), (Runs{{0, 8}}));
  EXPECT_EQ(runs(2, 5), (Runs{{0, 1}, {1, 1}}));
}

}  // namespace
}  // namespace pipetune::runtime
