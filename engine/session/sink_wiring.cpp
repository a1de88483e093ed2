#include "engine/session/sink_wiring.hpp"

#include <utility>

#include "engine/comm/topology.hpp"
#include "engine/session/training_session.hpp"
#include "profiler/rank_renumbering.hpp"

namespace pipetune::session {

spec::TrainingRunStart run_start(const runtime::TrainOptions& o,
                                 const spec::TrainingEngine& engine) {
  spec::TrainingRunStart start{o.model, o.plan, o.steps, o.seed, engine};
  spec::apply_defaults(start.plan);
  return start;
}

void wire_sink(runtime::TrainOptions& o, profiler::RunSink* sink,
               const std::function<void(const profiler::Trace&)>& on_part) {
  if (sink == nullptr && !on_part) return;
  // Stored runs number their ranks in the default order (the analyses' stage = rank / (tp*dp),
  // db::stage_of_rank with per-stage layouts), whatever rank order the plan ran in.
  profiler::RankMap stored_rank;
  if (o.plan.rank_order != spec::RankOrder::TpDpPp) {
    stored_rank = [topology = comm::Topology(o.plan)](std::int32_t r) {
      return static_cast<std::int32_t>(topology.default_order_rank(r));
    };
  }
  o.trace_sink = [sink, on_part, stored_rank](profiler::Trace part) {
    if (stored_rank) profiler::renumber_ranks(part, stored_rank);
    if (on_part) on_part(part);
    if (sink != nullptr) sink->append(std::move(part));
  };
  if (sink == nullptr) return;
  o.kernel_sink = [sink, stored_rank](std::vector<profiler::KernelRecord> kernels) {
    if (stored_rank) profiler::renumber_ranks(kernels, stored_rank);
    sink->append_kernels(std::move(kernels));
  };
  if (o.on_step)
    o.on_step = [report = o.on_step, sink](const runtime::StepResult& step) {
      sink->flush();
      report(step);
    };
}

runtime::TrainResult train_into(runtime::TrainOptions o, profiler::RunSink* sink) {
  runtime::TrainResult result;
  try {
    result = runtime::train(o);
  } catch (...) {
    if (sink != nullptr) {
      try {
        sink->finish(profiler::RunEnd::Failed, nullptr);
      } catch (...) {  // the training error is the one to report
      }
    }
    throw;
  }
  if (sink != nullptr) {
    const profiler::TrainingSummary summary = training_summary(result);
    sink->finish(result.stopped ? profiler::RunEnd::Interrupted : profiler::RunEnd::Complete,
                 &summary);
  }
  return result;
}

}  // namespace pipetune::session
