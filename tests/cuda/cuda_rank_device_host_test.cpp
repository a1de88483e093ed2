// The host side of GPU ranks, without a GPU: the CUDA device allocator's identity and its
// accounting interface before any device call, and a rank device that cannot start (no usable
// device, as in CI) failing with a CudaError naming the call rather than crashing; a training run
// whose rank devices fail ends with that error.
#include <gtest/gtest.h>

#include "engine/comm/thread_cluster.hpp"
#include "engine/cuda/cuda_check.hpp"
#include "engine/cuda/cuda_devices.hpp"
#include "engine/cuda/cuda_rank_device.hpp"
#include "engine/cuda/device_allocator_cuda.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::cuda {
namespace {

TEST(CudaDeviceAllocator, IsDeviceStorageNamedByItsDevice) {
  CudaDeviceAllocator a(3, nullptr);  // no CUDA call until a block is asked for
  EXPECT_EQ(a.kind(), tensor::StorageKind::device);
  EXPECT_TRUE(a.on_device());
  EXPECT_EQ(a.name(), "cuda:3");
  EXPECT_EQ(a.alignment(), 256u);
  EXPECT_EQ(a.device(), 3);
  EXPECT_EQ(a.total_bytes(), 0);
  EXPECT_EQ(a.allocate(0, profiler::MemoryCategory::Parameters), nullptr);  // nothing to ask
  int x = 0;
  EXPECT_FALSE(a.owns(&x));
}

TEST(CudaRankDevice, WithoutAUsableDeviceTrainingFailsWithTheRuntimesReason) {
  if (query_devices().problem.empty()) GTEST_SKIP() << "a CUDA device is usable here";
  runtime::TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.micro_batch_size = 1;
  o.plan.microbatches = 2;
  o.plan.pp = 2;
  o.steps = 1;
  o.threads_per_rank = 1;
  o.watchdog_seconds = 30;
  o.rank_device = single_gpu_rank_devices();
  try {
    (void)runtime::train(o);
    FAIL() << "trained without a device";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cuda"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pipetune::cuda
