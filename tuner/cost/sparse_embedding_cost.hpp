// EmbRace's sparse embedding gradient in the cost model (ParallelPlan::sparse_embedding_gradient):
// the input embedding's gradient is reduced over DP by exchanging the rows each replica's tokens
// touched, as the engine runs it (engine/runtime/sparse_rows_reduction.hpp). Without ZeRO: an
// all-gather of the members' row counts, then one of their rows, each an index (4 bytes) and
// `width` gradient values; the dense alternative all-reduces the whole table shard. Under ZeRO
// (EmbRace's AlltoAll): each row goes to the member owning it, an all-to-all of the counts and
// one of the rows, against the table's reduce-scatter; under ZeRO-2 and 3 each micro-batch's
// backward sends its own rows, as it reduce-scatters the rest.
#pragma once

#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/collectives.hpp"

namespace pipetune::tuner {

// The rows of a table shard of `shard_rows` (of a vocabulary of `vocab`) that `tokens` tokens
// drawn uniformly touch: shard_rows (1 - (1 - 1/vocab)^tokens). Text repeats its tokens more
// than uniform draws (Zipf), so this is an upper bound on what a real batch touches.
double expected_touched_rows(double shard_rows, double vocab, double tokens);

// The same scaled by a measured factor (ExecutionOptions::embedding_rows_factor): `factor` times
// the uniform estimate, at most the shard's rows.
double measured_touched_rows(double shard_rows, double vocab, double tokens, double factor);

// The tokens one data-parallel replica embeds an iteration: global_batch / dp x seq_len.
double tokens_per_replica(const spec::ModelSpec& model, const spec::ParallelPlan& plan);

// The tokens whose rows one exchange sends: under ZeRO-2 and 3 a micro-batch's (micro_batch_size
// x seq_len, each backward exchanges its own), else the iteration's (tokens_per_replica).
double tokens_per_exchange(const spec::ModelSpec& model, const spec::ParallelPlan& plan);

// Seconds of the sparse reduction over `link` of a group of `members`, each touching `rows` rows
// `width` wide (gradient values of `grad_bytes`): the counts' all-gather and the rows'.
double sparse_rows_reduce_time(double rows, double width, double grad_bytes, int members,
                               const GroupLink& link);

// The same under ZeRO, the rows sent to their owners: the counts' all-to-all (a count per
// member) and the rows' (each member holds its rows; a row across two owners' ranges is
// neglected).
double sparse_rows_scatter_time(double rows, double width, double grad_bytes, int members,
                                const GroupLink& link);

// Whether one exchange moves fewer bytes than the dense reduction of the input table on the
// first stage would: without ZeRO members x rows x (4 + width x grad_bytes) against the
// all-reduce's 2 x table bytes; under ZeRO rows x (4 + width x grad_bytes) against the
// reduce-scatter's table bytes (each (members - 1) / members of it). The tuner tries the sparse
// gradient only then. False with dp = 1 or tied embeddings. `rows_factor`: the touched rows over
// the uniform estimate (ExecutionOptions::embedding_rows_factor).
bool sparse_embedding_may_pay(const spec::ModelSpec& model, const spec::ParallelPlan& plan,
                              double grad_bytes, double rows_factor = 1.0);

}  // namespace pipetune::tuner
