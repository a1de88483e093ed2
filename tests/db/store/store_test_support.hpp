// Shared by the store tests: a temporary directory, a field-by-field Trace diff, a generator of
// nested lanes that knows each span's depth by construction, and brute-force references for the
// window queries (they work on in-memory spans, never on the store).
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "db/store/store_types.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "pipetune_store_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline bool same_real(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

inline std::string describe(const profiler::Span& s) {
  std::ostringstream o;
  o << "{lane " << s.lane << " kind " << profiler::span_kind_name(s.kind) << " chunk " << s.chunk
    << " mb " << s.microbatch << " peer " << s.peer << " [" << s.start_ns << ", " << s.end_ns
    << ") name " << s.name << "}";
  return o.str();
}

inline bool operator_eq(const profiler::Span& a, const profiler::Span& b) {
  return a.lane == b.lane && a.kind == b.kind && a.chunk == b.chunk &&
         a.microbatch == b.microbatch && a.peer == b.peer && a.start_ns == b.start_ns &&
         a.end_ns == b.end_ns && a.name == b.name;
}

// "" when equal; otherwise the first differences, one per line (at most `limit`).
inline std::string diff_traces(const profiler::Trace& want, const profiler::Trace& got,
                               int limit = 12) {
  std::ostringstream out;
  int shown = 0;
  auto note = [&](const std::string& line) {
    if (shown++ < limit) out << line << "\n";
  };
  if (want.kind != got.kind) note("kind differs");
  // The store keeps one name table per run for spans, counters and kernels: a loaded trace's
  // names are the trace's own, in order, followed by names only kernels use.
  const bool names_prefix = want.names.size() <= got.names.size() &&
                            std::equal(want.names.begin(), want.names.end(), got.names.begin());
  if (!names_prefix)
    note("names differ: " + std::to_string(want.names.size()) + " vs " +
         std::to_string(got.names.size()));
  if (want.lanes.size() != got.lanes.size())
    note("lane count " + std::to_string(want.lanes.size()) + " vs " +
         std::to_string(got.lanes.size()));
  for (std::size_t i = 0; i < std::min(want.lanes.size(), got.lanes.size()); ++i) {
    const auto& a = want.lanes[i];
    const auto& b = got.lanes[i];
    if (a.rank != b.rank || a.stream != b.stream || a.index != b.index || a.name != b.name)
      note("lane " + std::to_string(i) + ": '" + a.name + "' vs '" + b.name + "'");
  }
  if (want.spans.size() != got.spans.size())
    note("span count " + std::to_string(want.spans.size()) + " vs " +
         std::to_string(got.spans.size()));
  for (std::size_t i = 0; i < std::min(want.spans.size(), got.spans.size()); ++i) {
    if (!operator_eq(want.spans[i], got.spans[i]))
      note("span " + std::to_string(i) + ": want " + describe(want.spans[i]) + " got " +
           describe(got.spans[i]));
  }
  if (want.memory.size() != got.memory.size())
    note("memory sample count " + std::to_string(want.memory.size()) + " vs " +
         std::to_string(got.memory.size()));
  for (std::size_t i = 0; i < std::min(want.memory.size(), got.memory.size()); ++i) {
    const auto& a = want.memory[i];
    const auto& b = got.memory[i];
    if (a.rank != b.rank || a.category != b.category || a.t_ns != b.t_ns || a.bytes != b.bytes)
      note("memory sample " + std::to_string(i) + " differs (t " + std::to_string(a.t_ns) + " vs " +
           std::to_string(b.t_ns) + ", bytes " + std::to_string(a.bytes) + " vs " +
           std::to_string(b.bytes) + ")");
  }
  if (want.counters.size() != got.counters.size())
    note("counter count " + std::to_string(want.counters.size()) + " vs " +
         std::to_string(got.counters.size()));
  for (std::size_t i = 0; i < std::min(want.counters.size(), got.counters.size()); ++i) {
    const auto& a = want.counters[i];
    const auto& b = got.counters[i];
    if (a.rank != b.rank || a.name != b.name || a.t_ns != b.t_ns || !same_real(a.value, b.value))
      note("counter " + std::to_string(i) + " differs");
  }
  if (want.steps.size() != got.steps.size())
    note("step count " + std::to_string(want.steps.size()) + " vs " +
         std::to_string(got.steps.size()));
  for (std::size_t i = 0; i < std::min(want.steps.size(), got.steps.size()); ++i) {
    const auto& a = want.steps[i];
    const auto& b = got.steps[i];
    if (a.step != b.step || a.t_ns != b.t_ns || !same_real(a.loss, b.loss) ||
        !same_real(a.tokens_per_s, b.tokens_per_s))
      note("step metric " + std::to_string(i) + " differs");
  }
  if (shown > limit) out << "... " << (shown - limit) << " more\n";
  return out.str();
}

inline std::string diff_kernels(const std::vector<profiler::KernelRecord>& want,
                                const std::vector<profiler::KernelRecord>& got) {
  if (want.size() != got.size())
    return "kernel count " + std::to_string(want.size()) + " vs " + std::to_string(got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto& a = want[i];
    const auto& b = got[i];
    if (a.rank != b.rank || a.device != b.device || a.stream != b.stream ||
        a.correlation != b.correlation || a.start_ns != b.start_ns || a.end_ns != b.end_ns ||
        a.name != b.name || a.grid != b.grid || a.block != b.block || a.bytes != b.bytes ||
        a.op != b.op || a.phase != b.phase || a.microbatch != b.microbatch || a.chunk != b.chunk)
      return "kernel " + std::to_string(i) + " differs: '" + a.name + "' vs '" + b.name + "'";
  }
  return "";
}

// A span with the depth its generator gave it.
struct GeneratedSpan {
  profiler::Span span;
  std::int32_t depth = 0;
};

// Spans on lane `lane` from t_ns on: top-level spans of mixed lengths (tiny, short, long) with
// mixed gaps (none, tiny, wide), some holding children and grandchildren that partition part of
// the parent, a few zero-length spans. Each span's depth is known from how it was built: the
// spans follow the nesting rules the store documents (children strictly inside their parent,
// siblings never overlapping, a zero-length span never touching a neighbour or its parent's
// ends), so the store must assign the same depths. Appended parent first, in start order.
inline std::int64_t generate_lane(std::mt19937_64& rng, std::int32_t lane, std::int64_t t_ns,
                                  int top_spans, std::vector<GeneratedSpan>& out) {
  std::uniform_int_distribution<int> pick(0, 99);
  auto dur = [&](int level) -> std::int64_t {
    const int p = pick(rng);
    if (level == 0 && p < 3) return 0;                                 // an instant
    if (p < 45) return 1 + static_cast<std::int64_t>(rng() % 40);      // tiny
    if (p < 85) return 100 + static_cast<std::int64_t>(rng() % 2000);  // short
    return 20000 + static_cast<std::int64_t>(rng() % 400000);          // long
  };
  auto gap = [&]() -> std::int64_t {
    const int p = pick(rng);
    if (p < 40) return 0;
    if (p < 80) return 1 + static_cast<std::int64_t>(rng() % 30);
    if (p < 95) return 100 + static_cast<std::int64_t>(rng() % 3000);
    return 100000 + static_cast<std::int64_t>(rng() % 5000000);
  };
  const auto kinds = profiler::kSpanKindCount;
  auto make = [&](std::int64_t s, std::int64_t e, std::int32_t depth) {
    profiler::Span sp;
    sp.lane = lane;
    sp.kind = static_cast<profiler::SpanKind>(rng() % kinds);
    sp.microbatch = static_cast<std::int32_t>(rng() % 9) - 1;
    sp.chunk = static_cast<std::int16_t>(static_cast<int>(rng() % 3) - 1);
    sp.peer = static_cast<std::int32_t>(rng() % 5) - 1;
    sp.start_ns = s;
    sp.end_ns = e;
    sp.name = static_cast<std::uint32_t>(rng() % 4);
    out.push_back({sp, depth});
  };
  // Children partition [s, e) into pieces with gaps; recursion gives grandchildren.
  std::function<void(std::int64_t, std::int64_t, std::int32_t)> children =
      [&](std::int64_t s, std::int64_t e, std::int32_t depth) {
        if (e - s < 8 || depth > 3 || pick(rng) < 50) return;
        std::int64_t t = s + static_cast<std::int64_t>(rng() % 2);
        const int n = 1 + static_cast<int>(rng() % 6);
        for (int i = 0; i < n && t < e - 2; ++i) {
          const std::int64_t room = e - 1 - t;  // stay strictly before the parent's end
          const std::int64_t d =
              1 + static_cast<std::int64_t>(
                      rng() % static_cast<std::uint64_t>(std::max<std::int64_t>(1, room / 2)));
          make(t, t + d, depth);
          children(t, t + d, depth + 1);
          t += d + static_cast<std::int64_t>(rng() % 3);
        }
      };
  std::int64_t t = t_ns;
  bool last_zero = false;
  for (int i = 0; i < top_spans; ++i) {
    std::int64_t g = gap();
    std::int64_t d = dur(0);
    if ((d == 0 || last_zero) && g == 0) g = 1;  // an instant never touches a neighbour
    t += g;
    make(t, t + d, 0);
    if (d > 0) children(t, t + d, 1);
    last_zero = d == 0;
    t += d;
  }
  return t;
}

inline bool visible(const profiler::Span& s, std::int64_t t0, std::int64_t t1) {
  return s.start_ns < t1 && (s.end_ns > t0 || s.start_ns >= t0);
}

// The folding rule applied span by span to the spans of each depth (lane_window.hpp).
inline std::vector<WindowItem> reference_fold(const std::vector<GeneratedSpan>& lane_spans,
                                              std::int64_t t0, std::int64_t t1,
                                              std::int64_t pixel_ns) {
  std::int32_t max_depth = -1;
  for (const auto& g : lane_spans) max_depth = std::max(max_depth, g.depth);
  std::vector<WindowItem> items;
  for (std::int32_t depth = 0; depth <= max_depth; ++depth) {
    std::vector<profiler::Span> at;
    for (const auto& g : lane_spans)
      if (g.depth == depth && visible(g.span, t0, t1)) at.push_back(g.span);
    std::stable_sort(at.begin(), at.end(),
                     [](const auto& a, const auto& b) { return a.start_ns < b.start_ns; });
    bool open = false;
    WindowItem fold;
    auto close = [&] {
      if (open) items.push_back(fold);
      open = false;
    };
    for (const profiler::Span& s : at) {
      const bool tiny = s.end_ns - s.start_ns < pixel_ns;
      if (open && tiny && s.start_ns - fold.end_ns < pixel_ns) {
        ++fold.count;
        fold.end_ns = s.end_ns;
        fold.span = profiler::Span{};
        continue;
      }
      close();
      WindowItem item;
      item.depth = depth;
      item.start_ns = s.start_ns;
      item.end_ns = s.end_ns;
      item.count = 1;
      item.span = s;
      if (tiny) {
        fold = item;
        open = true;
      } else {
        items.push_back(item);
      }
    }
    close();
  }
  return items;
}

inline std::string describe(const WindowItem& w) {
  std::ostringstream o;
  o << "{depth " << w.depth << " [" << w.start_ns << ", " << w.end_ns << ") count " << w.count;
  if (w.count == 1) o << " " << describe(w.span);
  o << "}";
  return o.str();
}

// "" when equal; otherwise the first difference.
inline std::string diff_items(const std::vector<WindowItem>& want,
                              const std::vector<WindowItem>& got) {
  for (std::size_t i = 0; i < std::min(want.size(), got.size()); ++i) {
    const auto& a = want[i];
    const auto& b = got[i];
    const bool same = a.depth == b.depth && a.start_ns == b.start_ns && a.end_ns == b.end_ns &&
                      a.count == b.count && (a.count != 1 || operator_eq(a.span, b.span));
    if (!same) return "item " + std::to_string(i) + ": want " + describe(a) + " got " + describe(b);
  }
  if (want.size() != got.size())
    return "item count " + std::to_string(want.size()) + " vs " + std::to_string(got.size()) +
           (want.size() > got.size() ? " (first missing " + describe(want[got.size()]) + ")"
                                     : " (first extra " + describe(got[want.size()]) + ")");
  return "";
}

}  // namespace pipetune::db::testing
