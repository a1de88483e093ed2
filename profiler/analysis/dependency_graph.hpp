// The inferred dependency graph behind critical_path() (its rules are documented in
// critical_path.hpp). Nodes are the compute and communication spans overlapping the window;
// under NestedComm::Wait a compute span with communication nested in it becomes several pieces
// around that communication. Node ids follow each thread or stream in time order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "profiler/analysis/critical_path.hpp"
#include "profiler/analysis/span_roles.hpp"

namespace pipetune::profiler::analysis::detail {

enum NodeFlag : std::uint8_t {
  kComputeNode = 1,
  kCommNode = 2,
  kFirstPiece = 4,
  kLastPiece = 8,
  kThreadNode = 16,     // on a rank thread of a NestedComm::Wait trace
  kHasNestedRecv = 32,  // (first piece) the span waits for its input in a nested recv
};

struct DependencyGraph {
  // Nodes (structure of arrays).
  std::vector<std::uint32_t> span;  // index into Trace::spans
  std::vector<std::int64_t> start;  // ns, not clipped
  std::vector<std::int64_t> end;
  std::vector<std::uint8_t> flags;
  // Candidate predecessors, -1 when none.
  std::vector<std::int32_t> prev;   // program order
  std::vector<std::int32_t> data;   // pipeline data (accepted edges only)
  std::vector<std::int32_t> other;  // send -> recv, issue or completion (the latest of them)
  std::vector<PathEdge> other_kind;
  std::vector<std::int32_t> instance;  // collective instance, -1; empty when instances == 0
  std::size_t instances = 0;

  ChunkPlacement placement = ChunkPlacement::Linear;
  std::size_t inferred_edges = 0;
  std::size_t rejected_edges = 0;

  std::size_t size() const { return span.size(); }
};

DependencyGraph build_dependency_graph(const Trace& trace, const SpanRoles& roles,
                                       const TimeWindow& window, const CriticalPathOptions& options,
                                       std::int64_t tolerance_ns);

}  // namespace pipetune::profiler::analysis::detail
