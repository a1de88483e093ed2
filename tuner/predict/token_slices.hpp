// TeraPipe's dynamic programming over token-slice lengths (seed_techniques.md 5; the repository's
// latency_model.py): for a causal model, slice i of l_i tokens after a context of c_i tokens takes
// t(l_i, c_i) on a stage, and with m micro-batches over p stages an iteration takes about
//   m * sum_i t(l_i, c_i) + (p - 1) * max_i t(l_i, c_i),
// TeraPipe's formula for one batch with each slice's time counted m times. For each cap t_max on
// a slice's time, S(x) = min over the last cut y < x with t(x - y, y) <= t_max of S(y) + t(x - y,
// y) is the least sum that cuts the first x tokens; the best cap minimises m S(L) + (p - 1) t_max.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "engine/schedule/costs.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/recent_ring.hpp"

namespace pipetune::tuner {

struct TokenSlicing {
  std::vector<int> tokens;  // each slice's length; they add up to the sequence
  double estimate = 0.0;    // m * sum t + (p - 1) * max t, seconds
};

// t(l, c) on the pipeline's slowest stage: the forward and fused backward of a slice of `tokens`
// after `context` tokens of a `seq`-token sequence (CostTable::slice_cost), and its transfer each
// way (the latency whole, the bytes by its share).
double slice_time(const schedule::CostTable& costs, std::int64_t seq, std::int64_t tokens,
                  std::int64_t context);

// The slicing that minimises the estimate, its cuts on a grid of at most `grid` points of the
// sequence (TeraPipe cuts every 8 tokens; a fixed number of points keeps the search's cost the
// same for any sequence length), each a multiple of `granularity` tokens. Exact over that grid.
TokenSlicing best_token_slicing(const schedule::CostTable& costs, int stages, int microbatches,
                                std::int64_t seq, int grid = 32, int granularity = 1);

// A terapipe plan that names neither slices nor their lengths gets the best slicing's lengths
// (plan.slice_tokens; whole multiples of the rows sequence parallelism splits over tp), so the
// schedule `predict` and `tune` simulate, and `train` runs, is the one the costs chose. Any other
// plan is left as it is.
void choose_token_slices(spec::ParallelPlan& plan, std::int64_t seq,
                         const schedule::CostTable& costs);

// choose_token_slices through the slicings of the latest distinct inputs: a search prices many
// terapipe plans whose stages cost the same per slice (ZeRO stages, placements, offload of the
// optimizer), and each choice is a dynamic programme over the grid's cuts. One per thread.
class TokenSlicingCache {
 public:
  void choose(spec::ParallelPlan& plan, std::int64_t seq, const schedule::CostTable& costs);

 private:
  // What best_token_slicing reads (the sizes, the granularity, the distinct stages' slice terms
  // and the transfer), and the lengths it chose.
  RecentRing<std::pair<std::vector<double>, std::vector<int>>, 32> recent_;
};

}  // namespace pipetune::tuner
