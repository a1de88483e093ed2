// EmbRace's sparse embedding gradient in the cost model (ParallelPlan::sparse_embedding_gradient):
// the input embedding's gradient is reduced over DP by exchanging the rows each replica's tokens
// touched, as the engine runs it (engine/runtime/sparse_rows_reduction.hpp): an all-gather of the
// members' row counts, then one of their rows, each an index (4 bytes) and `width` gradient
// values. The dense alternative all-reduces the whole table shard.
#pragma once

#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/collectives.hpp"

namespace pipetune::tuner {

// The rows of a table shard of `shard_rows` (of a vocabulary of `vocab`) that `tokens` tokens
// drawn uniformly touch: shard_rows (1 - (1 - 1/vocab)^tokens). Text repeats its tokens more
// than uniform draws (Zipf), so this is an upper bound on what a real batch touches.
double expected_touched_rows(double shard_rows, double vocab, double tokens);

// The tokens one data-parallel replica embeds an iteration: global_batch / dp x seq_len.
double tokens_per_replica(const spec::ModelSpec& model, const spec::ParallelPlan& plan);

// Seconds of the sparse reduction over `link` of a group of `members`, each touching `rows` rows
// `width` wide (gradient values of `grad_bytes`): the counts' all-gather and the rows'.
double sparse_rows_reduce_time(double rows, double width, double grad_bytes, int members,
                               const GroupLink& link);

// Whether the rows' all-gather moves fewer bytes than the all-reduce of the input table on the
// first stage would (members x rows x (4 + width x grad_bytes) against 2 x table bytes): the
// tuner tries the sparse gradient only then. False with dp = 1, under ZeRO, or tied embeddings.
bool sparse_embedding_may_pay(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                              double grad_bytes);

}  // namespace pipetune::tuner
