#include "profiler/recorder/merge_recorders.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>

namespace pipetune::profiler {

namespace {

constexpr std::array kStreams{Stream::Compute, Stream::Comm, Stream::P2P};

void check(const std::vector<const RankRecorder*>& sorted) {
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    const RankRecorder& r = *sorted[i];
    if (i > 0 && sorted[i - 1]->rank() == r.rank())
      throw std::invalid_argument("merge_recorders: two recorders for rank " +
                                  std::to_string(r.rank()));
    if (r.open_spans() != 0)
      throw std::logic_error("merge_recorders: rank " + std::to_string(r.rank()) + " has " +
                             std::to_string(r.open_spans()) + " span(s) still open");
  }
}

// Recorder name id -> Trace name id.
std::vector<std::uint32_t> intern_names(const RankRecorder& r, Trace& trace) {
  std::vector<std::uint32_t> ids(r.names().size(), 0);
  for (std::size_t i = 1; i < ids.size(); ++i) ids[i] = trace.intern(r.names()[i]);
  return ids;
}

void add_spans(const RankRecorder& r, std::size_t from, const std::vector<std::uint32_t>& names,
               Trace& trace) {
  const std::vector<RecordedSpan>& recorded = r.spans();
  for (const Stream stream : kStreams) {
    const auto first = trace.spans.size();
    for (std::size_t i = from; i < recorded.size(); ++i) {
      const RecordedSpan& s = recorded[i];
      if (s.stream != stream) continue;
      Span out;
      out.lane = trace.lane(r.rank(), stream);
      out.kind = s.kind;
      out.chunk = s.chunk;
      out.microbatch = s.microbatch;
      out.peer = s.peer;
      out.start_ns = s.start_ns;
      out.end_ns = s.end_ns;
      out.name = s.name < names.size() ? names[s.name] : 0;
      trace.spans.push_back(out);
    }
    // Recorded in begin order, which is start order on a monotonic clock; the stable sort keeps
    // a parent ahead of a child that starts on the same nanosecond.
    std::stable_sort(trace.spans.begin() + static_cast<std::ptrdiff_t>(first), trace.spans.end(),
                     [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  }
}

}  // namespace

Trace merge_recorders(const std::vector<const RankRecorder*>& recorders) {
  for (const RankRecorder* r : recorders) {
    if (r == nullptr) throw std::invalid_argument("merge_recorders: null recorder");
  }
  std::vector<const RankRecorder*> sorted = recorders;
  std::stable_sort(sorted.begin(), sorted.end(), [](const RankRecorder* a, const RankRecorder* b) {
    return a->rank() < b->rank();
  });
  check(sorted);

  Trace trace;
  trace.kind = TraceKind::Measured;
  std::size_t spans = 0;
  for (const RankRecorder* r : sorted) spans += r->spans().size();
  trace.spans.reserve(spans);
  for (const RankRecorder* r : sorted) {
    const std::vector<std::uint32_t> names = intern_names(*r, trace);
    add_spans(*r, 0, names, trace);
    const auto& samples = r->memory().samples();
    trace.memory.insert(trace.memory.end(), samples.begin(), samples.end());
    for (const RecordedCounter& c : r->counters()) {
      trace.counters.push_back(
          CounterSample{r->rank(), c.name < names.size() ? names[c.name] : 0, c.t_ns, c.value});
    }
  }
  return trace;
}

Trace take_recorder_part(const RankRecorder& r, RecorderMark& mark) {
  check({&r});
  const auto& samples = r.memory().samples();
  if (mark.spans > r.spans().size() || mark.counters > r.counters().size() ||
      mark.memory > samples.size())
    throw std::logic_error("take_recorder_part: rank " + std::to_string(r.rank()) +
                           " was cleared since the mark");
  Trace trace;
  trace.kind = TraceKind::Measured;
  const std::vector<std::uint32_t> names = intern_names(r, trace);
  add_spans(r, mark.spans, names, trace);
  trace.memory.assign(samples.begin() + static_cast<std::ptrdiff_t>(mark.memory), samples.end());
  for (std::size_t i = mark.counters; i < r.counters().size(); ++i) {
    const RecordedCounter& c = r.counters()[i];
    trace.counters.push_back(
        CounterSample{r.rank(), c.name < names.size() ? names[c.name] : 0, c.t_ns, c.value});
  }
  mark = {r.spans().size(), r.counters().size(), samples.size()};
  return trace;
}

}  // namespace pipetune::profiler
