// gpipe: every rank runs all forwards, then all fused backwards (schedules.md a.1). Backwards go
// in micro-batch order so the oldest activations are freed first; the order does not change the
// iteration time. Peak activations: m micro-batches on every rank.
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"

namespace pipetune::schedule {

Schedule generate_gpipe(const GeneratorParams& params) {
  constexpr std::string_view kName = "gpipe";
  linear::check_sizes(kName, params);
  linear::require_single_chunk(kName, params);
  linear::require_no_vocab(kName, params);
  const int p = params.stages;
  const int m = params.microbatches;
  Schedule s = linear::empty_schedule(kName, p, m, 1, VocabMode::None);
  for (auto& ops : s.ranks) {
    ops.reserve(2 * static_cast<std::size_t>(m));
    for (int i = 0; i < m; ++i) ops.push_back({OpKind::F, 0, i});
    for (int i = 0; i < m; ++i) ops.push_back({OpKind::BW, 0, i});
  }
  return linear::validated(std::move(s), params);
}

}  // namespace pipetune::schedule
