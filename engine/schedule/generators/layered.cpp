// layered: layered gradient accumulation (Lamy-Poirier, arXiv 2106.02679; seed_techniques.md 7),
// the breadth-first order PyTorch calls looped BFS. Each rank runs every micro-batch through one
// layer group before the next: for each chunk c, F(c, 0..m-1); then backwards in reverse chunk
// order, for each chunk c from v-1 down, BW(c, 0..m-1). A group's weight gradients are then
// complete as soon as its last backward ends, and its data-parallel reduction (R, added after it)
// runs beside the backwards of the groups still to come: only the last group's reduction on each
// rank is left after the pipeline.
//
// With modular placement (--modular, spec::modular_chunks: one layer per group, layer l on rank
// l mod p) this is the
// paper's modular pipeline parallelism. Iteration with equal costs f, b per chunk, m >= p and
// free transfers: v m (f + b) + (p - 1)(f + b), the bubble of interleaving, (p - 1)(F + B) / v
// per stage, plus the last group's reduction when the others hide behind the backwards (a
// reduction of rho <= m b each). Peak activations: all m micro-batches of every chunk, as GPipe
// (the paper keeps only each layer's input and recomputes; plan.recompute = "full" is that).
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/linear_common.hpp"

namespace pipetune::schedule {

Schedule generate_layered(const GeneratorParams& params) {
  constexpr std::string_view kName = "layered";
  linear::check_sizes(kName, params);
  linear::require_no_vocab(kName, params);
  const int p = params.stages;
  const int m = params.microbatches;
  const int v = params.chunks > 0 ? params.chunks : default_chunks(kName);
  Schedule s = linear::empty_schedule(kName, p, m, v, VocabMode::None);
  for (auto& ops : s.ranks) {
    ops.reserve(2 * static_cast<std::size_t>(m) * static_cast<std::size_t>(v) +
                static_cast<std::size_t>(v));
    for (int c = 0; c < v; ++c)
      for (int i = 0; i < m; ++i) ops.push_back({OpKind::F, static_cast<std::int16_t>(c), i});
    for (int c = v - 1; c >= 0; --c)
      for (int i = 0; i < m; ++i) ops.push_back({OpKind::BW, static_cast<std::int16_t>(c), i});
  }
  add_gradient_reductions(s);
  return linear::validated(std::move(s), params);
}

}  // namespace pipetune::schedule
