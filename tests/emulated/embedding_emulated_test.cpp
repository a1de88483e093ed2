// The embedding kernels (engine/cuda/cuda_embedding.cu) on the block emulation, against the CPU
// backend: a shard [lo, hi) of the table with and without the position term, and the table's
// gradient through buckets of positions per row built here from the token ids (each distinct row
// of the shard once, its positions in increasing order, as the backend builds them).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "engine/cuda/cuda_embedding.cu"
#include "engine/tensor/cpu/cpu_backend.hpp"
#include "tests/emulated/emulated_test_support.hpp"
#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::cuda::kernels {
namespace {

using emulation::relative_error;
using tensor::Tensor;
using tensor::testing::random_tensor;

TEST(EmbeddingEmulated, ShardForwardAndBackwardMatchTheCpuBackend) {
  const std::int64_t B = 3, T = 11, C = 24, V = 50, lo = 10, hi = 35, rows = hi - lo, N = B * T;
  std::mt19937 rng(41);
  std::uniform_int_distribution<std::int32_t> word(0, static_cast<std::int32_t>(V - 1));
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(N));
  for (auto& t : tokens) t = word(rng);
  tokens[3] = tokens[20] = 12;  // a row used twice
  tensor::CpuBackend cpu;
  const Tensor wte = random_tensor({rows, C}, rng), wpe = random_tensor({T, C}, rng);
  for (const bool positions : {true, false}) {
    Tensor out({B, T, C}), got({B, T, C});
    cpu.embedding_shard_forward(
        tokens, wte, lo, V, positions ? tensor::ConstTensorView(wpe) : tensor::ConstTensorView{},
        out);
    embedding_forward(nullptr, tokens.data(), wte.data(), rows, lo,
                      positions ? wpe.data() : nullptr, got.data(), N, T, C);
    EXPECT_EQ(relative_error(got, out), 0.0) << (positions ? "with" : "without") << " positions";
  }

  const Tensor dout = random_tensor({B, T, C}, rng);
  const Tensor dwte0 = random_tensor({rows, C}, rng), dwpe0 = random_tensor({T, C}, rng);
  Tensor dwte = dwte0, dwpe = dwpe0;
  cpu.embedding_shard_backward_weight(tokens, dout, lo, V, dwte, dwpe);
  std::map<std::int32_t, std::vector<std::int32_t>> by_row;  // shard row -> positions
  for (std::int64_t n = 0; n < N; ++n)
    if (tokens[static_cast<std::size_t>(n)] >= lo && tokens[static_cast<std::size_t>(n)] < hi)
      by_row[static_cast<std::int32_t>(tokens[static_cast<std::size_t>(n)] - lo)].push_back(
          static_cast<std::int32_t>(n));
  std::vector<std::int32_t> bucket_row, bucket_start{0}, bucket_positions;
  for (const auto& [row, where] : by_row) {
    bucket_row.push_back(row);
    bucket_positions.insert(bucket_positions.end(), where.begin(), where.end());
    bucket_start.push_back(static_cast<std::int32_t>(bucket_positions.size()));
  }
  Tensor dwte_got = dwte0, dwpe_got = dwpe0;
  embedding_backward_table(nullptr, bucket_row.data(), bucket_start.data(), bucket_positions.data(),
                           static_cast<std::int64_t>(bucket_row.size()), dout.data(),
                           dwte_got.data(), C);
  embedding_backward_position(nullptr, dout.data(), dwpe_got.data(), B, T, C);
  EXPECT_LE(relative_error(dwte_got, dwte), 1e-6);
  EXPECT_LE(relative_error(dwpe_got, dwpe), 1e-6);
}

}  // namespace
}  // namespace pipetune::cuda::kernels
