// The critical path of an iteration: a chain of spans whose durations plus the waits between
// them explain when the iteration ends. Traces carry no explicit dependencies, so they are
// inferred (dependency_graph.hpp):
//   program order   the previous span on the same thread or stream (a rank's compute lane; in
//                   NestedComm::Wait traces all non-GPU lanes of a rank are one thread, and a
//                   compute span is split into pieces around the communication nested in it)
//   pipeline data   F of (group g, micro-batch mb) needs F of (g-1, mb); B/BW of g needs B/BW of
//                   g+1 (of the last group: its F, the loss); W needs B of its group, all of
//                   the same replica (rank % ranks_per_stage; with per-stage layouts the same dp
//                   rank and the consumer's tp rank modulo the producing stage's tp, how
//                   resharding pairs senders and receivers). Group from stage (rank /
//                   ranks_per_stage, or by stage_tp) and chunk by the chunk placement (linear:
//                   chunk * p + stage; V: chunk 0 -> stage, chunk 1 -> 2p - 1 - stage), inferred
//                   when not given: the placement whose edges the times contradict least.
//                   The k-th occurrence of a (rank, kind, chunk, mb) matches the k-th of its
//                   producer. An edge the times contradict by more than the tolerance (consumer
//                   started before its producer ended) is rejected and counted.
//   send -> recv    matched by (source, destination, micro-batch) in order
//   collectives     the k-th collective of a kind on each rank, overlapping in time, is one
//                   instance; it ends when its last member arrives
//   issue           a communication span on its own stream was issued by the latest compute
//                   span of its rank that ended by its start (+ tolerance)
//   completion      a compute span starting within the tolerance of a communication's end on its
//                   rank (a recv, a collective, or a send addressed to it, same micro-batch) waited
//                   for it
// Each span's binding predecessor is the candidate that ended last (program order wins ties
// within the tolerance); the path follows binding predecessors back from the span that ends
// last in the window.
//
// Slack: how much later a span could end without delaying the window's end, with the observed
// gap behind each span's binding predecessor taken as a fixed lag (a transfer, a launch):
// slack(u) = min(end - u.end, min over successors v of (release(v) - u.end + slack(v))), where
// release(v) is the end of v's binding predecessor. Spans on the path have slack 0.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "profiler/analysis/span_roles.hpp"
#include "profiler/analysis/time_window.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler::analysis {

enum class ChunkPlacement : std::uint8_t { Auto, Linear, VShape };

// How a path step depends on the step before it.
enum class PathEdge : std::uint8_t {
  Start,         // the first step
  ProgramOrder,  // same thread or stream
  PipelineData,  // inferred F/B/W data dependency
  SendRecv,      // a receive waiting for its matched send
  Issue,         // a communication issued by the compute before it
  Collective,    // a collective waiting for its last member (the step before is that member's)
  Completion,    // a compute span waiting for a communication to finish
};
const char* path_edge_name(PathEdge e);

struct CriticalPathOptions {
  std::optional<TimeWindow> window;  // empty: trace_extent()
  RoleOptions roles;
  // Jitter allowed in inferred dependencies, ns. Negative = by trace kind: 0 simulated, 10 us
  // measured (one steady clock), 100 us imported (PiPPy's RPC workers jitter by ~0.1 ms).
  std::int64_t tolerance_ns = -1;
  // Ranks per pipeline stage (tp * dp) when every stage has as many: stage = rank /
  // ranks_per_stage, and rank r's pipeline neighbours are r -/+ ranks_per_stage (Megatron's
  // order: tp fastest, then dp, then pp).
  std::int32_t ranks_per_stage = 1;
  // Per-stage layouts (stages of different TP degree, engine/spec/parallel_plan.hpp's stage_tp):
  // each stage's TP degree, one entry per stage, and the dp every stage shares. Stage s then holds
  // the stage_tp[s] * dp ranks after stage s - 1's (tp fastest, then dp) and ranks_per_stage is
  // not read; ranks beyond dp * sum(stage_tp) get no pipeline data edges. Empty: every stage holds
  // ranks_per_stage ranks.
  std::vector<std::int32_t> stage_tp;
  std::int32_t dp = 1;
  ChunkPlacement placement = ChunkPlacement::Auto;
  // Partial pipelining (skippipe, skippipe-ca): a micro-batch may skip layer groups and visit the
  // middle ones in any order, so a pass's producer is the same micro-batch's pass of that
  // direction that ended last before it began, on whichever group (false: the nearest group it
  // ran on before, forward, or after, backward).
  bool reordered_paths = false;
  bool span_slack = true;  // fill CriticalPath::span_slack_ns
};

struct CriticalPathStep {
  std::size_t span = 0;  // index into Trace::spans
  std::int32_t rank = 0;
  SpanKind kind = SpanKind::Other;
  std::int32_t microbatch = -1;
  std::int16_t chunk = -1;
  // The part of the span on the path (a piece when nested waits split it), clipped to the window.
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  std::int64_t wait_ns = 0;          // idle on the path between the previous step and this one
  std::int64_t contribution_ns = 0;  // time this step adds (0 when it lies under the previous)
  PathEdge via = PathEdge::Start;
  std::int64_t slack_ns = 0;
};

struct CriticalPath {
  TimeWindow window;
  std::int64_t end_ns = 0;              // end of the last step: the end the path explains
  std::int64_t length_ns = 0;           // end_ns - window start = busy_ns + wait_ns
  std::int64_t busy_ns = 0;             // sum of contributions
  std::int64_t wait_ns = 0;             // sum of waits, the lead-in before the first step included
  std::vector<CriticalPathStep> steps;  // in time order
  ChunkPlacement placement = ChunkPlacement::Linear;  // used for the pipeline data edges
  std::int64_t tolerance_ns = 0;                      // used
  std::size_t inferred_edges = 0;  // pipeline data edges found (rejected ones included)
  std::size_t rejected_edges = 0;  // contradicted by the times beyond the tolerance
  // Per Trace span: its slack (the least over its pieces), -1 for spans not analysed (outside
  // the window, or neither compute nor communication). Empty unless options.span_slack.
  std::vector<std::int64_t> span_slack_ns;
};

CriticalPath critical_path(const Trace& trace, const CriticalPathOptions& options = {});

// The tolerance critical_path() uses for `trace` when options.tolerance_ns is negative.
std::int64_t default_tolerance_ns(const Trace& trace);

}  // namespace pipetune::profiler::analysis
