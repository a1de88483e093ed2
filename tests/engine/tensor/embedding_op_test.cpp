// Token + position embedding through the Backend interface: lookup, scatter-add backward against
// finite differences, and the vocabulary-sharded form (uneven shards summed == full embedding).
#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::tensor::testing {
namespace {

class EmbeddingOpTest : public BackendTest {};

TEST_P(EmbeddingOpTest, ForwardIsTokenPlusPositionRow) {
  const std::int64_t B = 2, T = 3, C = 4, V = 5;
  Tensor wte = random_tensor({V, C}, rng);                      // (V, C)
  Tensor wpe = random_tensor({T, C}, rng);                      // (maxT, C)
  const std::vector<std::int32_t> tokens = {4, 0, 2, 2, 1, 3};  // (B, T)
  Tensor out({B, T, C});                                        // (B, T, C)
  be().embedding_forward(tokens, wte, wpe, out);
  std::vector<float> expected;
  for (std::int64_t i = 0; i < B * T; ++i) {
    for (std::int64_t c = 0; c < C; ++c) {
      expected.push_back(wte[tokens[i] * C + c] + wpe[(i % T) * C + c]);
    }
  }
  EXPECT_TRUE(all_close("out", out.values(), expected, 0, 0));
}

TEST_P(EmbeddingOpTest, BackwardMatchesFiniteDifferences) {
  const std::int64_t B = 2, T = 3, C = 3, V = 4;
  Tensor wte = random_tensor({V, C}, rng), wpe = random_tensor({T, C}, rng);
  const std::vector<std::int32_t> tokens = {1, 1, 3, 0, 1, 2};  // repeated ids: scatter-add
  Tensor r = random_tensor({B, T, C}, rng);
  auto loss = [&] {
    Tensor out({B, T, C});
    be().embedding_forward(tokens, wte, wpe, out);
    return dot(out, r);
  };
  Tensor dwte({V, C}), dwpe({T, C});
  be().embedding_backward_weight(tokens, r, dwte, dwpe);
  EXPECT_TRUE(grad_close("dwte", dwte, numeric_grad(loss, wte)));
  EXPECT_TRUE(grad_close("dwpe", dwpe, numeric_grad(loss, wpe)));
}

TEST_P(EmbeddingOpTest, VocabShardsSumToFullEmbeddingAndGradient) {
  const std::int64_t B = 2, T = 4, C = 3, V = 11;
  const std::vector<std::int64_t> bounds = {0, 3, 4, 11};  // uneven, one shard of one row
  Tensor wte = random_tensor({V, C}, rng), wpe = random_tensor({T, C}, rng);
  const auto tokens = random_ids(B * T, V, rng);
  Tensor full({B, T, C});
  be().embedding_forward(tokens, wte, wpe, full);
  Tensor dout = random_tensor({B, T, C}, rng);
  Tensor full_dwte({V, C}), full_dwpe({T, C});
  be().embedding_backward_weight(tokens, dout, full_dwte, full_dwpe);

  Tensor sum({B, T, C}), dwpe({T, C});
  std::vector<float> dwte;
  for (std::size_t s = 0; s + 1 < bounds.size(); ++s) {
    const std::int64_t lo = bounds[s], rows = bounds[s + 1] - lo;
    Tensor shard({rows, C});  // (hi - lo, C)
    std::copy_n(wte.data() + lo * C, rows * C, shard.data());
    const bool owns_positions = s == 0;  // exactly one shard adds the position embedding
    Tensor part({B, T, C});
    be().embedding_shard_forward(tokens, shard, lo, V,
                                 owns_positions ? wpe.view() : ConstTensorView{}, part);
    be().accumulate(sum, part);
    Tensor dshard({rows, C});
    be().embedding_shard_backward_weight(tokens, dout, lo, V, dshard,
                                         owns_positions ? dwpe.view() : TensorView{});
    dwte.insert(dwte.end(), dshard.values().begin(), dshard.values().end());
  }
  EXPECT_TRUE(all_close("sum of shards", sum.values(), full.values(), 1e-6, 1e-6));
  EXPECT_TRUE(all_close("sharded dwte", dwte, full_dwte.values(), 1e-6, 1e-6));
  EXPECT_TRUE(all_close("dwpe", dwpe.values(), full_dwpe.values(), 0, 0));
}

TEST_P(EmbeddingOpTest, RejectsTokenOutsideVocabulary) {
  Tensor wte({4, 2}), out({1, 2, 2});
  const std::vector<std::int32_t> tokens = {1, 4};
  EXPECT_THROW(be().embedding_forward(tokens, wte, ConstTensorView{}, out), InputError);
  Tensor shard({2, 2});
  EXPECT_THROW(be().embedding_shard_forward(tokens, shard, 3, 4, ConstTensorView{}, out),
               InputError);  // shard [3, 5) outside vocabulary 4
}

INSTANTIATE_TEST_SUITE_P(Backends, EmbeddingOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

}  // namespace
}  // namespace pipetune::tensor::testing
