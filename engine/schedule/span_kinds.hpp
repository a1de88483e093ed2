// How a schedule op appears in a Trace: one explicit table, used by the simulator (tuner/sim) and
// the engine's runtime, so the two enums may evolve without silently mislabelling spans.
#pragma once

#include "engine/schedule/op.hpp"
#include "profiler/trace.hpp"

namespace pipetune::schedule {

constexpr profiler::SpanKind span_kind_of(OpKind kind) {
  switch (kind) {
    case OpKind::F:
      return profiler::SpanKind::F;
    case OpKind::B:
      return profiler::SpanKind::B;
    case OpKind::W:
      return profiler::SpanKind::W;
    case OpKind::BW:
      return profiler::SpanKind::BW;
    case OpKind::S:
      return profiler::SpanKind::S;
    case OpKind::T:
      return profiler::SpanKind::T;
    case OpKind::IF:
      return profiler::SpanKind::IF;
    case OpKind::IB:
      return profiler::SpanKind::IB;
    case OpKind::R:  // on the rank's communication stream
      return profiler::SpanKind::AllReduce;
  }
  return profiler::SpanKind::Other;
}

}  // namespace pipetune::schedule
