// Offload (ParallelPlan::offload_activations and offload_optimizer, KARMA). References: the same
// run without offload (losses, first-step gradients and final parameters equal bit for bit: the
// values come back unchanged), on the CPU and on the emulated GPU rank (guarded_device.hpp), whose
// copies run later than issued, as a GPU's copy streams do, so a device buffer freed or reused
// before its copy finished would lose values; and the run without offload's memory: the host holds
// at its peak what the device held at its own (1F1B stage 0: two micro-batches), while the device's
// peak falls.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/model/buffer_cache.hpp"
#include "engine/model/buffers.hpp"
#include "engine/runtime/activation_offload.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/guarded_device.hpp"

namespace pipetune::runtime {
namespace {

using spec::Recompute;

struct OffloadCase {
  std::string name;
  int tp = 1, pp = 2;
  std::string schedule = "1f1b";
  int chunks = 1;
  Recompute recompute = Recompute::None;
};

std::vector<OffloadCase> offload_cases() {
  return {
      {"pp2_1f1b"},
      // B and W apart: W finds what B left, after the reload.
      {"pp2_zbh1", 1, 2, "zb-h1"},
      // Two layer groups per rank: each (chunk, micro-batch) leaves and comes back on its own.
      {"pp2_interleaved", 1, 2, "interleaved-1f1b", 2},
      // Only the kept block inputs travel; B recomputes the rest after the reload.
      {"pp2_full_recompute", 1, 2, "1f1b", 1, Recompute::Full},
      {"tp2_pp2_selective", 2, 2, "1f1b", 1, Recompute::Selective},
  };
}

TrainOptions options(const OffloadCase& c, bool offload) {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.tp = c.tp;
  o.plan.pp = c.pp;
  o.plan.schedule = c.schedule;
  o.plan.chunks = c.chunks;
  o.plan.recompute = c.recompute;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 4;
  o.plan.offload_activations = offload;
  o.steps = 2;
  o.capture_gradients = true;
  o.capture_parameters = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  return o;
}

void expect_same_tensors(const std::map<std::string, tensor::Tensor>& got,
                         const std::map<std::string, tensor::Tensor>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int differing = 0;
  for (const auto& [name, w] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << " " << name;
    if (it->second.values() != w.values() && ++differing <= 5)
      ADD_FAILURE() << what << " of " << name << " differ from the run without offload";
  }
  EXPECT_EQ(differing, 0) << what;
}

void expect_same_training(const TrainResult& got, const TrainResult& want) {
  ASSERT_EQ(got.steps.size(), want.steps.size());
  for (std::size_t s = 0; s < want.steps.size(); ++s)
    EXPECT_EQ(got.steps[s].loss, want.steps[s].loss) << "step " << s + 1;
  expect_same_tensors(got.first_step_gradients, want.first_step_gradients, "gradients");
  expect_same_tensors(got.final_parameters, want.final_parameters, "parameters");
}

// The first pipeline stage's rank (tp rank 0).
const RankSummary& first_stage(const TrainResult& r) {
  for (const RankSummary& k : r.ranks)
    if (k.pp_rank == 0 && k.tp_rank == 0) return k;
  throw std::logic_error("no rank on stage 0");
}

TEST(ActivationOffload, TrainsBitIdenticalToTheRunWithoutOnTheCpu) {
  for (const OffloadCase& c : offload_cases()) {
    SCOPED_TRACE(c.name);
    const TrainResult want = train(options(c, false));
    const TrainResult got = train(options(c, true));
    expect_same_training(got, want);
    for (const RankSummary& k : want.ranks) EXPECT_EQ(k.peak_offloaded_bytes, 0);
    // Stage 0 offloads every micro-batch it does not run backward right away.
    EXPECT_GT(first_stage(got).peak_offloaded_bytes, 0);
    EXPECT_LT(first_stage(got).peak_activation_bytes, first_stage(want).peak_activation_bytes);
  }
}

TEST(ActivationOffload, HostPeakIsWhatTheDeviceHeldWithoutOffload) {
  // 1F1B on 2 stages, 4 micro-batches: stage 0 runs F0 F1 B0 F2 B1 F3 B2 B3 and holds two
  // micro-batches after each F from F1 on; with offload both sit on the host after F1 (and
  // again after F2, F3), and the device holds one at most.
  const OffloadCase c{"pp2_1f1b"};
  const RankSummary without = first_stage(train(options(c, false)));
  const RankSummary with = first_stage(train(options(c, true)));
  EXPECT_NEAR(static_cast<double>(with.peak_offloaded_bytes),
              static_cast<double>(without.peak_activation_bytes),
              0.01 * static_cast<double>(without.peak_activation_bytes));
  EXPECT_LE(2 * with.peak_activation_bytes, without.peak_activation_bytes + 1024)
      << "the device should hold one micro-batch of the two";
}

// Per rank: the emulated device's copies and offload hazards, reported when the rank is done.
struct DeviceCopies {
  std::mutex mutex;
  std::map<int, std::pair<std::size_t, std::size_t>> by_rank;  // rank -> (copies, hazards)
};

TEST(ActivationOffload, TrainsBitIdenticalOnTheEmulatedDeviceWithLateCopies) {
  for (const OffloadCase& c : offload_cases()) {
    SCOPED_TRACE(c.name);
    const TrainResult want = train(options(c, false));
    DeviceCopies copies;
    TrainOptions o = options(c, true);
    o.rank_device =
        testing::reporting_rank_devices([&](int rank, const tensor::DeviceAllocator& allocator) {
          const auto& guarded = dynamic_cast<const testing::GuardedAllocator&>(allocator);
          std::lock_guard lock(copies.mutex);
          copies.by_rank[rank] = {guarded.offload_copies(), guarded.offload_hazards()};
        });
    const TrainResult got = train(o);
    expect_same_training(got, want);
    std::size_t total = 0;
    for (const auto& [rank, counts] : copies.by_rank) {
      total += counts.first;
      EXPECT_EQ(counts.second, 0u) << "rank " << rank << ": a block freed under a pending copy";
    }
    EXPECT_GT(total, 0u) << "no copy went through the device's offload tier";
    EXPECT_GT(first_stage(got).peak_offloaded_bytes, 0);
  }
}

TEST(ActivationOffload, PrefetchingDeviceHoldsTwoMicroBatchesWhereTheRunWithoutHoldsFour) {
  // 1F1B stage 0 of 4 holds 4 micro-batches without offload. A device reloads a backward's
  // micro-batch while the op before it runs (the prefetch), so in the steady state it holds the
  // micro-batch being built and the one coming back: 2, plus the one whose offload has not been
  // seen done yet (the emulated device's first poll always finds a copy running): at most 3.
  OffloadCase c{"pp4_1f1b", 1, 4};
  TrainOptions without = options(c, false), with = options(c, true);
  without.plan.microbatches = with.plan.microbatches = 8;
  with.rank_device = testing::reporting_rank_devices([](int, const tensor::DeviceAllocator&) {});
  const RankSummary w = first_stage(train(without)), o = first_stage(train(with));
  const double per_microbatch = static_cast<double>(w.peak_activation_bytes) / 4.0;
  EXPECT_LE(static_cast<double>(o.peak_activation_bytes), 3.0 * per_microbatch * 1.01);
  EXPECT_NEAR(static_cast<double>(o.peak_offloaded_bytes), 4.0 * per_microbatch,
              0.01 * 4.0 * per_microbatch)
      << "after F3 the four micro-batches are on the host";
}

// The offloader alone on the emulated device: a device buffer stays until its copy is done (the
// device's first poll finds it running), the values come back, and the host blocks are freed.
TEST(ActivationOffload, KeepsDeviceBuffersUntilTheirCopiesAreDone) {
  testing::GuardedAllocator device;
  model::BufferCache cache(0, &device);
  model::ScopedBufferCache bound(cache);
  std::vector<float> values(1000);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i);
  model::Buffer a, b;
  tensor::upload(device, values, model::sized(a, tensor::Shape{1000}));
  tensor::upload(device, std::vector<float>(values.begin(), values.begin() + 10),
                 model::sized(b, tensor::Shape{10}));
  {
    ActivationOffload offload(device, nullptr);
    offload.offload(7, 3, 0, {&a, &b});
    EXPECT_EQ(offload.host_bytes(), 1010 * 4);
    // offload() polled once (the device's first poll finds the copies running): still held.
    EXPECT_EQ(a.size(), 1000u);
    EXPECT_EQ(b.size(), 10u);
    offload.release_done();  // the second poll finds them done
    EXPECT_TRUE(a.empty());
    EXPECT_TRUE(b.empty());
    offload.finish_reload(7);
    ASSERT_EQ(a.size(), 1000u);
    EXPECT_EQ(tensor::download(device, model::view(a, tensor::Shape{1000})), values);
    EXPECT_EQ(tensor::download(device, model::view(b, tensor::Shape{10})),
              std::vector<float>(values.begin(), values.begin() + 10));
    offload.drain();
    EXPECT_EQ(offload.host_bytes(), 0);
    EXPECT_EQ(offload.peak_host_bytes(), 1010 * 4);
    EXPECT_FALSE(offload.holds(7));
  }
  EXPECT_EQ(device.offload_hazards(), 0u);
  EXPECT_EQ(device.offload_copies(), 4u);
  model::release(a);
  model::release(b);
}

// Optimizer offload: the moments in host memory and AdamW run by the host's CPU kernels. On the
// CPU and on the emulated device (whose kernels are the CPU's) the numbers are those of the run
// without, with ZeRO 0, 1 (sharded moments), 2 and 3 over dp = 2.
TEST(OptimizerOffload, TrainsBitIdenticalAndKeepsTheMomentsOffTheDevice) {
  for (int zero : {0, 1, 2, 3}) {
    for (bool device : {false, true}) {
      SCOPED_TRACE("zero " + std::to_string(zero) + (device ? " emulated device" : " cpu"));
      TrainOptions without = options(OffloadCase{"dp2", 1, 1}, false);
      without.plan.dp = 2;
      without.plan.zero_stage = zero;
      TrainOptions with = without;
      with.plan.offload_optimizer = true;
      if (device) {
        with.rank_device =
            testing::reporting_rank_devices([](int, const tensor::DeviceAllocator&) {});
      }
      const TrainResult want = train(without), got = train(with);
      expect_same_training(got, want);
      ASSERT_EQ(got.ranks.size(), want.ranks.size());
      for (std::size_t r = 0; r < want.ranks.size(); ++r) {
        EXPECT_GT(want.ranks[r].optimizer_bytes, 0);
        EXPECT_EQ(got.ranks[r].optimizer_bytes, 0) << "rank " << r;
        EXPECT_EQ(got.ranks[r].offloaded_optimizer_bytes, want.ranks[r].optimizer_bytes)
            << "rank " << r;
      }
    }
  }
}

TEST(ActivationOffload, AMicroBatchNeverReloadedIsALogicError) {
  model::Buffer a(16, 1.0f);
  ActivationOffload offload(tensor::host_allocator(), nullptr);
  offload.offload(1, 0, 0, {&a});
  EXPECT_TRUE(a.empty());  // host storage: copied on the spot
  EXPECT_THROW(offload.drain(), std::logic_error);
  offload.finish_reload(1);
  EXPECT_EQ(a, model::Buffer(16, 1.0f));
  EXPECT_NO_THROW(offload.drain());
}

}  // namespace
}  // namespace pipetune::runtime
