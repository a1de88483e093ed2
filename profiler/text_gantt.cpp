#include "profiler/text_gantt.hpp"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace pipetune::profiler {

namespace {

char glyph(const Span& s) {
  const bool upper = s.chunk <= 0;
  char c = '?';
  switch (s.kind) {
    case SpanKind::F:
      c = 'F';
      break;
    case SpanKind::B:
      c = 'B';
      break;
    case SpanKind::W:
      c = 'W';
      break;
    case SpanKind::BW:
      c = 'X';
      break;
    case SpanKind::S:
      return 'S';
    case SpanKind::T:
      return 'T';
    case SpanKind::IF:
      return 'I';
    case SpanKind::IB:
      return 'J';
    default:
      return '~';
  }
  return upper ? c : static_cast<char>(c - 'A' + 'a');
}

std::string format_time(double ns) {
  char buf[32];
  if (ns >= 1e9)
    std::snprintf(buf, sizeof buf, "%.3gs", ns / 1e9);
  else if (ns >= 1e6)
    std::snprintf(buf, sizeof buf, "%.3gms", ns / 1e6);
  else if (ns >= 1e3)
    std::snprintf(buf, sizeof buf, "%.3gus", ns / 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3gns", ns);
  return buf;
}

}  // namespace

std::string render_text_gantt(const Trace& trace, const TextGanttOptions& options) {
  const int width = std::max(1, options.width);  // exactly the columns asked for
  std::int64_t t0 = 0, t1 = 0;
  bool any = false;
  for (const Span& s : trace.spans) {
    if (!is_compute(s.kind)) continue;
    if (!any) t0 = s.start_ns, t1 = s.end_ns, any = true;
    t0 = std::min(t0, s.start_ns);
    t1 = std::max(t1, s.end_ns);
  }
  if (!any || t1 <= t0) return "(no compute spans)\n";
  const double scale = static_cast<double>(width) / static_cast<double>(t1 - t0);

  std::vector<std::int32_t> lanes;
  for (std::size_t i = 0; i < trace.lanes.size(); ++i)
    if (trace.lanes[i].stream == Stream::Compute) lanes.push_back(static_cast<std::int32_t>(i));
  std::sort(lanes.begin(), lanes.end(), [&](std::int32_t a, std::int32_t b) {
    return trace.lanes[static_cast<std::size_t>(a)].rank <
           trace.lanes[static_cast<std::size_t>(b)].rank;
  });

  std::size_t label_width = 0;
  for (std::int32_t l : lanes)
    label_width = std::max(label_width, trace.lanes[static_cast<std::size_t>(l)].name.size());

  std::vector<std::string> rows(trace.lanes.size());
  for (std::int32_t l : lanes)
    rows[static_cast<std::size_t>(l)].assign(static_cast<std::size_t>(width), '.');
  for (const Span& s : trace.spans) {
    if (!is_compute(s.kind) || s.lane < 0 || static_cast<std::size_t>(s.lane) >= rows.size())
      continue;
    std::string& row = rows[static_cast<std::size_t>(s.lane)];
    if (row.empty()) continue;
    // A span covers the columns whose centre lies inside it; a span narrower than a column still
    // marks the column it starts in, so no op disappears.
    int c0 = static_cast<int>(static_cast<double>(s.start_ns - t0) * scale + 0.5);
    int c1 = static_cast<int>(static_cast<double>(s.end_ns - t0) * scale + 0.5);
    c0 = std::clamp(c0, 0, width - 1);
    c1 = std::clamp(c1, c0 + 1, width);
    const char g = glyph(s);
    for (int c = c0; c < c1; ++c) row[static_cast<std::size_t>(c)] = g;
    if (options.labels && s.microbatch >= 0) {
      std::string label(1, g);
      label += std::to_string(s.microbatch);
      if (static_cast<int>(label.size()) < c1 - c0)
        row.replace(static_cast<std::size_t>(c0), label.size(), label);
    }
  }

  std::string out;
  for (std::int32_t l : lanes) {
    const auto& name = trace.lanes[static_cast<std::size_t>(l)].name;
    out += name + std::string(label_width - name.size(), ' ') + " |" +
           rows[static_cast<std::size_t>(l)] + "|\n";
  }
  const auto axis_label = [&](double ns) {
    if (options.time_unit == "s") return format_time(ns);
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g %s", ns * 1e-9, options.time_unit.c_str());
    return std::string(buf);
  };
  const std::string left = axis_label(0.0);
  const std::string right = axis_label(static_cast<double>(t1 - t0));
  std::string axis(label_width + 2, ' ');
  axis += left;
  const std::size_t pad = static_cast<std::size_t>(width) > left.size() + right.size()
                              ? static_cast<std::size_t>(width) - left.size() - right.size()
                              : 1;
  axis += std::string(pad, ' ') + right + "\n";
  out += axis;
  out +=
      "legend: F/f forward, B/b input-grad backward, W/w weight-grad, X/x fused backward "
      "(lower case = chunk >= 1), S/T vocab output passes, I/J vocab input passes, . idle\n";
  return out;
}

}  // namespace pipetune::profiler
