// 1f1b (PipeDream-flush, Megatron's forward_backward_pipelining_without_interleaving,
// schedules.md a.2): rank r runs min(p - r - 1, m) warm-up forwards, then (F, BW) pairs, then the
// remaining backwards, so it holds at most p - r micro-batches of activations. With a vocabulary
// mode the work is done by one_f_one_b_vocab.cpp.
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"

namespace pipetune::schedule {

Schedule generate_1f1b(const GeneratorParams& params) {
  constexpr std::string_view kName = "1f1b";
  linear::check_sizes(kName, params);
  linear::require_single_chunk(kName, params);
  if (params.vocab != VocabMode::None) return linear::generate_1f1b_vocab(params);
  const int p = params.stages;
  const int m = params.microbatches;
  Schedule s = linear::empty_schedule(kName, p, m, 1, VocabMode::None);
  for (int r = 0; r < p; ++r) {
    auto& ops = s.ranks[static_cast<std::size_t>(r)];
    ops.reserve(2 * static_cast<std::size_t>(m));
    linear::append_one_f_one_b(ops, m, p - r - 1, OpKind::BW);
  }
  return linear::validated(std::move(s), params);
}

Schedule transformer_ops_of_1f1b_vocab(const GeneratorParams& params) {
  constexpr std::string_view kName = "1f1b";
  linear::check_sizes(kName, params);
  linear::require_single_chunk(kName, params);
  return linear::transformer_ops_of_1f1b_vocab(params);
}

}  // namespace pipetune::schedule
