// How many rows of the input embedding a measured run's tokens touched: what EmbRace's sparse
// embedding gradient exchanges (ParallelPlan::sparse_embedding_gradient), and what the cost model
// otherwise estimates from uniform draws (tuner/cost/sparse_embedding_cost.hpp), an upper bound
// for text, whose tokens repeat. The engine records four counters at each step's end on every
// rank that holds a shard of the input embedding (a data-parallel replica's tokens, on each
// tensor-parallel rank's shard of the vocabulary); this reads them back.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

// The counters' names.
inline constexpr std::string_view kEmbeddingRowsTouched = "embedding rows touched";
inline constexpr std::string_view kEmbeddingTokens = "embedding tokens";
inline constexpr std::string_view kEmbeddingShardRows = "embedding shard rows";
inline constexpr std::string_view kEmbeddingVocab = "embedding vocab";

// One rank's step: the distinct rows of its shard its tokens touched, the tokens it embedded
// (all of them, in its shard or not), its shard's rows and the model's vocabulary.
struct EmbeddingRowsSample {
  std::int32_t rank = 0;
  int step = 0;  // 0-based, in the order the rank's samples came
  double touched = 0.0, tokens = 0.0, shard_rows = 0.0, vocab = 0.0;
};

struct EmbeddingRows {
  std::vector<EmbeddingRowsSample> samples;  // by rank, then step
  bool empty() const { return samples.empty(); }
};

// The samples in `trace` (empty when it has none: a run recorded before the engine counted
// them). Throws AnalysisError when a rank's four series have different numbers of samples (a run
// cut short mid-step).
EmbeddingRows embedding_rows(const Trace& trace);

}  // namespace pipetune::profiler::analysis
