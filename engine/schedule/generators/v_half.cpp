// v-half: the V-Half schedule of "Pipeline Parallelism with Controllable Memory" (schedules.md
// a.8): the V-Half building block, W in free slots, squeezed, with B/W split. Its activation
// memory is about half of 1F1B's at a bubble of about half of 1F1B's.
//
// With vocabulary parallelism (vocab-1 / vocab-2, branch v-half-vocab, schedules.md b.5) the
// block is stretched by one (vocab-2) or two (vocab-1) six-slot periods between the forward and
// the backward half, not squeezed, and S/T/IF/IB are added on every rank
// (v_half_vocab.cpp).
#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/v_building_block.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {

// The V-Half block's transformer ops (what generate_v_half builds before any vocabulary pass).
Schedule transformer_ops_of_v_half(const GeneratorParams& params) {
  check_v_params(params, "v-half", /*vocab_ok=*/true);
  if (params.vocab == VocabMode::Interlaced)
    throw ScheduleError({"plan.vocab", "plan.schedule"},
                        "v-half supports vocabulary modes vocab-1 and vocab-2, not interlaced");
  const bool vocab = params.vocab != VocabMode::None;
  // The extra room holds S and T and their collectives between a micro-batch's last forward and
  // its first backward (b.5: interval += 6 for Algorithm 2, += 12 for Algorithm 1).
  const int extra = params.vocab == VocabMode::Vocab1 ? 12 : vocab ? 6 : 0;
  Schedule s = make_v_schedule(params, "v-half");
  s.ranks = v_block_order(VKind::Half, params.stages, params.microbatches, extra,
                          /*squeeze=*/!vocab);
  return s;
}

Schedule generate_v_half(const GeneratorParams& params) {
  Schedule s = transformer_ops_of_v_half(params);
  // The passes are merged into each rank's list by time: the transformer ops keep their order.
  if (params.vocab != VocabMode::None)
    add_v_half_vocab_passes(s, params.vocab, planning_costs(params));
  validate_generated(s, params);
  return s;
}

}  // namespace pipetune::schedule
