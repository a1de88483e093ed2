// How a session's run reaches its sink: the record it is opened with, the trace and kernel
// streams of the ranks, each reported step made durable first, and the run's end.
#pragma once

#include <functional>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/training_engine.hpp"
#include "profiler/run_sink.hpp"

namespace pipetune::session {

// The record a run's sink is opened with: the run as it will train (plan defaults applied).
spec::TrainingRunStart run_start(const runtime::TrainOptions& o,
                                 const spec::TrainingEngine& engine);

// Streams the ranks' parts into `sink` (may be null) and shows each to `on_part` (may be null)
// first; a reported step (on_step) is durable in the sink before it is reported.
void wire_sink(runtime::TrainOptions& o, profiler::RunSink* sink,
               const std::function<void(const profiler::Trace&)>& on_part);

// Trains, ending the sink's run (if any) complete with its summary, interrupted when stopped,
// or failed when training throws (the training error is rethrown).
runtime::TrainResult train_into(runtime::TrainOptions o, profiler::RunSink* sink);

}  // namespace pipetune::session
