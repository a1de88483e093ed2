// The attention that stores its probabilities (engine/cuda/cuda_attention.cu) on the block
// emulation, against float64 causal attention: output, the probabilities (zero above the
// diagonal) and the accumulated dqkv.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <vector>

#include "engine/cuda/cuda_attention.cu"
#include "tests/emulated/attention_reference.hpp"

namespace pipetune::cuda::kernels {
namespace {

TEST(StoredAttentionEmulated, ForwardAndBackwardMatchFloat64) {
  std::mt19937 rng(9);
  for (const auto& [B, T, NH, HS] :
       std::vector<std::array<std::int64_t, 4>>{{1, 37, 2, 20}, {2, 33, 1, 64}, {1, 5, 1, 3}}) {
    const std::int64_t C = NH * HS;
    emulation::Inputs in(B, T, C, rng);
    const emulation::Reference want = emulation::reference(in.qkv, in.dout, in.dqkv, B, T, NH, HS);
    std::vector<float> out(static_cast<std::size_t>(B * T * C), std::nanf(""));
    std::vector<float> att(static_cast<std::size_t>(B * NH * T * T), std::nanf(""));
    std::vector<float> ds(att.size(), std::nanf(""));
    attention_forward(nullptr, in.qkv.data(), out.data(), att.data(), B, T, NH, HS);
    attention_backward(nullptr, in.dout.data(), in.qkv.data(), att.data(), in.dqkv.data(),
                       ds.data(), B, T, NH, HS);
    const std::string at = "B " + std::to_string(B) + " T " + std::to_string(T) + " NH " +
                           std::to_string(NH) + " HS " + std::to_string(HS);
    EXPECT_LE(emulation::relative_error(out, want.out), 1e-5) << "out, " << at;
    EXPECT_LE(emulation::relative_error(in.dqkv, want.dqkv), 1e-5) << "dqkv, " << at;
    // Each row of att is a distribution over the keys up to the query, zeros after it.
    for (std::int64_t r = 0; r < B * NH * T; ++r) {
      const std::int64_t i = r % T;
      double sum = 0.0;
      for (std::int64_t j = 0; j < T; ++j) {
        const float p = att[static_cast<std::size_t>(r * T + j)];
        if (j > i)
          ASSERT_EQ(p, 0.0f) << at << " row " << r << " key " << j;
        else
          sum += p;
      }
      ASSERT_NEAR(sum, 1.0, 1e-5) << at << " row " << r;
    }
  }
}

}  // namespace
}  // namespace pipetune::cuda::kernels
