#include "db/chrome_trace.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <tuple>
#include <unordered_map>

#include "db/output_file.hpp"

namespace pipetune::db {

namespace {

using profiler::Lane;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;
using profiler::Trace;

// Chrome trace timestamps are microseconds; keep nanosecond precision as decimals.
void put_us(std::ostream& out, std::int64_t ns) {
  const bool negative = ns < 0;
  const std::uint64_t mag =
      negative ? 0 - static_cast<std::uint64_t>(ns) : static_cast<std::uint64_t>(ns);
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s%llu.%03llu", negative ? "-" : "",
                static_cast<unsigned long long>(mag / 1000),
                static_cast<unsigned long long>(mag % 1000));
  out << buf;
}

// Stored names may hold bytes that are not UTF-8 (older workspaces, profiles): replaced, so an
// export never fails on them.
std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

class EventWriter {
 public:
  explicit EventWriter(std::ostream& out) : out_(out) { out_ << "{\"traceEvents\":[\n"; }
  std::ostream& next() {
    if (!first_) out_ << ",\n";
    first_ = false;
    return out_;
  }
  void close(bool ops_wait_for_nested_comm) {
    out_ << "\n],\"displayTimeUnit\":\"ns\"";
    if (ops_wait_for_nested_comm)
      out_ << ",\"otherData\":{\"" << kChromeNestedCommKey << "\":\"wait\"}";
    out_ << "}\n";
  }

 private:
  std::ostream& out_;
  bool first_ = true;
};

// "gpu 7", "compute", "host 144 (python3)": the lane's name without "rank N ", led by its stream.
std::string thread_name(const Lane& lane) {
  std::string canonical(profiler::stream_name(lane.stream));
  if (lane.index != 0 || lane.stream == Stream::Gpu || lane.stream == Stream::Host)
    canonical += " " + std::to_string(lane.index);
  const std::string prefix = "rank " + std::to_string(lane.rank) + " ";
  std::string rest = lane.name;
  if (rest.rfind(prefix, 0) == 0) rest.erase(0, prefix.size());
  if (rest.rfind(canonical, 0) == 0) return canonical + rest.substr(canonical.size());
  return rest.empty() ? canonical : canonical + " (" + rest + ")";
}

bool is_transfer(SpanKind k) {
  return k == SpanKind::Send || k == SpanKind::Recv;
}

// One flow per matched send/receive: span index -> (flow id, true for the send's end).
std::unordered_map<std::size_t, std::pair<std::uint64_t, bool>> match_transfers(const Trace& t) {
  // (sender, receiver, micro-batch) -> sends / receives, in span order.
  std::map<std::tuple<std::int32_t, std::int32_t, std::int32_t>,
           std::array<std::vector<std::size_t>, 2>>
      by_key;
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    const Span& s = t.spans[i];
    if (!is_transfer(s.kind) || s.peer < 0 || s.lane < 0 ||
        static_cast<std::size_t>(s.lane) >= t.lanes.size())
      continue;
    const std::int32_t rank = t.lanes[static_cast<std::size_t>(s.lane)].rank;
    if (s.kind == SpanKind::Send) {
      by_key[{rank, s.peer, s.microbatch}][0].push_back(i);
    } else {
      by_key[{s.peer, rank, s.microbatch}][1].push_back(i);
    }
  }
  std::unordered_map<std::size_t, std::pair<std::uint64_t, bool>> flows;
  std::uint64_t next_id = 1;
  auto by_start = [&](std::size_t a, std::size_t b) {
    return std::pair(t.spans[a].start_ns, a) < std::pair(t.spans[b].start_ns, b);
  };
  for (auto& [key, lists] : by_key) {
    auto& [sends, recvs] = lists;
    std::sort(sends.begin(), sends.end(), by_start);
    std::sort(recvs.begin(), recvs.end(), by_start);
    for (std::size_t i = 0; i < std::min(sends.size(), recvs.size()); ++i) {
      flows.emplace(sends[i], std::pair(next_id, true));
      flows.emplace(recvs[i], std::pair(next_id, false));
      ++next_id;
    }
  }
  return flows;
}

std::string span_args(const Span& s) {
  std::string args = "{";
  auto add = [&](const char* key, long long v) {
    if (args.size() > 1) args += ",";
    args += "\"" + std::string(key) + "\":" + std::to_string(v);
  };
  if (s.microbatch >= 0) add("microbatch", s.microbatch);
  if (s.chunk >= 0) add("chunk", s.chunk);
  if (s.peer >= 0) add("peer", s.peer);
  return args + "}";
}

void write_memory(const Trace& trace, EventWriter& w) {
  // Samples of a rank in time order, each event carrying every category seen so far.
  std::vector<std::size_t> order(trace.memory.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = trace.memory[a];
    const auto& y = trace.memory[b];
    return std::tie(x.rank, x.t_ns) < std::tie(y.rank, y.t_ns);
  });
  std::array<std::int64_t, profiler::kMemoryCategoryCount> bytes{};
  std::array<bool, profiler::kMemoryCategoryCount> seen{};
  std::int32_t rank = 0;
  bool first = true;
  for (std::size_t i : order) {
    const auto& m = trace.memory[i];
    if (first || m.rank != rank) {
      bytes.fill(0);
      seen.fill(false);
      rank = m.rank;
      first = false;
    }
    const auto c = static_cast<std::size_t>(m.category);
    bytes[c] = m.bytes;
    seen[c] = true;
    auto& x = w.next();
    x << "{\"ph\":\"C\",\"name\":\"memory bytes\",\"pid\":" << m.rank << ",\"ts\":";
    put_us(x, m.t_ns);
    x << ",\"args\":{";
    bool comma = false;
    for (std::size_t k = 0; k < bytes.size(); ++k) {
      if (!seen[k]) continue;
      x << (comma ? "," : "")
        << quoted(std::string(
               profiler::memory_category_name(static_cast<profiler::MemoryCategory>(k))))
        << ":" << bytes[k];
      comma = true;
    }
    x << "}}";
  }
}

// A step's end as a global instant ("s":"g": Perfetto draws it across all tracks; no pid or tid,
// which a global event does not belong to). NaN (unknown) is written as null.
void write_steps(const Trace& trace, EventWriter& w) {
  const auto number = [](double v) { return std::isfinite(v) ? nlohmann::json(v).dump() : "null"; };
  for (const profiler::StepMetric& step : trace.steps) {
    auto& x = w.next();
    x << "{\"ph\":\"i\",\"s\":\"g\",\"cat\":" << quoted(std::string(kChromeStepCategory))
      << ",\"name\":\"step " << step.step << "\",\"ts\":";
    put_us(x, step.t_ns);
    x << ",\"args\":{\"step\":" << step.step << ",\"loss\":" << number(step.loss)
      << ",\"tokens_per_s\":" << number(step.tokens_per_s) << "}}";
  }
}

// Metadata: a process per rank, a thread per lane (ordered by stream, then index).
void write_metadata(const Trace& trace, EventWriter& w, const ChromeTraceOptions& options) {
  std::vector<std::int32_t> ranks;
  for (const auto& lane : trace.lanes) ranks.push_back(lane.rank);
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  for (std::int32_t r : ranks) {
    w.next() << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << r
             << ",\"args\":{\"name\":" << quoted(options.process_prefix + " " + std::to_string(r))
             << "}}";
    w.next() << "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" << r
             << ",\"args\":{\"sort_index\":" << r << "}}";
  }
  std::vector<std::size_t> lane_order(trace.lanes.size());
  std::iota(lane_order.begin(), lane_order.end(), std::size_t{0});
  std::sort(lane_order.begin(), lane_order.end(), [&](std::size_t a, std::size_t b) {
    const Lane& x = trace.lanes[a];
    const Lane& y = trace.lanes[b];
    return std::tie(x.rank, x.stream, x.index, a) < std::tie(y.rank, y.stream, y.index, b);
  });
  for (std::size_t sort_index = 0; sort_index < lane_order.size(); ++sort_index) {
    const std::size_t tid = lane_order[sort_index];
    const Lane& lane = trace.lanes[tid];
    w.next() << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << lane.rank << ",\"tid\":" << tid
             << ",\"args\":{\"name\":" << quoted(thread_name(lane)) << "}}";
    w.next() << "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" << lane.rank
             << ",\"tid\":" << tid << ",\"args\":{\"sort_index\":" << sort_index << "}}";
  }
}

// Every span on a lane: a complete event, or a begin/end pair (async) for a transfer off the
// GPU; when flows are wanted, the flow that links the two sides of a transfer.
void write_spans(const Trace& trace, EventWriter& w, bool flows_wanted) {
  const auto flows = flows_wanted
                         ? match_transfers(trace)
                         : std::unordered_map<std::size_t, std::pair<std::uint64_t, bool>>{};
  std::uint64_t async_id = 0;
  for (std::size_t i = 0; i < trace.spans.size(); ++i) {
    const Span& s = trace.spans[i];
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= trace.lanes.size()) continue;
    const Lane& lane = trace.lanes[static_cast<std::size_t>(s.lane)];
    const std::string name = quoted(trace.span_label(s));
    const std::string cat = quoted(std::string(profiler::span_kind_name(s.kind)));
    const std::string args = span_args(s);
    std::string flow;
    if (auto f = flows.find(i); f != flows.end())
      flow = ",\"bind_id\":" + std::to_string(f->second.first) +
             (f->second.second ? ",\"flow_out\":true" : ",\"flow_in\":true");
    if (is_transfer(s.kind) && lane.stream != Stream::Gpu) {
      const std::uint64_t id = ++async_id;
      auto& b = w.next();
      b << "{\"ph\":\"b\",\"cat\":" << cat << ",\"name\":" << name << ",\"id\":" << id
        << ",\"pid\":" << lane.rank << ",\"tid\":" << s.lane << ",\"ts\":";
      put_us(b, s.start_ns);
      b << ",\"args\":" << args << flow << "}";
      auto& e = w.next();
      e << "{\"ph\":\"e\",\"cat\":" << cat << ",\"name\":" << name << ",\"id\":" << id
        << ",\"pid\":" << lane.rank << ",\"tid\":" << s.lane << ",\"ts\":";
      put_us(e, s.end_ns);
      e << "}";
      continue;
    }
    auto& x = w.next();
    x << "{\"ph\":\"X\",\"cat\":" << cat << ",\"name\":" << name << ",\"pid\":" << lane.rank
      << ",\"tid\":" << s.lane << ",\"ts\":";
    put_us(x, s.start_ns);
    x << ",\"dur\":";
    put_us(x, s.end_ns - s.start_ns);
    x << ",\"args\":" << args << flow << "}";
  }
}

// The trace's counters, each as a counter event of its name.
void write_counters(const Trace& trace, EventWriter& w) {
  for (const auto& c : trace.counters) {
    const std::string name =
        c.name < trace.names.size() ? trace.names[c.name] : std::string("counter");
    auto& x = w.next();
    x << "{\"ph\":\"C\",\"name\":" << quoted(name) << ",\"pid\":" << c.rank << ",\"ts\":";
    put_us(x, c.t_ns);
    x << ",\"args\":{\"value\":" << nlohmann::json(c.value).dump() << "}}";
  }
}

}  // namespace

void write_chrome_trace(const Trace& trace, std::ostream& out, const ChromeTraceOptions& options) {
  EventWriter w(out);
  write_metadata(trace, w, options);
  write_spans(trace, w, options.flows);
  write_steps(trace, w);
  if (options.memory_counters) {
    write_counters(trace, w);
    write_memory(trace, w);
  }
  w.close(trace.nested_comm_is_wait());
}

void write_chrome_trace_file(const Trace& trace, const std::string& path,
                             const ChromeTraceOptions& options) {
  write_output_file(path, [&](std::ostream& out) { write_chrome_trace(trace, out, options); });
}

}  // namespace pipetune::db
