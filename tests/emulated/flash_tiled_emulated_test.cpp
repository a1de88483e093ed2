// The register-tiled flash attention kernels (engine/cuda/cuda_flash_attention_tiled.cu), compiled
// as host C++ against the block emulation in shadow/ (its header says what that checks), against
// causal attention computed in float64 here: output, log-sum-exp and the accumulated dq, dk, dv,
// for each head size the kernels have, with sequences that end inside a 64-row tile. The same
// kernels run on a GPU in tests/gpu; this runs them everywhere, under the sanitizers too.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>
#include <string>
#include <vector>

// The kernel file itself (the shadow folder comes first on this target's include path).
#include "engine/cuda/cuda_flash_attention_tiled.cu"
#include "tests/emulated/attention_reference.hpp"

namespace pipetune::cuda::kernels {
namespace {

TEST(FlashTiledEmulated, ForwardAndBackwardMatchFloat64ForEveryHeadSize) {
  // fp32 sums of up to T * HS products: well under 1e-5 of the largest value.
  emulation::expect_matches_reference(
      {{1, 70, 1, 32}, {2, 130, 1, 64}, {1, 65, 1, 128}, {1, 64, 2, 64}, {1, 1, 1, 32}}, 2024,
      flash_tiled_forward, flash_tiled_backward, 1e-5);
}

TEST(FlashTiledEmulated, OtherHeadSizesAreRefused) {
  std::vector<float> buffer(3 * 48 * 4);
  EXPECT_THROW(
      flash_tiled_forward(nullptr, buffer.data(), buffer.data(), buffer.data(), 1, 4, 1, 48),
      CudaError);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
