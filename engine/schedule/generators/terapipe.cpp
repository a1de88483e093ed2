// terapipe: token-level pipelining (TeraPipe, arXiv 2102.07988; seed_techniques.md 5). Each
// micro-batch is cut along the sequence into k slices, and the slices go down the pipeline one
// after another, GPipe-style: every rank runs all forwards (micro-batch by micro-batch, each one's
// slices in order), then all fused backwards (micro-batch by micro-batch, each one's slices in
// reverse, since a later slice's attention adds to an earlier one's key and value gradients).
//
// With equal slices of equal cost (F/k and B/k per unit) the iteration takes
//   (m k + p - 1) (F + B) / k = m (F + B) + (p - 1) (F + B) / k,
// the GPipe bubble divided by k, and the bubble fraction is (p - 1) / (m k + p - 1). Real slices
// are not equal: a slice's attention grows with the context before it, and each op pays fixed
// costs (kernel launches, collective latencies) whatever its size, which TeraPipe's dynamic
// programming over uneven slices weighs (tuner/search/token_slices.hpp).
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"

namespace pipetune::schedule {

Schedule generate_terapipe(const GeneratorParams& params) {
  constexpr std::string_view kName = "terapipe";
  linear::check_sizes(kName, params);
  linear::require_single_chunk(kName, params);
  linear::require_no_vocab(kName, params);
  const int k = slice_count(kName, params.slices, params.slice_tokens);
  const int p = params.stages;
  const int m = params.microbatches;
  Schedule s = linear::empty_schedule(kName, p, m * k, 1, VocabMode::None);
  s.slices = k;
  s.slice_tokens = params.slice_tokens;
  for (auto& ops : s.ranks) {
    ops.reserve(2 * static_cast<std::size_t>(m) * static_cast<std::size_t>(k));
    for (int u = 0; u < m * k; ++u) ops.push_back({OpKind::F, 0, u});
    for (int mb = 0; mb < m; ++mb)
      for (int j = k - 1; j >= 0; --j) ops.push_back({OpKind::BW, 0, mb * k + j});
  }
  return linear::validated(std::move(s), params);
}

}  // namespace pipetune::schedule
