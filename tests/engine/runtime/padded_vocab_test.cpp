// A padded vocabulary (ModelSpec::vocab_divisible_by, Megatron-LM's make_vocab_size_divisible_by)
// trains the same model as the unpadded one: the padding rows start at zero, their logits are
// masked out of the softmax, so the losses, the real rows' gradients and every other gradient
// equal the unpadded run's to rounding, and the padding rows' gradients and values stay exactly
// zero. Checked on one rank, under tensor and pipeline parallelism (the padding in the last TP
// shard), and with vocabulary parallelism where one shard is padding alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::runtime {
namespace {

spec::ModelSpec small_model(std::int64_t vocab, std::int64_t divisible_by) {
  spec::ModelSpec m = spec::parse_model(
      "layers = 4\nhidden = 32\nheads = 4\nffn_hidden = 64\n"
      "vocab = " +
          std::to_string(vocab) + "\nseq_len = 16\nactivation = \"gelu\"\n",
      "padded-vocab");
  m.vocab_divisible_by = divisible_by;
  return m;
}

TrainOptions options(const spec::ModelSpec& model, int tp, int pp, const std::string& vocab_mode) {
  TrainOptions o;
  o.model = model;
  o.plan.tp = tp;
  o.plan.pp = pp;
  o.plan.vocab = schedule::parse_vocab_mode(vocab_mode);
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 4;
  o.steps = 4;
  o.threads_per_rank = 1;
  o.capture_gradients = true;
  o.capture_parameters = true;
  o.watchdog_seconds = 60;
  return o;
}

// max |a - b| over max |b| of the first `count` values (1e-6 at least).
double relative_error(const tensor::Tensor& a, const tensor::Tensor& b, std::int64_t count) {
  double diff = 0.0, scale = 1e-6;
  for (std::int64_t i = 0; i < count; ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Values of rows [from, rows) of a (rows, C) tensor that are not exactly zero.
std::int64_t nonzero_rows_from(const tensor::Tensor& t, std::int64_t from) {
  const std::int64_t C = t.shape()[1];
  std::int64_t count = 0;
  for (std::int64_t i = from * C; i < t.numel(); ++i) count += t[i] != 0.0f ? 1 : 0;
  return count;
}

void expect_same_training(std::int64_t vocab, std::int64_t divisible_by, int tp, int pp,
                          const std::string& vocab_mode, std::int64_t want_rows) {
  const std::string where = "vocab " + std::to_string(vocab) + " divisible by " +
                            std::to_string(divisible_by) + ", tp " + std::to_string(tp) + " pp " +
                            std::to_string(pp) + " " + vocab_mode;
  const TrainResult plain = train(options(small_model(vocab, 1), tp, pp, vocab_mode));
  const TrainResult padded = train(options(small_model(vocab, divisible_by), tp, pp, vocab_mode));

  ASSERT_EQ(plain.steps.size(), padded.steps.size());
  for (std::size_t s = 0; s < plain.steps.size(); ++s)
    EXPECT_NEAR(padded.steps[s].loss, plain.steps[s].loss, 1e-5 * std::fabs(plain.steps[s].loss))
        << "step " << plain.steps[s].step << " (" << where << ")";

  const std::int64_t C = 32;
  ASSERT_EQ(plain.first_step_gradients.size(), padded.first_step_gradients.size()) << where;
  for (const auto& [name, want] : plain.first_step_gradients) {
    const auto it = padded.first_step_gradients.find(name);
    ASSERT_NE(it, padded.first_step_gradients.end()) << name << " (" << where << ")";
    const bool table = name == "wte" || name == "head.w";
    if (table) {
      ASSERT_EQ(it->second.shape()[0], want_rows) << name << " (" << where << ")";
      EXPECT_EQ(nonzero_rows_from(it->second, vocab), 0)
          << name << ": padding rows got a gradient (" << where << ")";
    } else {
      ASSERT_EQ(it->second.numel(), want.numel()) << name << " (" << where << ")";
    }
    // The real rows are the first vocab * C values of the padded table (row-major).
    const std::int64_t count = table ? vocab * C : want.numel();
    EXPECT_LE(relative_error(it->second, want, count), 1e-4) << name << " (" << where << ")";
  }
  for (const char* name : {"wte", "head.w"}) {
    const auto it = padded.final_parameters.find(name);
    ASSERT_NE(it, padded.final_parameters.end()) << name << " (" << where << ")";
    EXPECT_EQ(nonzero_rows_from(it->second, vocab), 0)
        << name << ": padding rows moved in training (" << where << ")";
  }
}

TEST(PaddedVocab, RoundsUpToTheMultipleTimesTheShards) {
  spec::ModelSpec m = small_model(50257, 128);
  EXPECT_EQ(spec::padded_vocab(m, 1), 50304);  // llm.c's and Megatron's GPT-2 at tp 1
  EXPECT_EQ(spec::padded_vocab(m, 2), 50432);  // a multiple of 256
  EXPECT_EQ(spec::padded_vocab(m, 8), 51200);  // of 1024
  m.vocab_divisible_by = 1;
  EXPECT_EQ(spec::padded_vocab(m, 8), 50257);  // no padding: balanced shards instead
  m.vocab = 50304;
  m.vocab_divisible_by = 128;
  EXPECT_EQ(spec::padded_vocab(m, 1), 50304);  // already a multiple: no row added
}

TEST(PaddedVocab, TrainsTheSameModelOnOneRank) {
  expect_same_training(61, 8, 1, 1, "none", 64);
}

TEST(PaddedVocab, TrainsTheSameModelUnderTensorAndPipelineParallelism) {
  // Multiple 8 x 2 shards: 64 rows, the last shard [32, 64) holding the padding [61, 64).
  expect_same_training(61, 8, 2, 2, "none", 64);
}

TEST(PaddedVocab, TrainsTheSameModelWithVocabularyParallelismAndAShardOfPaddingAlone) {
  // 40 real rows, multiple 16 x 4 shards: 64 rows in shards of 16; [48, 64) is padding alone.
  expect_same_training(40, 16, 2, 2, "vocab-1", 64);
  expect_same_training(40, 16, 2, 2, "vocab-2", 64);
}

}  // namespace
}  // namespace pipetune::runtime
