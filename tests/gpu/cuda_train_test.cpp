// Training on the GPU in single-GPU mode (engine/cuda/cuda_rank_device.hpp: every rank a thread
// with its own stream, CudaBackend and device allocator on device 0, transfers and collectives
// of device spans device to device) against the CPU single-rank run of the same global batch, for
// every plan of the parallel-equivalence matrix (tests/engine/runtime/plan_matrix.hpp).
//
// Tolerances (fp32 on both sides; the GPU sums in other orders: cuBLASLt GEMMs, tree reductions):
//  - the step-1 loss within 1e-4 relative, the 5-step loss curve within 1e-3 relative;
//  - every step-1 gradient within 1e-3 of the tensor's largest element (as relative_error below).
// Device memory: what the rank's allocator holds (parameters, gradients, optimizer state, cached
// activation blocks) against cudaMemGetInfo's used bytes grown since before the run, which also
// hold the backend's cuBLASLt workspace, per-op scratch and cudaMalloc's rounding: the difference
// must be non-negative and under 64 MiB + 5% of the allocator's bytes.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "engine/cuda/cuda_rank_device.hpp"
#include "engine/cuda/device_allocator_cuda.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/runtime/plan_matrix.hpp"
#include "tests/gpu/gpu_test_support.hpp"

namespace pipetune::cuda {
namespace {

constexpr int kSteps = 5;

using pipetune::testing::PlanCase;

runtime::TrainOptions options_for(const std::string& model, int microbatches) {
  runtime::TrainOptions o;
  o.model = spec::load_model(model);
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = microbatches;
  o.steps = kSteps;
  o.capture_gradients = true;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 120;
  return o;
}

double relative_error(const tensor::Tensor& a, const tensor::Tensor& b) {
  double diff = 0.0, scale = 1e-6;
  for (std::int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
  }
  return diff / scale;
}

class CudaTraining : public ::testing::TestWithParam<PlanCase> {};

TEST_P(CudaTraining, SingleGpuModeMatchesTheCpuSingleRankRun) {
  PIPETUNE_REQUIRE_GPU();
  const PlanCase& c = GetParam();
  const runtime::TrainResult want = runtime::train(options_for(c.model, c.microbatches * c.dp));
  runtime::TrainOptions o = options_for(c.model, c.microbatches);
  pipetune::testing::apply_plan(c, o);
  o.rank_device = single_gpu_rank_devices();
  const runtime::TrainResult got = runtime::train(o);

  ASSERT_EQ(got.steps.size(), want.steps.size());
  EXPECT_NEAR(got.steps[0].loss, want.steps[0].loss, 1e-4 * std::fabs(want.steps[0].loss));
  std::ostringstream curve;
  bool curve_ok = true;
  for (std::size_t s = 0; s < want.steps.size(); ++s) {
    const double d = std::fabs(got.steps[s].loss - want.steps[s].loss);
    const bool ok = d <= 1e-3 * std::fabs(want.steps[s].loss);
    curve_ok = curve_ok && ok;
    curve << "  step " << s + 1 << ": gpu " << got.steps[s].loss << " cpu " << want.steps[s].loss
          << (ok ? "" : "   <-- differs") << "\n";
  }
  EXPECT_TRUE(curve_ok) << "loss curves differ:\n" << curve.str();
  std::ostringstream bad;
  int failures = 0;
  for (const auto& [name, w] : want.first_step_gradients) {
    auto it = got.first_step_gradients.find(name);
    const double err = it == got.first_step_gradients.end() ? 1.0 : relative_error(it->second, w);
    if (!(err <= 1e-3)) {
      bad << "  " << name << ": relative error " << err << "\n";
      ++failures;
    }
  }
  EXPECT_EQ(failures, 0) << "gradients that differ from the CPU 1-rank run:\n" << bad.str();
}

// The single-rank plan and the whole parallel-equivalence matrix, every rank a stream of device 0.
INSTANTIATE_TEST_SUITE_P(Plans, CudaTraining,
                         ::testing::ValuesIn(pipetune::testing::plans_against_the_cpu()),
                         [](const auto& info) { return info.param.name; });

TEST(CudaTrainingMemory, AllocatorBytesMatchCudaMemGetInfo) {
  PIPETUNE_REQUIRE_GPU();
  PIPETUNE_CUDA_CHECK(cudaSetDevice(0));
  PIPETUNE_CUDA_CHECK(cudaFree(nullptr));  // the context exists before the baseline
  const std::int64_t before = device_used_bytes(0);

  runtime::TrainOptions o = options_for("tiny", 2);
  o.capture_gradients = false;
  o.steps = 2;
  o.model.layers = 4;  // large enough that the margin below means something: ~21M parameters
  o.model.hidden = 512;
  o.model.heads = 8;
  o.model.kv_heads = 8;
  o.model.ffn_hidden = 2048;
  o.model.vocab = 8192;
  o.model.seq_len = 128;
  std::atomic<const CudaDeviceAllocator*> allocator{nullptr};
  const runtime::RankDeviceFactory gpu = single_gpu_rank_devices();
  o.rank_device = [&](comm::Communicator& comm, int threads) {
    auto d = gpu(comm, threads);
    allocator = &static_cast<CudaRankDevice&>(*d).allocator();
    return d;
  };
  std::int64_t accounted = -1, used = -1, params = -1, grads = -1, optimizer = -1;
  o.on_step = [&](const runtime::StepResult&) {  // rank 0's thread, its tensors alive
    const CudaDeviceAllocator& a = *allocator.load();
    accounted = a.total_bytes();
    params = a.bytes(profiler::MemoryCategory::Parameters);
    grads = a.bytes(profiler::MemoryCategory::Gradients);
    optimizer = a.bytes(profiler::MemoryCategory::OptimizerState);
    used = device_used_bytes(0) - before;
  };
  const runtime::TrainResult r = runtime::train(o);
  ASSERT_EQ(r.ranks.size(), 1u);
  // The ledger's categories are the allocator's (the ledger splits vocabulary layers out).
  EXPECT_EQ(params, r.ranks[0].parameter_bytes);
  EXPECT_EQ(grads, r.ranks[0].gradient_bytes);
  EXPECT_EQ(optimizer, r.ranks[0].optimizer_bytes);
  const std::int64_t margin = (std::int64_t{64} << 20) + accounted / 20;
  EXPECT_GE(used, accounted) << "cudaMemGetInfo sees less than the allocator holds";
  EXPECT_LE(used - accounted, margin)
      << "device used " << used << " bytes, the allocator accounts " << accounted;
  std::printf("device memory: allocator %lld bytes, cudaMemGetInfo grew %lld bytes\n",
              static_cast<long long>(accounted), static_cast<long long>(used));
}

}  // namespace
}  // namespace pipetune::cuda

namespace pipetune::cuda {
namespace {

// CUPTI capture in a training run (pp=2 as two streams of one device): each rank's kernels and
// copies land on its own GPU lane under the ops that launched them: every record has its launch
// call, most are launched inside ops, and every F-phase kernel starts after an F op of its rank
// and micro-batch began (the trainer's wiring is checked op for op without a GPU in
// tests/engine/runtime/gpu_activity_trace_test.cpp).
TEST(CudaTrainingCapture, KernelsLandUnderTheOpsThatLaunchedThem) {
  PIPETUNE_REQUIRE_GPU();
  runtime::TrainOptions o = options_for("tiny", 3);
  o.steps = 2;
  o.capture_gradients = false;
  o.plan.pp = 2;
  o.record_trace = true;
  o.rank_device = single_gpu_rank_devices();
  const runtime::TrainResult r = runtime::train(o);
  ASSERT_GT(r.kernels.size(), 0u) << "no GPU activity captured";
  EXPECT_EQ(r.gpu_capture.activities, r.kernels.size());
  std::printf("captured %zu activities: %zu inside ops, %zu between ops, %zu without launch\n",
              r.gpu_capture.activities, r.gpu_capture.attributed, r.gpu_capture.outside_ops,
              r.gpu_capture.without_launch);
  EXPECT_EQ(r.gpu_capture.without_launch, 0u);
  EXPECT_GT(r.gpu_capture.attributed, r.gpu_capture.activities / 2);
  std::map<int, int> lanes_of_rank;
  for (const profiler::Lane& lane : r.trace.lanes)
    if (lane.stream == profiler::Stream::Gpu) ++lanes_of_rank[lane.rank];
  EXPECT_EQ(lanes_of_rank.size(), 2u) << "each rank its own GPU lane";
  std::size_t forward = 0;
  for (const profiler::KernelRecord& k : r.kernels) {
    if (!k.phase || *k.phase != profiler::SpanKind::F) continue;
    ++forward;
    bool inside = false;
    for (const profiler::Span& s : r.trace.spans)
      if (s.kind == profiler::SpanKind::F && s.microbatch == k.microbatch &&
          r.trace.lanes[static_cast<std::size_t>(s.lane)].rank == k.rank &&
          s.start_ns <= k.start_ns)
        inside = true;  // launched in the op, so it cannot start before it
    EXPECT_TRUE(inside) << k.name << " of rank " << k.rank << " mb " << k.microbatch;
  }
  EXPECT_GT(forward, 0u);
}

// The kernels a streamed run's sinks got, as (rank, name, op, phase, micro-batch), sorted.
using KernelKeys = std::vector<std::tuple<int, std::string, std::string, int, int>>;
// The records outside every op, each as "rank R stream S NAME BYTES B at T us" (T from the run's
// first record), in start order: printed when the test fails, to tell setup and teardown apart.
using OutsideRecords = std::vector<std::string>;

KernelKeys streamed_kernels(runtime::TrainOptions o, bool fails,
                            OutsideRecords* outside = nullptr) {
  KernelKeys keys;
  std::vector<profiler::KernelRecord> outside_ops;
  std::mutex mutex;
  o.trace_sink = [](profiler::Trace) {};
  o.kernel_sink = [&](std::vector<profiler::KernelRecord> k) {
    std::lock_guard lock(mutex);
    for (const profiler::KernelRecord& r : k) {
      keys.emplace_back(r.rank, r.name, r.op, r.phase ? static_cast<int>(*r.phase) : -1,
                        r.microbatch);
      if (r.op.empty()) outside_ops.push_back(r);
    }
  };
  if (fails)
    EXPECT_THROW(runtime::train(o), std::exception);
  else
    runtime::train(o);
  std::sort(keys.begin(), keys.end());
  if (outside != nullptr && !outside_ops.empty()) {
    std::sort(outside_ops.begin(), outside_ops.end(),
              [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
    const std::int64_t t0 = outside_ops.front().start_ns;
    for (const profiler::KernelRecord& r : outside_ops) {
      std::ostringstream os;
      os << "rank " << r.rank << " stream " << r.stream << " " << r.name << " bytes " << r.bytes
         << " at " << (r.start_ns - t0) / 1000 << " us";
      outside->push_back(os.str());
    }
  }
  return keys;
}

std::string key_text(const KernelKeys::value_type& k) {
  const auto& [rank, name, op, phase, microbatch] = k;
  std::ostringstream os;
  os << "rank " << rank << " " << op << " phase " << phase << " mb " << microbatch << ": " << name;
  return os.str();
}

// What one sorted key list has that the other lacks (as multisets), a line each, at most 12 of
// each side: gtest's own print of two long vectors cuts both before they differ.
std::string key_diff(const KernelKeys& got, const KernelKeys& want) {
  KernelKeys extra, missing;
  std::set_difference(got.begin(), got.end(), want.begin(), want.end(), std::back_inserter(extra));
  std::set_difference(want.begin(), want.end(), got.begin(), got.end(),
                      std::back_inserter(missing));
  std::ostringstream os;
  os << got.size() << " kernels against " << want.size() << "; " << extra.size() << " extra, "
     << missing.size() << " missing";
  for (const auto& [label, keys] : {std::pair{"extra", &extra}, std::pair{"missing", &missing}})
    for (std::size_t i = 0; i < std::min<std::size_t>(keys->size(), 12); ++i)
      os << "\n  " << label << ": " << key_text((*keys)[i]);
  return os.str();
}

// Streamed as `train` streams to its workspace, with a take every 16 steps, a run whose rank 1
// throws at step 4 still hands its sinks the kernels of steps 1 to 3 (step 1's at its take, those
// of 2 and 3 as its ranks fail), each under the op a 3-step run taking every step gives it, and
// none of step 4's (the emulated device's version: tests/engine/runtime/gpu_activity_trace_test).
TEST(CudaTrainingCapture, AFailedRunKeepsTheKernelsOfItsStreamedSteps) {
  PIPETUNE_REQUIRE_GPU();
  runtime::TrainOptions o = options_for("tiny", 3);
  o.capture_gradients = false;
  o.plan.pp = 2;
  o.rank_device = single_gpu_rank_devices();
  runtime::TrainOptions three_steps = o;
  three_steps.steps = 3;
  three_steps.gpu_capture_every = 1;
  runtime::TrainOptions failing = o;
  failing.steps = 5;
  failing.gpu_capture_every = 16;
  failing.fault = runtime::InjectedFault{1, 4, runtime::InjectedFault::Kind::Throw};
  OutsideRecords reference_outside, got_outside;
  const KernelKeys reference = streamed_kernels(three_steps, false, &reference_outside);
  ASSERT_FALSE(reference.empty()) << "no GPU activity captured";
  const KernelKeys got = streamed_kernels(failing, true, &got_outside);
  EXPECT_TRUE(got == reference) << key_diff(got, reference);
  if (got != reference) {
    for (const auto& [label, lines] :
         {std::pair{"reference", &reference_outside}, std::pair{"failing", &got_outside}}) {
      std::printf("%s run: %zu records outside ops\n", label, lines->size());
      for (std::size_t i = 0; i < std::min<std::size_t>(lines->size(), 60); ++i)
        std::printf("  %s\n", (*lines)[i].c_str());
    }
  }
}

}  // namespace
}  // namespace pipetune::cuda
