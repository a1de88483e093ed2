#include "profiler/analysis/critical_path.hpp"

#include <algorithm>
#include <array>
#include <limits>

#include "profiler/analysis/dependency_graph.hpp"

namespace pipetune::profiler::analysis {

const char* path_edge_name(PathEdge e) {
  switch (e) {
    case PathEdge::Start:
      return "start";
    case PathEdge::ProgramOrder:
      return "program-order";
    case PathEdge::PipelineData:
      return "pipeline-data";
    case PathEdge::SendRecv:
      return "send-recv";
    case PathEdge::Issue:
      return "issue";
    case PathEdge::Collective:
      return "collective";
    case PathEdge::Completion:
      return "completion";
  }
  return "?";
}

std::int64_t default_tolerance_ns(const Trace& trace) {
  switch (trace.kind) {
    case TraceKind::Simulated:
      return 0;
    case TraceKind::Measured:
      return 10'000;
    case TraceKind::Imported:
      return 100'000;
  }
  return 0;
}

namespace {

using detail::DependencyGraph;

struct Bindings {
  std::vector<std::int32_t> pred;  // binding predecessor, -1 when none
  std::vector<PathEdge> via;
};

// Each node's binding predecessor: the candidate that ended last; program order wins when it
// ended within the tolerance of that. Collectives then wait for their last member's arrival.
Bindings bind(const DependencyGraph& g, std::int64_t tol) {
  const std::size_t n = g.size();
  Bindings b{std::vector<std::int32_t>(n, -1), std::vector<PathEdge>(n, PathEdge::Start)};
  for (std::size_t v = 0; v < n; ++v) {
    std::int32_t best = -1;
    PathEdge kind = PathEdge::Start;
    const auto consider = [&](std::int32_t u, PathEdge k) {
      if (u >= 0 && (best < 0 ||
                     g.end[static_cast<std::size_t>(u)] > g.end[static_cast<std::size_t>(best)])) {
        best = u;
        kind = k;
      }
    };
    consider(g.data[v], PathEdge::PipelineData);
    consider(g.other[v], g.other_kind[v]);
    const std::int32_t p = g.prev[v];
    if (p >= 0 && (best < 0 || g.end[static_cast<std::size_t>(p)] >=
                                   g.end[static_cast<std::size_t>(best)] - tol)) {
      best = p;
      kind = PathEdge::ProgramOrder;
    }
    b.pred[v] = best;
    b.via[v] = kind;
  }
  if (g.instances == 0) return b;
  // The latest arrival of each collective instance.
  std::vector<std::int32_t> last(g.instances, -1);
  for (std::size_t v = 0; v < n; ++v) {
    const std::int32_t i = g.instance[v];
    const std::int32_t a = b.pred[v];
    if (i < 0 || a < 0) continue;
    std::int32_t& l = last[static_cast<std::size_t>(i)];
    if (l < 0 || g.end[static_cast<std::size_t>(a)] > g.end[static_cast<std::size_t>(l)]) l = a;
  }
  for (std::size_t v = 0; v < n; ++v) {
    const std::int32_t i = g.instance[v];
    if (i < 0) continue;
    const std::int32_t l = last[static_cast<std::size_t>(i)];
    const std::int32_t own = b.pred[v];
    if (l < 0 || l == own) continue;
    const std::int64_t margin = b.via[v] == PathEdge::ProgramOrder ? tol : 0;
    if (own < 0 ||
        g.end[static_cast<std::size_t>(l)] > g.end[static_cast<std::size_t>(own)] + margin) {
      b.pred[v] = l;
      b.via[v] = PathEdge::Collective;
    }
  }
  return b;
}

// Slack of every node (see critical_path.hpp), in reverse topological order (Kahn's algorithm
// on the candidate edges: a node is final once every node naming it as a candidate is). Nodes
// on a cycle (possible only through jitter within the tolerance) keep what they have then.
std::vector<std::int64_t> slack_of(const DependencyGraph& g, const Bindings& b,
                                   const TimeWindow& w) {
  const std::size_t n = g.size();
  std::vector<std::int64_t> slack(n);
  for (std::size_t i = 0; i < n; ++i) slack[i] = std::max<std::int64_t>(0, w.end_ns - g.end[i]);
  // A node's candidates: its binding predecessor and its program-order, data and other edges
  // (one may repeat another; each occurrence is counted and released alike).
  const auto candidates = [&](std::size_t v) {
    return std::array<std::int32_t, 4>{b.pred[v], g.prev[v], g.data[v], g.other[v]};
  };
  std::vector<std::uint32_t> waiting(n, 0);  // successors not yet processed
  for (std::size_t v = 0; v < n; ++v)
    for (const std::int32_t u : candidates(v))
      if (u >= 0) ++waiting[static_cast<std::size_t>(u)];
  std::vector<std::uint32_t> ready;
  ready.reserve(n);
  for (std::size_t v = 0; v < n; ++v)
    if (waiting[v] == 0) ready.push_back(static_cast<std::uint32_t>(v));
  for (std::size_t head = 0; head < ready.size(); ++head) {
    const std::uint32_t v = ready[head];
    const std::int32_t bp = b.pred[v];
    if (bp < 0) continue;  // then it names no candidate either
    const std::int64_t release = g.end[static_cast<std::size_t>(bp)];
    for (const std::int32_t u : candidates(v)) {
      if (u < 0) continue;
      const auto k = static_cast<std::size_t>(u);
      const std::int64_t term = std::max<std::int64_t>(0, release - g.end[k] + slack[v]);
      slack[k] = std::min(slack[k], term);
      if (--waiting[k] == 0) ready.push_back(static_cast<std::uint32_t>(u));
    }
  }
  return slack;
}

// The node the path ends at: the one that ends last in the window (compute before
// communication, then the later start).
std::size_t last_node(const DependencyGraph& g, const TimeWindow& w) {
  std::size_t last = 0;
  const auto clipped_end = [&](std::size_t i) { return std::min(g.end[i], w.end_ns); };
  for (std::size_t i = 1; i < g.size(); ++i) {
    const std::int64_t a = clipped_end(i), z = clipped_end(last);
    if (a != z) {
      if (a > z) last = i;
      continue;
    }
    const bool ci = (g.flags[i] & detail::kComputeNode) != 0;
    const bool cl = (g.flags[last] & detail::kComputeNode) != 0;
    if (ci != cl) {
      if (ci) last = i;
    } else if (g.start[i] > g.start[last]) {
      last = i;
    }
  }
  return last;
}

// The chain of binding predecessors back from `last` to the window's start, in time order.
// Jitter within the tolerance can close a cycle of binding predecessors: stop there.
std::vector<std::size_t> binding_chain(const DependencyGraph& g, const Bindings& b,
                                       const TimeWindow& w, std::size_t last) {
  std::vector<std::size_t> chain;
  std::vector<bool> seen(g.size(), false);  // one bit per node
  for (std::size_t v = last;;) {
    chain.push_back(v);
    seen[v] = true;
    const std::int32_t u = b.pred[v];
    if (u < 0) break;
    const auto k = static_cast<std::size_t>(u);
    if (seen[k] || (g.start[k] < w.start_ns && g.end[k] <= w.start_ns)) break;
    v = k;
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

// The chain as the path's steps, clipped to the window: each step's wait before it, what it
// adds to the path, how it was reached and its slack; the path's busy and waiting time and end.
void add_steps(CriticalPath& out, const Trace& trace, const DependencyGraph& g, const Bindings& b,
               const TimeWindow& w, const std::vector<std::size_t>& chain,
               const std::vector<std::int64_t>& slack) {
  std::int64_t cursor = w.start_ns;
  out.steps.reserve(chain.size());
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const std::size_t v = chain[i];
    const Span& s = trace.spans[g.span[v]];
    CriticalPathStep st;
    st.span = g.span[v];
    st.rank = trace.lanes[static_cast<std::size_t>(s.lane)].rank;
    st.kind = s.kind;
    st.microbatch = s.microbatch;
    st.chunk = s.chunk;
    st.start_ns = std::max(g.start[v], w.start_ns);
    st.end_ns = std::max(st.start_ns, std::min(g.end[v], w.end_ns));
    st.wait_ns = std::max<std::int64_t>(0, st.start_ns - cursor);
    st.contribution_ns = std::max<std::int64_t>(0, st.end_ns - std::max(st.start_ns, cursor));
    st.via = i == 0 ? PathEdge::Start : b.via[v];
    st.slack_ns = slack[v];
    cursor = std::max(cursor, st.end_ns);
    out.busy_ns += st.contribution_ns;
    out.wait_ns += st.wait_ns;
    out.steps.push_back(st);
  }
  out.end_ns = cursor;
  out.length_ns = cursor - w.start_ns;
}

}  // namespace

CriticalPath critical_path(const Trace& trace, const CriticalPathOptions& options) {
  CriticalPath out;
  out.window = options.window ? *options.window : trace_extent(trace);
  check_window(out.window, "critical_path");
  const TimeWindow w = out.window;
  out.tolerance_ns = options.tolerance_ns >= 0 ? options.tolerance_ns : default_tolerance_ns(trace);
  const SpanRoles roles(trace, options.roles, &w);
  const DependencyGraph g =
      detail::build_dependency_graph(trace, roles, w, options, out.tolerance_ns);
  out.placement = g.placement;
  out.inferred_edges = g.inferred_edges;
  out.rejected_edges = g.rejected_edges;
  out.end_ns = w.start_ns;
  const std::size_t n = g.size();
  if (n == 0) {
    if (options.span_slack) out.span_slack_ns.assign(trace.spans.size(), -1);
    return out;
  }
  const Bindings b = bind(g, out.tolerance_ns);
  const std::vector<std::int64_t> slack = slack_of(g, b, w);
  if (options.span_slack) {
    out.span_slack_ns.assign(trace.spans.size(), -1);
    for (std::size_t i = 0; i < n; ++i) {
      std::int64_t& s = out.span_slack_ns[g.span[i]];
      s = s < 0 ? slack[i] : std::min(s, slack[i]);
    }
  }
  add_steps(out, trace, g, b, w, binding_chain(g, b, w, last_node(g, w)), slack);
  return out;
}

}  // namespace pipetune::profiler::analysis
