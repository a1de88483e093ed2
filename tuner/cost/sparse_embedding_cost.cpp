#include "tuner/cost/sparse_embedding_cost.hpp"

#include <algorithm>
#include <cmath>

namespace pipetune::tuner {

double expected_touched_rows(double shard_rows, double vocab, double tokens) {
  if (shard_rows <= 0.0 || vocab <= 0.0 || tokens <= 0.0) return 0.0;
  // (1 - 1/V)^n as exp(n log1p(-1/V)): exact for a vocabulary of one row too (touched fully).
  const double untouched = vocab <= 1.0 ? 0.0 : std::exp(tokens * std::log1p(-1.0 / vocab));
  return shard_rows * (1.0 - untouched);
}

double measured_touched_rows(double shard_rows, double vocab, double tokens, double factor) {
  return std::min(shard_rows, factor * expected_touched_rows(shard_rows, vocab, tokens));
}

double tokens_per_replica(const spec::ModelSpec& model, const spec::ParallelPlan& plan) {
  return static_cast<double>(plan.global_batch) / std::max(1, plan.dp) *
         static_cast<double>(model.seq_len);
}

double tokens_per_exchange(const spec::ModelSpec& model, const spec::ParallelPlan& plan) {
  if (plan.zero_stage >= 2)
    return static_cast<double>(plan.micro_batch_size) * static_cast<double>(model.seq_len);
  return tokens_per_replica(model, plan);
}

double sparse_rows_reduce_time(double rows, double width, double grad_bytes, int members,
                               const GroupLink& link) {
  if (members <= 1) return 0.0;
  const double n = members;
  return collective_time(Collective::AllGather, n * 4.0, link) +
         collective_time(Collective::AllGather, n * rows * (4.0 + width * grad_bytes), link);
}

double sparse_rows_scatter_time(double rows, double width, double grad_bytes, int members,
                                const GroupLink& link) {
  if (members <= 1) return 0.0;
  return collective_time(Collective::AllToAll, members * 4.0, link) +
         collective_time(Collective::AllToAll, rows * (4.0 + width * grad_bytes), link);
}

bool sparse_embedding_may_pay(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                              double grad_bytes, double rows_factor) {
  if (plan.dp <= 1 || model.tied_embeddings) return false;
  const int shards = plan.vocab_shards();
  const double rows = static_cast<double>(spec::padded_vocab(model, shards)) / shards;
  const double h = static_cast<double>(model.hidden);
  const double touched = measured_touched_rows(rows, static_cast<double>(model.vocab),
                                               tokens_per_exchange(model, plan), rows_factor);
  const double record = 4.0 + h * grad_bytes, table = rows * h * grad_bytes;
  if (plan.zero_stage >= 1) return touched * record < table;
  return plan.dp * touched * record < 2.0 * table;
}

}  // namespace pipetune::tuner
