// A run's GPU activity joins its trace: each rank's device work (here the emulated device of
// guarded_device.hpp, which reports every op as a kernel and every copy as a memcpy, as CUPTI
// reports a GPU's) becomes GPU lanes of that rank under the ops that launched it, streamed step by
// step (trace_sink + kernel_sink) or merged at the end (record_trace). The counts are closed
// forms of the plan: one attention kernel per layer and micro-batch in each forward, and the
// trainer must put each under its own F op.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "engine/errors.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/validate.hpp"
#include "tests/engine/runtime/guarded_device.hpp"

namespace pipetune::runtime {
namespace {

constexpr int kSteps = 2;
constexpr int kMicrobatches = 3;

TrainOptions pipeline_options() {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = kMicrobatches;
  o.plan.pp = 2;
  o.plan.schedule = "1f1b";
  o.steps = kSteps;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 60;
  o.gpu_capture_every = 1;  // a take at every step end: the counts below are closed forms of it
  o.rank_device = [](comm::Communicator& comm, int threads) -> std::unique_ptr<RankDevice> {
    return std::make_unique<testing::GuardedRankDevice>(comm, threads, /*log_activity=*/true);
  };
  return o;
}

// pipeline_options() with the capture's cadence chosen by the trainer (auto), each take costing
// `take_ns` of host time as the trainer weighs it (the flush that served it).
TrainOptions auto_cadence_options(std::int64_t take_ns) {
  TrainOptions o = pipeline_options();
  o.gpu_capture_every = 0;
  o.rank_device = [take_ns](comm::Communicator& comm, int threads) -> std::unique_ptr<RankDevice> {
    auto device =
        std::make_unique<testing::GuardedRankDevice>(comm, threads, /*log_activity=*/true);
    device->set_serving_flush_ns(take_ns);
    return device;
  };
  return o;
}

int layers(const TrainOptions& o) {
  spec::ModelSpec m = o.model;
  spec::apply_defaults(m);
  return static_cast<int>(m.layers);
}

// The F span of (rank, micro-batch) whose interval holds t, or null.
const profiler::Span* forward_at(const profiler::Trace& t, int rank, int microbatch,
                                 std::int64_t at) {
  for (const profiler::Span& s : t.spans) {
    if (s.kind != profiler::SpanKind::F || s.microbatch != microbatch) continue;
    if (t.lanes[static_cast<std::size_t>(s.lane)].rank != rank) continue;
    if (s.start_ns <= at && at <= s.end_ns) return &s;
  }
  return nullptr;
}

TEST(GpuActivityTrace, RecordedRunHasEachRanksKernelsUnderTheOpsThatLaunchedThem) {
  TrainOptions o = pipeline_options();
  o.record_trace = true;
  const TrainResult r = train(o);
  const profiler::Trace& t = r.trace;

  // One GPU lane per rank (the emulated device's one stream), holding every activity.
  std::map<int, int> gpu_lanes;
  for (const profiler::Lane& lane : t.lanes)
    if (lane.stream == profiler::Stream::Gpu) {
      ++gpu_lanes[lane.rank];
      EXPECT_EQ(lane.index, static_cast<int>(testing::GuardedAllocator::kLogStream));
    }
  EXPECT_EQ(gpu_lanes, (std::map<int, int>{{0, 1}, {1, 1}}));
  ASSERT_FALSE(r.kernels.empty());
  EXPECT_EQ(r.gpu_capture.activities, r.kernels.size());
  EXPECT_EQ(r.gpu_capture.without_launch, 0u);  // every record came with its call
  EXPECT_EQ(r.gpu_capture.attributed + r.gpu_capture.outside_ops, r.kernels.size());
  EXPECT_GT(r.gpu_capture.attributed, r.gpu_capture.outside_ops);
  // Each rank's take at each step end: the devices' flush counts summed.
  EXPECT_EQ(r.gpu_capture.flushes, static_cast<std::size_t>(2 * o.steps));
  EXPECT_EQ(r.gpu_capture.forced_flushes, 2u);
  // Takes 1..steps of each rank: their host times summed, the most calls left waiting.
  const auto takes = static_cast<std::int64_t>(o.steps);
  EXPECT_EQ(r.gpu_capture.flush_ns, 2 * 1000 * takes * (takes + 1) / 2);
  EXPECT_EQ(r.gpu_capture.route_ns, 2 * takes * (takes + 1) / 2);
  EXPECT_EQ(r.gpu_capture.waiting_launch_calls, static_cast<std::size_t>(o.steps));

  // Attention: one kernel per layer and micro-batch of each forward, on the stage that holds the
  // layer, each attributed to the F op of its micro-batch and lying inside it (the clock offset
  // undone).
  const int per_stage = layers(o) / 2;
  std::map<std::pair<int, int>, int> attention;  // (rank, micro-batch) -> kernels in F
  for (const profiler::KernelRecord& k : r.kernels) {
    if (k.name != "attention_forward" && k.name != "attention_flash_forward") continue;
    ASSERT_TRUE(k.phase.has_value()) << k.name << " at " << k.start_ns << " not attributed";
    EXPECT_EQ(*k.phase, profiler::SpanKind::F);
    ASSERT_GE(k.microbatch, 0);
    EXPECT_NE(forward_at(t, k.rank, k.microbatch, k.start_ns), nullptr)
        << "rank " << k.rank << " micro-batch " << k.microbatch << " at " << k.start_ns;
    ++attention[{k.rank, k.microbatch}];
  }
  for (int rank = 0; rank < 2; ++rank)
    for (int mb = 0; mb < kMicrobatches; ++mb)
      EXPECT_EQ((attention[{rank, mb}]), per_stage * kSteps) << "rank " << rank << " mb " << mb;

  // The copies of the pipeline's transfers are under its sends and receives.
  std::size_t transfers = 0;
  for (const profiler::KernelRecord& k : r.kernels)
    if (k.name.rfind("memcpy", 0) == 0 &&
        (k.op.find("send") != std::string::npos || k.op.find("recv") != std::string::npos))
      ++transfers;
  EXPECT_GT(transfers, 0u);
}

TEST(GpuActivityTrace, StreamedPartsCarryTheSameKernelsAsTheSink) {
  TrainOptions o = pipeline_options();
  std::mutex mutex;
  std::size_t gpu_spans = 0, sunk = 0, parts_with_gpu = 0;
  o.trace_sink = [&](profiler::Trace part) {
    std::size_t here = 0;
    for (const profiler::Span& s : part.spans)
      if (part.lanes[static_cast<std::size_t>(s.lane)].stream == profiler::Stream::Gpu) ++here;
    std::lock_guard lock(mutex);
    gpu_spans += here;
    parts_with_gpu += here > 0;
  };
  o.kernel_sink = [&](std::vector<profiler::KernelRecord> k) {
    std::lock_guard lock(mutex);
    for (const profiler::KernelRecord& record : k) EXPECT_GE(record.rank, 0);
    sunk += k.size();
  };
  const TrainResult r = train(o);
  EXPECT_GT(sunk, 0u);
  EXPECT_EQ(gpu_spans, sunk);
  EXPECT_EQ(r.gpu_capture.activities, sunk);
  EXPECT_EQ(parts_with_gpu, static_cast<std::size_t>(2 * kSteps));  // every rank, every step
}

// What a streamed run's sinks got of its GPU activity: each kernel as (rank, name, op, phase,
// micro-batch), sorted, and the parts that carried GPU spans.
struct Streamed {
  std::vector<std::tuple<int, std::string, std::string, int, int>> kernels;
  std::size_t parts_with_gpu = 0;
  TrainResult result;
};

// `fails`: the run must end with an error (its result stays empty).
Streamed stream_run(TrainOptions o, bool fails = false) {
  Streamed out;
  std::mutex mutex;
  o.trace_sink = [&](profiler::Trace part) {
    bool gpu = false;
    for (const profiler::Lane& lane : part.lanes) gpu |= lane.stream == profiler::Stream::Gpu;
    std::lock_guard lock(mutex);
    out.parts_with_gpu += gpu;
  };
  o.kernel_sink = [&](std::vector<profiler::KernelRecord> k) {
    std::lock_guard lock(mutex);
    for (const profiler::KernelRecord& r : k)
      out.kernels.emplace_back(r.rank, r.name, r.op, r.phase ? static_cast<int>(*r.phase) : -1,
                               r.microbatch);
  };
  if (fails)
    EXPECT_THROW(train(o), std::exception);
  else
    out.result = train(o);
  std::sort(out.kernels.begin(), out.kernels.end());
  return out;
}

// Taken every 2 steps of 3 (at steps 2 and 3), the run's sinks get the kernels a take every step
// gives, each under the same op of its own step: the records of step 1 are attributed at step
// 2's take from the ops the rank kept since its last take.
TEST(GpuActivityTrace, TakingEveryFewStepsBringsTheSameKernelsUnderTheSameOps) {
  TrainOptions every_step = pipeline_options();
  every_step.steps = 3;
  TrainOptions every_two = every_step;
  every_two.gpu_capture_every = 2;
  const Streamed one = stream_run(every_step), two = stream_run(every_two);
  ASSERT_FALSE(one.kernels.empty());
  EXPECT_EQ(two.kernels, one.kernels);
  EXPECT_EQ(one.result.gpu_capture.flushes, 2u * 3);  // each rank's take at each step
  EXPECT_EQ(two.result.gpu_capture.flushes, 2u * 2);  // at steps 2 and 3
  EXPECT_EQ(one.parts_with_gpu, 2u * 3);
  EXPECT_EQ(two.parts_with_gpu, 2u * 2);
  EXPECT_EQ(two.result.gpu_capture.attributed, one.result.gpu_capture.attributed);
  EXPECT_EQ(two.result.gpu_capture.outside_ops, one.result.gpu_capture.outside_ops);
  EXPECT_EQ(two.result.gpu_capture.without_launch, 0u);
  ASSERT_EQ(two.result.steps.size(), one.result.steps.size());
  for (std::size_t s = 0; s < one.result.steps.size(); ++s)
    EXPECT_EQ(two.result.steps[s].loss, one.result.steps[s].loss) << "step " << s + 1;
}

// A run stopped early still takes at its last step: nothing captured is left behind.
TEST(GpuActivityTrace, AStoppedRunTakesAtItsLastStep) {
  TrainOptions o = pipeline_options();
  o.steps = 5;
  o.gpu_capture_every = 4;
  std::atomic<bool> stop{false};
  o.stop = &stop;
  o.on_step = [&](const StepResult& s) {
    if (s.step == 1) stop = true;  // read before step 2's final reduction: the run ends there
  };
  const Streamed run = stream_run(o);
  ASSERT_EQ(run.result.steps.size(), 2u);
  EXPECT_TRUE(run.result.stopped);
  EXPECT_EQ(run.result.gpu_capture.flushes, 2u);  // one take each rank, at step 2
  EXPECT_EQ(run.parts_with_gpu, 2u);
  TrainOptions two_steps = pipeline_options();
  two_steps.steps = 2;
  EXPECT_EQ(run.kernels, stream_run(two_steps).kernels);
}

// A record that comes a take late (another rank's kernels still ran at the flush) lands under its
// own op: a take keeps the ops of the step it took. Two takes late it finds none, as a take drops
// the ops of the steps before it (so a rank's window of ops stays about a step long).
TEST(GpuActivityTrace, ARecordATakeLateFindsItsOpAndTwoTakesLateFindsNone) {
  const auto late_by = [](std::size_t takes) {
    TrainOptions o = pipeline_options();
    o.steps = 3;
    o.rank_device = [takes](comm::Communicator& comm, int threads) -> std::unique_ptr<RankDevice> {
      return std::make_unique<testing::GuardedRankDevice>(comm, threads, /*log_activity=*/true,
                                                          nullptr, takes);
    };
    return o;
  };
  TrainOptions first_two_steps = pipeline_options();
  first_two_steps.steps = 2;
  TrainOptions first_step = pipeline_options();
  first_step.steps = 1;
  const Streamed on_time_two = stream_run(first_two_steps), on_time_one = stream_run(first_step);
  const Streamed one_late = stream_run(late_by(1)), two_late = stream_run(late_by(2));
  ASSERT_FALSE(on_time_one.kernels.empty());
  ASSERT_GT(on_time_one.result.gpu_capture.attributed, 0u);

  // One take late, 3 steps: steps 1 and 2's records, each under the op a take on time gives it.
  EXPECT_EQ(one_late.kernels, on_time_two.kernels);
  EXPECT_EQ(one_late.result.gpu_capture.attributed, on_time_two.result.gpu_capture.attributed);
  // Two takes late: step 1's records, at step 3's take, none under an op.
  EXPECT_EQ(two_late.result.gpu_capture.activities, on_time_one.kernels.size());
  EXPECT_EQ(two_late.result.gpu_capture.attributed, 0u);
  EXPECT_EQ(two_late.result.gpu_capture.outside_ops, on_time_one.kernels.size());
  EXPECT_EQ(two_late.result.gpu_capture.without_launch, 0u);  // their calls came with them
}

// Auto: a take at the first step end measures what a take costs; one that would cost more than
// the budget of any step waits the most steps allowed, and the run's last step end is taken.
// The kernels and their ops are those of a take every step.
TEST(GpuActivityTrace, AutoTakesAnExpensiveCaptureAtTheFirstAndLastStepEnds) {
  TrainOptions every_step = pipeline_options();
  every_step.steps = 5;
  TrainOptions expensive = auto_cadence_options(std::int64_t{1} << 50);  // 13 days a take
  expensive.steps = 5;
  const Streamed one = stream_run(every_step), rare = stream_run(expensive);
  ASSERT_FALSE(one.kernels.empty());
  EXPECT_EQ(rare.kernels, one.kernels);
  EXPECT_EQ(rare.result.gpu_capture.takes, 2u * 2);  // each rank's, at steps 1 and 5
  EXPECT_EQ(rare.result.gpu_capture.most_steps_per_take, 4);
  EXPECT_EQ(rare.parts_with_gpu, 2u * 2);
  EXPECT_EQ(one.result.gpu_capture.takes, 2u * 5);
  EXPECT_EQ(one.result.gpu_capture.most_steps_per_take, 1);
  EXPECT_EQ(rare.result.gpu_capture.attributed, one.result.gpu_capture.attributed);
}

// Auto with takes that cost nothing against the steps (another rank's flush served them, or the
// flush is fast): a take at every step end, as often as the trace can have them.
TEST(GpuActivityTrace, AutoTakesACheapCaptureAtEveryStepEnd) {
  TrainOptions cheap = auto_cadence_options(0);
  cheap.steps = 3;
  const Streamed run = stream_run(cheap);
  EXPECT_EQ(run.result.gpu_capture.takes, 2u * 3);
  EXPECT_EQ(run.result.gpu_capture.most_steps_per_take, 1);
  EXPECT_EQ(run.parts_with_gpu, 2u * 3);
}

// A run that fails between takes keeps its streamed steps' GPU records: each rank hands the
// sinks what it captured since its last take, under the ops of their own steps, and nothing of
// the step that failed (rank 0 launched its first forwards before rank 1 threw). The reference is
// a run of the committed steps alone.
TEST(GpuActivityTrace, AFailedRunKeepsTheGpuRecordsOfItsStreamedSteps) {
  const auto failing_at_step_4 = [](TrainOptions o) {
    o.steps = 5;
    o.fault = InjectedFault{1, 4, InjectedFault::Kind::Throw};
    return o;
  };
  TrainOptions three_steps = pipeline_options();
  three_steps.steps = 3;
  const Streamed reference = stream_run(three_steps);
  const Streamed every_step = stream_run(failing_at_step_4(pipeline_options()), true);
  const Streamed rare =
      stream_run(failing_at_step_4(auto_cadence_options(std::int64_t{1} << 50)), true);
  ASSERT_FALSE(reference.kernels.empty());
  EXPECT_EQ(every_step.kernels, reference.kernels);
  EXPECT_EQ(every_step.parts_with_gpu, 2u * 3);  // each rank's take at steps 1, 2 and 3
  EXPECT_EQ(rare.kernels, reference.kernels);
  EXPECT_EQ(rare.parts_with_gpu, 2u * 2);  // each rank's at step 1, and what it kept of 2 and 3
}

// A checkpoint step is taken whatever the cadence: a run killed after it has the GPU lanes of
// every step up to the state it resumes from.
TEST(GpuActivityTrace, ACheckpointStepIsTaken) {
  TrainOptions o = auto_cadence_options(std::int64_t{1} << 50);
  o.steps = 5;
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "gpu_activity_checkpoint";
  std::filesystem::remove_all(dir);
  o.checkpoint_dir = dir.string();
  o.checkpoint_every = 3;
  const Streamed run = stream_run(o);
  std::filesystem::remove_all(dir);
  EXPECT_EQ(run.result.gpu_capture.takes, 2u * 3);  // each rank's, at steps 1, 3 and 5
  EXPECT_EQ(run.result.gpu_capture.most_steps_per_take, 2);
}

TEST(GpuActivityTrace, ANegativeCadenceOrABudgetOutsideZeroToOneIsRefused) {
  TrainOptions o = pipeline_options();
  o.gpu_capture_every = -1;
  EXPECT_THROW(train(o), InputError);
  o.gpu_capture_every = 0;
  for (const double budget : {0.0, 1.0, -0.01}) {
    o.gpu_capture_budget = budget;
    EXPECT_THROW(train(o), InputError) << "budget " << budget;
  }
}

TEST(GpuActivityTrace, CaptureOffLeavesNvtxOnlyAndTheSameLosses) {
  TrainOptions on = pipeline_options();
  on.record_trace = true;
  TrainOptions off = pipeline_options();
  off.record_trace = true;
  off.capture_gpu_activity = false;
  const TrainResult with = train(on), without = train(off);
  EXPECT_TRUE(without.kernels.empty());
  EXPECT_EQ(without.gpu_capture.activities, 0u);
  for (const profiler::Lane& lane : without.trace.lanes)
    EXPECT_NE(lane.stream, profiler::Stream::Gpu);
  ASSERT_EQ(with.steps.size(), without.steps.size());
  for (std::size_t s = 0; s < with.steps.size(); ++s)
    EXPECT_EQ(with.steps[s].loss, without.steps[s].loss) << "step " << s + 1;
}

TEST(GpuActivityTrace, TheCpuHasNoGpuActivity) {
  TrainOptions o = pipeline_options();
  o.rank_device = nullptr;
  o.record_trace = true;
  const TrainResult r = train(o);
  EXPECT_TRUE(r.kernels.empty());
  EXPECT_EQ(r.gpu_capture.activities, 0u);
}

}  // namespace
}  // namespace pipetune::runtime
