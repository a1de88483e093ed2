// Softmax cross-entropy through the Backend interface: the loss against a double reference, the
// gradient against finite differences, both against a double reference on GPT-2's vocabulary,
// and the vocabulary-parallel protocol (2 and 3 uneven shards, reductions done by hand here as
// the communicator would) against the unsharded op.
#include <algorithm>

#include "tests/engine/tensor/backend_test_support.hpp"

namespace pipetune::tensor::testing {
namespace {

class CrossEntropyOpTest : public BackendTest {};

TEST_P(CrossEntropyOpTest, LossMatchesReference) {
  const std::int64_t N = 5, V = 7;
  Tensor logits = random_tensor({N, V}, rng, 3.0f);  // (N, V)
  const auto targets = random_ids(N, V, rng);        // (N)
  Tensor losses({N});
  const float mean = be().cross_entropy_forward(logits, targets, losses);
  std::vector<float> expected;
  double total = 0.0;
  for (std::int64_t n = 0; n < N; ++n) {
    double s = 0.0;
    for (std::int64_t j = 0; j < V; ++j) s += std::exp(static_cast<double>(logits[n * V + j]));
    const double l = std::log(s) - logits[n * V + targets[n]];
    expected.push_back(static_cast<float>(l));
    total += l;
  }
  EXPECT_TRUE(all_close_elementwise("losses", losses.values(), expected, 1e-5, 1e-6));
  EXPECT_NEAR(mean, total / N, 1e-5);
}

// Rows as long as GPT-2's vocabulary (a device backend reduces them in blocks) and a row of two,
// against softmax in double: the losses, the gradient alone (each element to 1e-4 relative, the
// 1e-6-sized ones included) and the gradient added to what dlogits held.
TEST_P(CrossEntropyOpTest, LossAndGradientMatchADoubleReferenceOnLongRows) {
  for (const auto& [N, V] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1, 2}, {37, 1000}, {16, 50257}}) {
    const Tensor logits = random_tensor({N, V}, rng, 3.0f);
    const auto targets = random_ids(N, static_cast<std::int32_t>(V), rng);
    const float grad_scale = 1.0f / static_cast<float>(N);
    std::vector<float> want_losses, want_grad(static_cast<std::size_t>(N * V));
    double total = 0.0;
    for (std::int64_t n = 0; n < N; ++n) {
      const float* row = logits.data() + n * V;
      const double mx = *std::max_element(row, row + V);
      double sum = 0.0;
      for (std::int64_t j = 0; j < V; ++j) sum += std::exp(row[j] - mx);
      const double loss = std::log(sum) + mx - row[targets[n]];
      want_losses.push_back(static_cast<float>(loss));
      total += loss;
      for (std::int64_t j = 0; j < V; ++j) {
        const double p = std::exp(row[j] - mx) / sum - (j == targets[n] ? 1.0 : 0.0);
        want_grad[n * V + j] = static_cast<float>(p * grad_scale);
      }
    }
    Tensor losses({N}), grad({N, V});
    const Tensor start = random_tensor({N, V}, rng);
    Tensor added = start;
    const float mean = be().cross_entropy_forward(logits, targets, losses);
    be().cross_entropy_backward(logits, targets, grad_scale, grad);
    be().cross_entropy_backward(logits, targets, grad_scale, added);
    std::vector<float> want_added = start.values();
    for (std::size_t i = 0; i < want_added.size(); ++i) want_added[i] += want_grad[i];
    const std::string at = " (N " + std::to_string(N) + ", V " + std::to_string(V) + ")";
    EXPECT_NEAR(mean, total / N, 1e-5 * total / N) << at;
    EXPECT_TRUE(all_close_elementwise("losses" + at, losses.values(), want_losses, 1e-5, 1e-6));
    EXPECT_TRUE(all_close_elementwise("dlogits" + at, grad.values(), want_grad, 1e-4, 1e-12));
    EXPECT_TRUE(
        all_close_elementwise("dlogits added" + at, added.values(), want_added, 1e-5, 1e-6));
  }
}

TEST_P(CrossEntropyOpTest, BackwardMatchesFiniteDifferences) {
  const std::int64_t N = 4, V = 6;
  Tensor logits = random_tensor({N, V}, rng, 2.0f);
  const auto targets = random_ids(N, V, rng);
  auto loss = [&] {
    Tensor losses({N});
    return static_cast<double>(be().cross_entropy_forward(logits, targets, losses));
  };
  Tensor dlogits({N, V});
  be().cross_entropy_backward(logits, targets, 1.0f / N, dlogits);
  EXPECT_TRUE(grad_close("dlogits", dlogits, numeric_grad(loss, logits)));
}

TEST_P(CrossEntropyOpTest, RejectsTargetOutsideVocabulary) {
  Tensor logits({2, 3}), losses({2});
  const std::vector<std::int32_t> targets = {0, 3};
  EXPECT_THROW(be().cross_entropy_forward(logits, targets, losses), InputError);
}

// Runs the vocabulary-parallel protocol over shards with the given boundaries and compares the
// loss and the concatenated gradient with the unsharded op to 1e-6 relative, or to the backend's
// elementwise floor (`floor`) where that is larger.
void check_sharded_equals_unsharded(Backend& be, std::mt19937& rng,
                                    const std::vector<std::int64_t>& bounds, double floor) {
  const double rtol = std::max(1e-6, floor);
  const std::int64_t N = 6, V = bounds.back();
  Tensor logits = random_tensor({N, V}, rng, 4.0f);  // (N, V)
  const auto targets = random_ids(N, static_cast<std::int32_t>(V), rng);
  Tensor full_losses({N}), full_grad({N, V});
  const float full_mean = be.cross_entropy_forward(logits, targets, full_losses);
  be.cross_entropy_backward(logits, targets, 1.0f / N, full_grad);

  const std::size_t S = bounds.size() - 1;
  std::vector<Tensor> shard(S), lmax(S), lsum(S), tlog(S);
  for (std::size_t s = 0; s < S; ++s) {
    const std::int64_t lo = bounds[s], w = bounds[s + 1] - lo;
    shard[s] = Tensor({N, w});  // (N, hi - lo)
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t j = 0; j < w; ++j) shard[s][n * w + j] = logits[n * V + lo + j];
    }
    lmax[s] = Tensor({N});
    lsum[s] = Tensor({N});
    tlog[s] = Tensor({N});
    be.vocab_ce_local_stats(shard[s], targets, lo, lmax[s], lsum[s], tlog[s]);
  }
  Tensor gmax({N}), gsum({N}), gtarget({N});  // the all-reduces, done by hand
  for (std::int64_t n = 0; n < N; ++n) {
    gmax[n] = lmax[0][n];
    for (std::size_t s = 1; s < S; ++s) gmax[n] = std::max(gmax[n], lmax[s][n]);
  }
  for (std::size_t s = 0; s < S; ++s) {
    be.vocab_ce_rescale_sum(lmax[s], gmax, lsum[s]);
    for (std::int64_t n = 0; n < N; ++n) {
      gsum[n] += lsum[s][n];
      gtarget[n] += tlog[s][n];
    }
  }
  Tensor losses({N});
  const float mean = be.vocab_ce_loss(gmax, gsum, gtarget, losses);
  EXPECT_NEAR(mean, full_mean, rtol * std::fabs(full_mean));
  EXPECT_TRUE(
      all_close_floored("sharded losses", losses.values(), full_losses.values(), 1e-6, 0, floor));

  std::vector<float> grad(static_cast<std::size_t>(N * V));
  for (std::size_t s = 0; s < S; ++s) {
    const std::int64_t lo = bounds[s], w = bounds[s + 1] - lo;
    Tensor d({N, w});
    be.vocab_ce_backward(shard[s], targets, lo, gmax, gsum, 1.0f / N, d);
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t j = 0; j < w; ++j) grad[n * V + lo + j] = d[n * w + j];
    }
    // Written over the logits themselves (as the engine does): the same values (bit for bit on
    // the CPU).
    Tensor in_place = shard[s];
    be.vocab_ce_backward(in_place, targets, lo, gmax, gsum, 1.0f / N, in_place,
                         GradientWrite::overwrite);
    EXPECT_TRUE(all_close_floored("dlogits in place", in_place.values(), d.values(), 0, 0, floor));
    // Adding to the logits in place is refused: it would read what it wrote.
    EXPECT_THROW(be.vocab_ce_backward(in_place, targets, lo, gmax, gsum, 1.0f / N, in_place),
                 InputError);
  }
  EXPECT_TRUE(all_close_floored("sharded dlogits", grad, full_grad.values(), 1e-6, 1e-9, floor));
}

TEST_P(CrossEntropyOpTest, TwoUnevenVocabShardsEqualUnsharded) {
  check_sharded_equals_unsharded(be(), rng, {0, 4, 11}, floors().elementwise);
}

TEST_P(CrossEntropyOpTest, ThreeUnevenVocabShardsEqualUnsharded) {
  check_sharded_equals_unsharded(be(), rng, {0, 2, 9, 13}, floors().elementwise);
}

// Algorithm 2 of vocabulary parallelism: the hidden state's gradient assembled from each shard's
// weighted rows A = exp(l - shard max) W and target rows W_t (vocab_ce_numerators,
// vocab_ce_input_grad) equals the unsharded one, (softmax - onehot) W / N, for shards [0, 4) and
// [4, 9) of a 9-row output layer W (V, C).
TEST_P(CrossEntropyOpTest, AlgorithmTwoInputGradientEqualsTheUnshardedOne) {
  const std::int64_t N = 5, C = 4, V = 9, B = 1, T = N;
  const std::vector<std::int64_t> bounds = {0, 4, 9};
  Tensor logits = random_tensor({N, V}, rng, 3.0f);  // (N, V)
  Tensor w = random_tensor({V, C}, rng);             // (V, C)
  const auto targets = random_ids(N, static_cast<std::int32_t>(V), rng);
  const float scale = 1.0f / N;
  Tensor dlogits({N, V}), want({N, C});
  be().cross_entropy_backward(logits, targets, scale, dlogits);
  be().linear_backward_input(dlogits, w, want);

  const std::size_t S = bounds.size() - 1;
  std::vector<Tensor> shard(S), rows(S), lmax(S), lsum(S);
  Tensor gmax({N}), gsum({N}), unused({N});
  for (std::size_t s = 0; s < S; ++s) {
    const std::int64_t lo = bounds[s], width = bounds[s + 1] - lo;
    shard[s] = Tensor({N, width});  // (N, width)
    rows[s] = Tensor({width, C});   // W's rows [lo, hi)
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t j = 0; j < width; ++j) shard[s][n * width + j] = logits[n * V + lo + j];
    for (std::int64_t i = 0; i < width * C; ++i) rows[s][i] = w[lo * C + i];
    lmax[s] = Tensor({N});
    lsum[s] = Tensor({N});
    be().vocab_ce_local_stats(shard[s], targets, lo, lmax[s], lsum[s], unused);
  }
  for (std::int64_t n = 0; n < N; ++n) gmax[n] = std::max(lmax[0][n], lmax[1][n]);
  for (std::size_t s = 0; s < S; ++s) {
    Tensor rescaled = lsum[s];
    be().vocab_ce_rescale_sum(lmax[s], gmax, rescaled);
    for (std::int64_t n = 0; n < N; ++n) gsum[n] += rescaled[n];
  }
  Tensor got({N, C});
  for (std::size_t s = 0; s < S; ++s) {
    const std::int64_t lo = bounds[s], width = bounds[s + 1] - lo;
    Tensor p({N, width}), a({N, C}), target_rows({B, T, C});
    be().vocab_ce_numerators(shard[s], lmax[s], p);
    be().linear_backward_input(p, rows[s], a);
    be().embedding_shard_forward(targets, rows[s], lo, V, {}, target_rows);
    be().vocab_ce_input_grad(lmax[s], gmax, gsum, a, Tensor({N, C}, target_rows.values()), scale,
                             got);
  }
  EXPECT_TRUE(all_close_reduction("dx", got.values(), want.values(), 1e-5, 1e-7));
}

INSTANTIATE_TEST_SUITE_P(Backends, CrossEntropyOpTest, ::testing::ValuesIn(all_backends()),
                         backend_case_name);

}  // namespace
}  // namespace pipetune::tensor::testing
