#include "tuner/search/offload_options.hpp"

#include <algorithm>
#include <array>
#include <cstddef>

#include "tuner/search/stage_recompute_choice.hpp"

namespace pipetune::tuner {

namespace {

using Stages = std::vector<StageMemoryParts>;

// Whether every stage fits `capacity` by the estimate when it recomputes as `mode_of_stage` says.
template <class ModeOfStage>
bool fits(const Stages& stages, double capacity, ModeOfStage mode_of_stage) {
  for (std::size_t r = 0; r < stages.size(); ++r)
    if (stages[r].bytes(mode_of_stage(r)) > capacity) return false;
  return true;
}

bool fits(const Stages& stages, double capacity, spec::Recompute mode) {
  return fits(stages, capacity, [mode](std::size_t) { return mode; });
}

// Whether the stages could fit `capacity` with their activations offloaded: a stage then still
// holds at least the micro-batch whose forward runs, through one of its chunks.
bool could_fit_offloaded(const Stages& stages, double capacity, spec::Recompute mode, int chunks) {
  for (const StageMemoryParts& s : stages)
    if (s.fixed + s.layers / chunks * s.layer_activations[static_cast<std::size_t>(mode)] >
        capacity)
      return false;
  return true;
}

// The variants in the order they are generated, each once.
class Variants {
 public:
  explicit Variants(const spec::ParallelPlan& plain) : plain_(plain) {}

  void add(spec::Recompute mode, bool activations, bool optimizer) {
    spec::ParallelPlan p = plain_;
    p.recompute = mode;
    push(std::move(p), activations, optimizer);
  }
  void add(const std::vector<spec::Recompute>& stage_modes, bool activations, bool optimizer) {
    spec::ParallelPlan p = plain_;
    p.stage_recompute = stage_modes;
    push(std::move(p), activations, optimizer);
  }
  std::vector<spec::ParallelPlan> take() { return std::move(plans_); }

 private:
  void push(spec::ParallelPlan p, bool activations, bool optimizer) {
    p.offload_activations = activations;
    p.offload_optimizer = optimizer;
    if (std::find(plans_.begin(), plans_.end(), p) == plans_.end()) plans_.push_back(std::move(p));
  }
  spec::ParallelPlan plain_;  // no recomputation, no offload
  std::vector<spec::ParallelPlan> plans_;
};

}  // namespace

std::vector<spec::ParallelPlan> offload_variants(const spec::ModelSpec& model,
                                                 const spec::ClusterSpec& cluster,
                                                 const spec::ParallelPlan& plan,
                                                 const std::vector<spec::Recompute>& allowed,
                                                 StageParameterMemo* memo) {
  if (!(cluster.hardware.host_bandwidth > 0.0) || allowed.empty()) return {};
  spec::ParallelPlan plain = plan;
  plain.recompute = spec::Recompute::None;
  plain.stage_recompute.clear();
  plain.offload_activations = false;
  plain.offload_optimizer = false;
  const Stages kept = stage_memory_parts(model, cluster, plain, memo);
  const auto device = static_cast<double>(cluster.hardware.hbm_bytes);
  const double room = kOffloadHeadroom * device;
  // Fits without recomputation: recomputing or offloading could only cost time.
  if (fits(kept, room, spec::Recompute::None)) return {};
  spec::ParallelPlan optimizer_offloaded = plain;
  optimizer_offloaded.offload_optimizer = true;
  const Stages without_optimizer = stage_memory_parts(model, cluster, optimizer_offloaded, memo);
  const int chunks = std::max(1, plain.chunks);
  // Without a pipeline a micro-batch's backward follows its forward at once: its activations
  // would come straight back, so offloading them frees nothing and hides nothing.
  const bool pipelined = plain.pp > 1;

  Variants out(plain);
  for (spec::Recompute mode : allowed) {
    // Where the mode alone fits, it is faster than the mode with offload.
    const bool mode_fits = fits(kept, room, mode);
    // Activations swapped instead of recomputed (beside none), or besides (a mode that does not
    // fit alone): what the mode keeps travels.
    if (pipelined && (mode == spec::Recompute::None || !mode_fits) &&
        could_fit_offloaded(kept, device, mode, chunks))
      out.add(mode, true, false);
    if (mode_fits) continue;
    // The optimizer state on the host; with the activations too, as those alone may not fit.
    if (fits(without_optimizer, device, mode)) out.add(mode, false, true);
    if (pipelined && could_fit_offloaded(without_optimizer, device, mode, chunks))
      out.add(mode, true, true);
  }
  // With the optimizer state gone, a stage may fit with less recomputation: the per-stage
  // choice on the offloaded plan, where the same choice would not fit without the offload.
  for (const std::vector<spec::Recompute>& modes :
       stage_recompute_candidates(model, cluster, optimizer_offloaded, allowed)) {
    if (fits(kept, room, [&](std::size_t r) { return modes[r]; })) continue;
    out.add(modes, false, true);
  }
  return out.take();
}

std::string offload_label(const spec::ParallelPlan& plan) {
  if (plan.offload_activations && plan.offload_optimizer) return "act+opt";
  if (plan.offload_activations) return "act";
  if (plan.offload_optimizer) return "opt";
  return "";
}

}  // namespace pipetune::tuner
