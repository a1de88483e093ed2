#include "profiler/recorder/rank_recorder.hpp"

#include <stdexcept>

#include "profiler/recorder/nvtx.hpp"
#include "profiler/recorder/span_message.hpp"

namespace pipetune::profiler {

bool nvtx_compiled_in() noexcept {
  return nvtx::kCompiledIn;
}

RankRecorder::RankRecorder(std::int32_t rank, Clock::time_point epoch, bool enabled,
                           std::size_t reserve_spans)
    : rank_(rank), epoch_(epoch), enabled_(enabled), memory_(rank, epoch, enabled) {
  if (!enabled_) return;
  spans_.reserve(reserve_spans);
  counters_.reserve(reserve_spans / 4);
  if constexpr (nvtx::kCompiledIn) {
    nvtx_domain_ = nvtx::create_domain("pipetune");
    // NVTX categories are the span kinds (1-based: category 0 means "none").
    for (int k = 0; k <= static_cast<int>(SpanKind::Other); ++k) {
      const std::string name(span_kind_name(static_cast<SpanKind>(k)));
      nvtx::name_category(nvtx_domain_, static_cast<std::uint32_t>(k + 1), name.c_str());
    }
  }
}

SpanId RankRecorder::begin(SpanKind kind, Stream stream, std::int32_t microbatch,
                           std::int32_t chunk, std::int32_t peer, NameId name) {
  if (!enabled_) return kNoSpan;
  if constexpr (nvtx::kCompiledIn) {
    char message[kSpanMessageCapacity];
    const std::string_view label = name < names_.size() ? names_[name] : std::string_view();
    format_span_message(message, kind, microbatch, chunk, peer, label);
    nvtx::push(nvtx_domain_, message, static_cast<std::uint32_t>(kind) + 1, span_color(kind));
  }
  const auto id = static_cast<SpanId>(spans_.size());
  RecordedSpan& s = spans_.emplace_back();
  s.microbatch = microbatch;
  s.peer = peer;
  s.name = name;
  s.parent = open_top_;
  s.chunk = static_cast<std::int16_t>(chunk);
  s.kind = kind;
  s.stream = stream;
  open_top_ = id;
  ++open_count_;
  s.start_ns = now_ns();  // last, so the span hugs the work
  return id;
}

SpanId RankRecorder::begin(SpanKind kind, Stream stream, std::int32_t microbatch,
                           std::int32_t chunk, std::int32_t peer, std::string_view name) {
  if (!enabled_) return kNoSpan;
  return begin(kind, stream, microbatch, chunk, peer, intern(name));
}

void RankRecorder::end(SpanId id) {
  if (id == kNoSpan) return;
  const std::int64_t t = now_ns();  // first, so the span hugs the work
  if (id != open_top_) throw_bad_end(id);
  RecordedSpan& s = spans_[id];
  s.end_ns = t;
  open_top_ = s.parent;
  --open_count_;
  if constexpr (nvtx::kCompiledIn) nvtx::pop(nvtx_domain_);
}

SpanId RankRecorder::add_timed(SpanKind kind, Stream stream, std::int32_t microbatch,
                               std::int32_t chunk, NameId name, std::int64_t start_ns,
                               std::int64_t end_ns) {
  if (!enabled_) return kNoSpan;
  if (end_ns < start_ns)
    throw std::logic_error("rank recorder (rank " + std::to_string(rank_) +
                           "): a timed span ends (" + std::to_string(end_ns) +
                           " ns) before it starts (" + std::to_string(start_ns) + " ns)");
  spans_.push_back({.start_ns = start_ns,
                    .end_ns = end_ns,
                    .microbatch = microbatch,
                    .name = name,
                    .chunk = static_cast<std::int16_t>(chunk),
                    .kind = kind,
                    .stream = stream});
  return static_cast<SpanId>(spans_.size() - 1);
}

void RankRecorder::throw_bad_end(SpanId id) const {
  std::string what =
      "rank recorder (rank " + std::to_string(rank_) + "): end of span " + std::to_string(id);
  if (id >= spans_.size()) {
    what += ", which was never begun";
  } else if (spans_[id].end_ns >= 0) {
    what += ", which has already ended";
  } else {
    what += " while span " + std::to_string(open_top_) +
            " (begun inside it) is still open; spans must end innermost first";
  }
  throw std::logic_error(what);
}

void RankRecorder::counter(NameId name, double value) {
  if (!enabled_) return;
  counters_.push_back(RecordedCounter{name, now_ns(), value});
}

void RankRecorder::counter(std::string_view name, double value) {
  if (!enabled_) return;
  counter(intern(name), value);
}

NameId RankRecorder::intern(std::string_view name) {
  if (name.empty()) return 0;
  if (const auto it = name_ids_.find(name); it != name_ids_.end()) return it->second;
  const auto id = static_cast<NameId>(names_.size());
  names_.emplace_back(name);
  name_ids_.emplace(std::string(name), id);
  return id;
}

void RankRecorder::clear() {
  if (open_count_ != 0)
    throw std::logic_error("rank recorder (rank " + std::to_string(rank_) + "): clear() with " +
                           std::to_string(open_count_) + " span(s) open");
  spans_.clear();
  counters_.clear();
  memory_.clear_samples();
}

}  // namespace pipetune::profiler
