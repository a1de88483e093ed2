// CpuBackend determinism across thread counts: every op the pool runs gives bit-identical
// results on 1 and 3 threads. Shapes are chosen so that 3 threads really split the work (rows,
// columns, (batch, head) pairs, fixed chunks), with sizes that are not multiples of the vector
// width or the tiles (tails everywhere). Accumulating outputs start from non-zero values.
#include <array>
#include <cstring>

#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::tensor::testing {
namespace {

::testing::AssertionResult bit_identical(const std::string& name, const Tensor& a,
                                         const Tensor& b) {
  if (a.numel() != b.numel()) {
    return ::testing::AssertionFailure() << name << ": sizes " << a.numel() << " != " << b.numel();
  }
  for (std::int64_t i = 0; i < a.numel(); ++i) {
    if (std::memcmp(&a.values()[i], &b.values()[i], sizeof(float)) != 0) {
      return ::testing::AssertionFailure() << name << ": 1 thread and 3 threads differ at [" << i
                                           << "]: " << a[i] << " vs " << b[i];
    }
  }
  return ::testing::AssertionSuccess();
}

class CpuThreadsTest : public ::testing::Test {
 protected:
  void SetUp() override { set_blas_threads(1); }
  CpuBackend one{1};
  CpuBackend three{3};
  std::mt19937 rng{99};
};

TEST_F(CpuThreadsTest, BackendReportsItsThreads) {
  EXPECT_EQ(one.threads(), 1);
  EXPECT_EQ(three.threads(), 3);
  EXPECT_EQ(CpuBackend().threads(), 1);
  EXPECT_EQ(CpuBackend(0).threads(), 1);
}

TEST_F(CpuThreadsTest, ElementwiseOps) {
  const std::int64_t n = 3 * 32768 + 77;  // three units of the elementwise grain and a tail
  const Tensor a = random_tensor({n}, rng), b = random_tensor({n}, rng);
  Tensor out1({n}), out3({n});
  one.add(a, b, out1);
  three.add(a, b, out3);
  EXPECT_TRUE(bit_identical("add", out1, out3));
  one.accumulate(out1, a);
  three.accumulate(out3, a);
  EXPECT_TRUE(bit_identical("accumulate", out1, out3));
  one.scale(out1, 0.37f);
  three.scale(out3, 0.37f);
  EXPECT_TRUE(bit_identical("scale", out1, out3));
  three.zero(out3);
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(out3[i], 0.0f) << "zero at " << i;
}

TEST_F(CpuThreadsTest, LinearBiasForwardAndBiasGradient) {
  const std::int64_t N = 61, IN = 24, OUT = 203;  // rows over 16-row units, columns over 64
  const Tensor x = random_tensor({N, IN}, rng), w = random_tensor({OUT, IN}, rng);
  const Tensor b = random_tensor({OUT}, rng), dy = random_tensor({N, OUT}, rng);
  Tensor y1({N, OUT}), y3({N, OUT});
  one.linear_forward(x, w, b, y1);
  three.linear_forward(x, w, b, y3);
  EXPECT_TRUE(bit_identical("y", y1, y3));
  Tensor dw1 = random_tensor({OUT, IN}, rng), db1 = random_tensor({OUT}, rng);
  Tensor dw3 = dw1, db3 = db1;
  one.linear_backward_weight(dy, x, dw1, db1);
  three.linear_backward_weight(dy, x, dw3, db3);
  EXPECT_TRUE(bit_identical("dw", dw1, dw3));
  EXPECT_TRUE(bit_identical("db", db1, db3));
}

TEST_F(CpuThreadsTest, EmbeddingForwardAndScatterAdd) {
  const std::int64_t B = 3, T = 23, C = 203, V = 11;  // few ids: many tokens hit one row
  const Tensor wte = random_tensor({V, C}, rng), wpe = random_tensor({T, C}, rng);
  const auto tokens = random_ids(B * T, V, rng);
  const Tensor dout = random_tensor({B, T, C}, rng);
  Tensor out1({B, T, C}), out3({B, T, C});
  one.embedding_forward(tokens, wte, wpe, out1);
  three.embedding_forward(tokens, wte, wpe, out3);
  EXPECT_TRUE(bit_identical("out", out1, out3));
  Tensor dwte1 = random_tensor({V, C}, rng), dwpe1 = random_tensor({T, C}, rng);
  Tensor dwte3 = dwte1, dwpe3 = dwpe1;
  one.embedding_backward_weight(tokens, dout, dwte1, dwpe1);
  three.embedding_backward_weight(tokens, dout, dwte3, dwpe3);
  EXPECT_TRUE(bit_identical("dwte", dwte1, dwte3));
  EXPECT_TRUE(bit_identical("dwpe", dwpe1, dwpe3));

  // vocabulary shard [4, 9) without the position term
  const Tensor shard = random_tensor({5, C}, rng);
  one.embedding_shard_forward(tokens, shard, 4, V, ConstTensorView{}, out1);
  three.embedding_shard_forward(tokens, shard, 4, V, ConstTensorView{}, out3);
  EXPECT_TRUE(bit_identical("shard out", out1, out3));
  Tensor ds1 = random_tensor({5, C}, rng);
  Tensor ds3 = ds1;
  one.embedding_shard_backward_weight(tokens, dout, 4, V, ds1, TensorView{});
  three.embedding_shard_backward_weight(tokens, dout, 4, V, ds3, TensorView{});
  EXPECT_TRUE(bit_identical("shard dwte", ds1, ds3));
}

TEST_F(CpuThreadsTest, LayerNormForwardAndBackward) {
  const std::int64_t N = 70, C = 203;
  const Tensor x = random_tensor({N, C}, rng, 2.0f), w = random_tensor({C}, rng);
  const Tensor b = random_tensor({C}, rng), dy = random_tensor({N, C}, rng);
  Tensor y1({N, C}), y3({N, C}), m1({N}), m3({N}), r1({N}), r3({N});
  one.layernorm_forward(x, w, b, y1, m1, r1);
  three.layernorm_forward(x, w, b, y3, m3, r3);
  EXPECT_TRUE(bit_identical("y", y1, y3));
  EXPECT_TRUE(bit_identical("mean", m1, m3));
  EXPECT_TRUE(bit_identical("rstd", r1, r3));
  Tensor dx1 = random_tensor({N, C}, rng);
  Tensor dx3 = dx1;
  one.layernorm_backward_input(dy, x, w, m1, r1, dx1);
  three.layernorm_backward_input(dy, x, w, m1, r1, dx3);
  EXPECT_TRUE(bit_identical("dx", dx1, dx3));
  Tensor dw1 = random_tensor({C}, rng), db1 = random_tensor({C}, rng);
  Tensor dw3 = dw1, db3 = db1;
  one.layernorm_backward_weight(dy, x, m1, r1, dw1, db1);
  three.layernorm_backward_weight(dy, x, m1, r1, dw3, db3);
  EXPECT_TRUE(bit_identical("dw", dw1, dw3));
  EXPECT_TRUE(bit_identical("db", db1, db3));
}

TEST_F(CpuThreadsTest, Gelu) {
  const std::int64_t n = 3 * 16384 + 5;
  const Tensor x = random_tensor({n}, rng, 3.0f), dy = random_tensor({n}, rng);
  Tensor y1({n}), y3({n});
  one.gelu_forward(x, y1);
  three.gelu_forward(x, y3);
  EXPECT_TRUE(bit_identical("y", y1, y3));
  Tensor dx1 = random_tensor({n}, rng);
  Tensor dx3 = dx1;
  one.gelu_backward_input(dy, x, dx1);
  three.gelu_backward_input(dy, x, dx3);
  EXPECT_TRUE(bit_identical("dx", dx1, dx3));
}

TEST_F(CpuThreadsTest, AttentionForwardAndBackward) {
  // 6 (batch, head) pairs; T = 37 and HS = 20 leave partial row tiles, partial key blocks and
  // padded head columns.
  for (const auto& [B, T, NH, HS] :
       std::vector<std::array<std::int64_t, 4>>{{2, 37, 3, 20}, {1, 70, 4, 16}}) {
    const std::int64_t C = NH * HS;
    const Tensor qkv = random_tensor({B, T, 3 * C}, rng), dout = random_tensor({B, T, C}, rng);
    Tensor out1({B, T, C}), out3({B, T, C}), att1({B, NH, T, T}), att3({B, NH, T, T});
    one.attention_forward(qkv, NH, out1, att1);
    three.attention_forward(qkv, NH, out3, att3);
    EXPECT_TRUE(bit_identical("out", out1, out3)) << "T " << T;
    EXPECT_TRUE(bit_identical("att", att1, att3)) << "T " << T;
    Tensor d1 = random_tensor({B, T, 3 * C}, rng);
    Tensor d3 = d1;
    one.attention_backward_input(dout, qkv, att1, NH, d1);
    three.attention_backward_input(dout, qkv, att1, NH, d3);
    EXPECT_TRUE(bit_identical("dqkv", d1, d3)) << "T " << T;
  }
}

TEST_F(CpuThreadsTest, CrossEntropyAndVocabParallelHelpers) {
  const std::int64_t N = 7, V = 1001;
  const Tensor logits = random_tensor({N, V}, rng, 3.0f);
  const auto targets = random_ids(N, V, rng);
  Tensor l1({N}), l3({N});
  const float mean1 = one.cross_entropy_forward(logits, targets, l1);
  const float mean3 = three.cross_entropy_forward(logits, targets, l3);
  EXPECT_EQ(std::memcmp(&mean1, &mean3, sizeof mean1), 0) << mean1 << " vs " << mean3;
  EXPECT_TRUE(bit_identical("losses", l1, l3));
  Tensor g1 = random_tensor({N, V}, rng);
  Tensor g3 = g1;
  one.cross_entropy_backward(logits, targets, 1.0f / N, g1);
  three.cross_entropy_backward(logits, targets, 1.0f / N, g3);
  EXPECT_TRUE(bit_identical("dlogits", g1, g3));

  // one shard [300, 1001) of the vocabulary through the vocabulary-parallel helpers
  const std::int64_t lo = 300, w = V - lo;
  Tensor shard({N, w});
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t j = 0; j < w; ++j) shard[n * w + j] = logits[n * V + lo + j];
  }
  Tensor mx1({N}), mx3({N}), s1({N}), s3({N}), t1({N}), t3({N});
  one.vocab_ce_local_stats(shard, targets, lo, mx1, s1, t1);
  three.vocab_ce_local_stats(shard, targets, lo, mx3, s3, t3);
  EXPECT_TRUE(bit_identical("local_max", mx1, mx3));
  EXPECT_TRUE(bit_identical("local_sum", s1, s3));
  EXPECT_TRUE(bit_identical("target_logit", t1, t3));
  Tensor gmax = mx1, gsum = s1;
  for (std::int64_t n = 0; n < N; ++n) gmax[n] += 0.5f;  // a larger "global" max
  one.vocab_ce_rescale_sum(mx1, gmax, gsum);
  Tensor d1 = random_tensor({N, w}, rng);
  Tensor d3 = d1;
  one.vocab_ce_backward(shard, targets, lo, gmax, gsum, 0.25f, d1);
  three.vocab_ce_backward(shard, targets, lo, gmax, gsum, 0.25f, d3);
  EXPECT_TRUE(bit_identical("dlogits_shard", d1, d3));
}

TEST_F(CpuThreadsTest, AdamWAndGradSumSquares) {
  const std::int64_t n = 3 * 16384 + 11;
  AdamWConfig cfg;
  cfg.weight_decay = 0.1f;
  Tensor p1 = random_tensor({n}, rng), m1 = random_tensor({n}, rng, 0.1f);
  Tensor v1 = random_tensor({n}, rng, 0.1f);
  for (float& x : v1.values()) x = std::fabs(x);
  Tensor p3 = p1, m3 = m1, v3 = v1;
  const Tensor g = random_tensor({n}, rng);
  for (std::int64_t step = 3; step <= 4; ++step) {
    one.adamw_step(p1, g, m1, v1, cfg, step);
    three.adamw_step(p3, g, m3, v3, cfg, step);
  }
  EXPECT_TRUE(bit_identical("params", p1, p3));
  EXPECT_TRUE(bit_identical("m", m1, m3));
  EXPECT_TRUE(bit_identical("v", v1, v3));
  const double s1 = one.grad_sum_squares(g), s3 = three.grad_sum_squares(g);
  EXPECT_EQ(std::memcmp(&s1, &s3, sizeof s1), 0) << s1 << " vs " << s3;
  double ref = 0.0;
  for (float x : g.values()) ref += static_cast<double>(x) * x;
  EXPECT_NEAR(s1, ref, 1e-9 * ref);
}

TEST_F(CpuThreadsTest, RepeatedCallsReuseScratchAndGiveTheSameResult) {
  const std::int64_t B = 2, T = 40, NH = 3, HS = 8, C = NH * HS;
  const Tensor qkv = random_tensor({B, T, 3 * C}, rng);
  Tensor out_a({B, T, C}), out_b({B, T, C}), att({B, NH, T, T});
  three.attention_forward(qkv, NH, out_a, att);
  Tensor big_qkv = random_tensor({1, 90, 3 * C}, rng), big_out({1, 90, C}),
         big_att({1, NH, 90, 90});
  three.attention_forward(big_qkv, NH, big_out, big_att);  // grows the scratch
  three.attention_forward(qkv, NH, out_b, att);
  EXPECT_TRUE(bit_identical("out", out_a, out_b));
}

}  // namespace
}  // namespace pipetune::tensor::testing
