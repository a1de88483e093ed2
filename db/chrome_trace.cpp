#include "db/chrome_trace.hpp"

#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <system_error>

namespace pipetune::db {

namespace {

using profiler::Span;
using profiler::Trace;

// Chrome trace timestamps are microseconds; keep nanosecond precision as decimals.
void put_us(std::ostream& out, std::int64_t ns) {
  const std::int64_t whole = ns / 1000;
  std::int64_t frac = ns % 1000;
  if (frac < 0) frac = -frac;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%lld.%03lld", static_cast<long long>(whole),
                static_cast<long long>(frac));
  out << buf;
}

std::string quoted(const std::string& s) {
  return nlohmann::json(s).dump();
}

class EventWriter {
 public:
  explicit EventWriter(std::ostream& out) : out_(out) { out_ << "{\"traceEvents\":[\n"; }
  std::ostream& next() {
    if (!first_) out_ << ",\n";
    first_ = false;
    return out_;
  }
  void close() { out_ << "\n],\"displayTimeUnit\":\"ns\"}\n"; }

 private:
  std::ostream& out_;
  bool first_ = true;
};

}  // namespace

void write_chrome_trace(const Trace& trace, std::ostream& out, const ChromeTraceOptions& options) {
  EventWriter w(out);
  // Metadata: a process per rank, a thread per stream.
  std::vector<std::int32_t> ranks;
  for (const auto& lane : trace.lanes) {
    if (std::find(ranks.begin(), ranks.end(), lane.rank) == ranks.end()) ranks.push_back(lane.rank);
  }
  for (std::int32_t r : ranks) {
    w.next() << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << r
             << ",\"args\":{\"name\":" << quoted(options.process_prefix + " " + std::to_string(r))
             << "}}";
    w.next() << "{\"ph\":\"M\",\"name\":\"process_sort_index\",\"pid\":" << r
             << ",\"args\":{\"sort_index\":" << r << "}}";
  }
  for (const auto& lane : trace.lanes) {
    const int tid = static_cast<int>(lane.stream);
    w.next() << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << lane.rank << ",\"tid\":" << tid
             << ",\"args\":{\"name\":" << quoted(std::string(profiler::stream_name(lane.stream)))
             << "}}";
    w.next() << "{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":" << lane.rank
             << ",\"tid\":" << tid << ",\"args\":{\"sort_index\":" << tid << "}}";
  }

  std::uint64_t async_id = 0;
  for (const Span& s : trace.spans) {
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= trace.lanes.size()) continue;
    const auto& lane = trace.lanes[static_cast<std::size_t>(s.lane)];
    const int tid = static_cast<int>(lane.stream);
    const std::string name = quoted(trace.span_label(s));
    const std::string cat = quoted(std::string(profiler::span_kind_name(s.kind)));
    std::string args = "{";
    if (s.microbatch >= 0) args += "\"microbatch\":" + std::to_string(s.microbatch);
    if (s.chunk >= 0)
      args += std::string(args.size() > 1 ? "," : "") + "\"chunk\":" + std::to_string(s.chunk);
    if (s.peer >= 0)
      args += std::string(args.size() > 1 ? "," : "") + "\"peer\":" + std::to_string(s.peer);
    args += "}";
    if (s.kind == profiler::SpanKind::Send) {
      // Transfers may overlap on one link: async slices stack instead of mis-nesting.
      const std::uint64_t id = ++async_id;
      auto& b = w.next();
      b << "{\"ph\":\"b\",\"cat\":" << cat << ",\"name\":" << name << ",\"id\":" << id
        << ",\"pid\":" << lane.rank << ",\"tid\":" << tid << ",\"ts\":";
      put_us(b, s.start_ns);
      b << ",\"args\":" << args << "}";
      auto& e = w.next();
      e << "{\"ph\":\"e\",\"cat\":" << cat << ",\"name\":" << name << ",\"id\":" << id
        << ",\"pid\":" << lane.rank << ",\"tid\":" << tid << ",\"ts\":";
      put_us(e, s.end_ns);
      e << "}";
      continue;
    }
    auto& x = w.next();
    x << "{\"ph\":\"X\",\"cat\":" << cat << ",\"name\":" << name << ",\"pid\":" << lane.rank
      << ",\"tid\":" << tid << ",\"ts\":";
    put_us(x, s.start_ns);
    x << ",\"dur\":";
    put_us(x, s.end_ns - s.start_ns);
    x << ",\"args\":" << args << "}";
  }

  if (options.memory_counters) {
    for (const auto& c : trace.counters) {
      const std::string name =
          c.name < trace.names.size() ? trace.names[c.name] : std::string("counter");
      auto& x = w.next();
      x << "{\"ph\":\"C\",\"name\":" << quoted(name) << ",\"pid\":" << c.rank << ",\"ts\":";
      put_us(x, c.t_ns);
      x << ",\"args\":{\"value\":" << nlohmann::json(c.value).dump() << "}}";
    }
    for (const auto& m : trace.memory) {
      auto& x = w.next();
      x << "{\"ph\":\"C\",\"name\":\"memory bytes\",\"pid\":" << m.rank << ",\"ts\":";
      put_us(x, m.t_ns);
      x << ",\"args\":{" << quoted(std::string(profiler::memory_category_name(m.category))) << ":"
        << m.bytes << "}}";
    }
  }
  w.close();
}

void write_chrome_trace_file(const Trace& trace, const std::string& path,
                             const ChromeTraceOptions& options) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  fs::path tmp = target;
  tmp += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw std::runtime_error("cannot write trace file '" + path + "'");
    write_chrome_trace(trace, out, options);
    out.flush();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      throw std::runtime_error("error while writing trace file '" + path + "'");
    }
  }
  std::error_code ec;
  fs::rename(tmp, target, ec);
  if (ec) {
    fs::remove(tmp, ec);
    throw std::runtime_error("cannot write trace file '" + path + "': " + ec.message());
  }
}

}  // namespace pipetune::db
