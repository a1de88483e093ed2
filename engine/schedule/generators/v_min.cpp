// v-min: the V-Min schedule of "Pipeline Parallelism with Controllable Memory" (schedules.md
// a.8): the V-Min building block (a third of 1F1B's activation memory, at a bubble of about two
// thirds of 1F1B's plus a term growing with the number of micro-batches), W in free slots,
// squeezed, with B/W split.
#include "engine/schedule/generators.hpp"
#include "engine/schedule/generators/v_building_block.hpp"
#include "engine/schedule/validator.hpp"

namespace pipetune::schedule {

Schedule generate_v_min(const GeneratorParams& params) {
  check_v_params(params, "v-min", /*vocab_ok=*/false);
  Schedule s = make_v_schedule(params, "v-min");
  s.ranks = v_block_order(VKind::Min, params.stages, params.microbatches, 0, /*squeeze=*/true);
  validate_generated(s, params);
  return s;
}

}  // namespace pipetune::schedule
