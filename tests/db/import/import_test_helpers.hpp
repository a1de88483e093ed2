// Helpers for the importer tests: the shared real-trace folder, lanes by (rank, stream, index),
// union busy time, and readable dumps of spans for failure messages.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "db/import/imported_profile.hpp"
#include "profiler/trace.hpp"
#include "support/required_data.hpp"

namespace pipetune::db::testing {

// The shared folder is a sibling of the repository.
inline std::filesystem::path real_trace(const std::string& relative) {
  return pipetune::test::shared_path("data/real_traces/" + relative);
}

#define PIPETUNE_REQUIRE_FILE(path) PIPETUNE_REQUIRE_SHARED(path)

inline int find_lane(const profiler::Trace& t, std::int32_t rank, profiler::Stream stream,
                     std::int32_t index) {
  for (std::size_t i = 0; i < t.lanes.size(); ++i) {
    if (t.lanes[i].rank == rank && t.lanes[i].stream == stream && t.lanes[i].index == index)
      return static_cast<int>(i);
  }
  return -1;
}

template <class Pred>
std::vector<profiler::Span> spans_where(const profiler::Trace& t, Pred pred) {
  std::vector<profiler::Span> out;
  for (const auto& s : t.spans)
    if (pred(s)) out.push_back(s);
  return out;
}

// Length of the union of [start, end) intervals, ns.
inline std::int64_t union_ns(std::vector<std::pair<std::int64_t, std::int64_t>> iv) {
  std::sort(iv.begin(), iv.end());
  std::int64_t total = 0, cur_start = 0, cur_end = 0;
  bool open = false;
  for (const auto& [a, b] : iv) {
    if (!open || a > cur_end) {
      if (open) total += cur_end - cur_start;
      cur_start = a;
      cur_end = b;
      open = true;
    } else {
      cur_end = std::max(cur_end, b);
    }
  }
  if (open) total += cur_end - cur_start;
  return total;
}

inline std::int64_t union_ns(const std::vector<profiler::Span>& spans) {
  std::vector<std::pair<std::int64_t, std::int64_t>> iv;
  for (const auto& s : spans) iv.emplace_back(s.start_ns, s.end_ns);
  return union_ns(std::move(iv));
}

inline std::int64_t sum_ns(const std::vector<profiler::Span>& spans) {
  std::int64_t total = 0;
  for (const auto& s : spans) total += s.end_ns - s.start_ns;
  return total;
}

// "lane kind mb name [start, end)" per span: what a failing comparison prints.
inline std::string dump(const profiler::Trace& t, const std::vector<profiler::Span>& spans) {
  std::ostringstream out;
  for (const auto& s : spans) {
    const auto& lane = t.lanes.at(static_cast<std::size_t>(s.lane));
    out << "  " << lane.name << " " << profiler::span_kind_name(s.kind) << " mb=" << s.microbatch
        << " '" << t.span_label(s) << "' [" << s.start_ns << ", " << s.end_ns << ")\n";
  }
  return out.str();
}

inline std::string join(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += "  " + l + "\n";
  return out;
}

inline bool any_contains(const std::vector<std::string>& lines, const std::string& needle) {
  return std::any_of(lines.begin(), lines.end(),
                     [&](const std::string& l) { return l.find(needle) != std::string::npos; });
}

}  // namespace pipetune::db::testing
