// The measurement side of the training engine, one RankRecorder per rank. The rank's thread (and
// only it: no locks; what another thread of the rank times comes in through add_timed) records
// spans — op kind, stream, micro-batch, chunk, peer, steady-clock ns
// since an epoch shared by all ranks — and counters, and accounts memory through the recorder's
// MemoryLedger. Spans go into a vector reserved up front; names are interned per recorder, so a
// span allocates nothing in the common case. When NVTX is compiled in, every span is also an NVTX
// push/pop range in the "pipetune" domain ("F mb=3 c=0"). A disabled recorder records nothing:
// a ScopedSpan then costs one branch (memory balances are still kept, without samples).
// After the rank threads are joined, merge_recorders() (merge_recorders.hpp) makes one Trace.
//
//   profiler::ScopedSpan span(recorder, SpanKind::F, Stream::Compute, microbatch, chunk);
//   profiler::ScopedSpan send(recorder, SpanKind::Send, Stream::P2P, microbatch, chunk, peer);
//   recorder.counter("activations held", 3);
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "profiler/recorder/memory_ledger.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler {

using NameId = std::uint32_t;  // index into RankRecorder::names(); 0 is the empty name
using SpanId = std::uint32_t;  // index into RankRecorder::spans()
inline constexpr SpanId kNoSpan = 0xFFFFFFFFu;

struct RecordedSpan {
  std::int64_t start_ns = 0;
  std::int64_t end_ns = -1;  // -1 while open
  std::int32_t microbatch = -1;
  std::int32_t peer = -1;
  NameId name = 0;
  SpanId parent = kNoSpan;  // the innermost span open when this one began
  std::int16_t chunk = -1;
  SpanKind kind = SpanKind::Other;
  Stream stream = Stream::Compute;
};

struct RecordedCounter {
  NameId name = 0;
  std::int64_t t_ns = 0;
  double value = 0.0;
};

// True when this build emits NVTX ranges (the NVTX headers were found at configure time).
bool nvtx_compiled_in() noexcept;

class RankRecorder {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::size_t kDefaultReserve = std::size_t{1} << 14;

  // reserve_spans is the span (and counter) capacity set aside when enabled.
  RankRecorder(std::int32_t rank, Clock::time_point epoch, bool enabled,
               std::size_t reserve_spans = kDefaultReserve);
  // ScopedSpans and TrackedBuffers point into the recorder: it stays where it was made.
  RankRecorder(const RankRecorder&) = delete;
  RankRecorder& operator=(const RankRecorder&) = delete;

  bool enabled() const noexcept { return enabled_; }
  std::int32_t rank() const noexcept { return rank_; }
  Clock::time_point epoch() const noexcept { return epoch_; }
  std::int64_t now_ns() const noexcept {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - epoch_).count();
  }

  // Opens a span and returns its id (kNoSpan when disabled). Spans nest: end() must close the
  // innermost open span (std::logic_error otherwise), which is what NVTX push/pop needs too.
  SpanId begin(SpanKind kind, Stream stream, std::int32_t microbatch = -1, std::int32_t chunk = -1,
               std::int32_t peer = -1, NameId name = 0);
  SpanId begin(SpanKind kind, Stream stream, std::int32_t microbatch, std::int32_t chunk,
               std::int32_t peer, std::string_view name);
  // Closes span id; kNoSpan is ignored.
  void end(SpanId id);
  // A span timed by another thread of the rank (its gradient reductions), [start_ns, end_ns) on
  // this recorder's clock: added closed, nested in nothing, and without an NVTX range (that
  // thread's work is not inside this one's ranges). kNoSpan when disabled.
  SpanId add_timed(SpanKind kind, Stream stream, std::int32_t microbatch, std::int32_t chunk,
                   NameId name, std::int64_t start_ns, std::int64_t end_ns);

  // A counter sample (the value of a named series from now on).
  void counter(NameId name, double value);
  void counter(std::string_view name, double value);

  // The id of name, added on first use (the only allocation); works when disabled too.
  NameId intern(std::string_view name);

  MemoryLedger& memory() noexcept { return memory_; }
  const MemoryLedger& memory() const noexcept { return memory_; }

  const std::vector<RecordedSpan>& spans() const noexcept { return spans_; }
  const std::vector<RecordedCounter>& counters() const noexcept { return counters_; }
  const std::vector<std::string>& names() const noexcept { return names_; }
  // Number of spans begun and not yet ended.
  std::size_t open_spans() const noexcept { return open_count_; }

  // Drops spans, counters and memory samples, keeping capacity, names and memory balances (for
  // example after warm-up steps). std::logic_error while a span is open.
  void clear();

 private:
  struct NameHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };

  [[noreturn]] void throw_bad_end(SpanId id) const;

  std::int32_t rank_;
  Clock::time_point epoch_;
  bool enabled_;
  void* nvtx_domain_ = nullptr;  // nvtx::Domain; stays null without NVTX
  std::vector<RecordedSpan> spans_;
  std::vector<RecordedCounter> counters_;
  std::vector<std::string> names_{""};
  std::unordered_map<std::string, NameId, NameHash, std::equal_to<>> name_ids_;
  SpanId open_top_ = kNoSpan;
  std::size_t open_count_ = 0;
  MemoryLedger memory_;
};

// RAII span: begins in the constructor, ends in the destructor (or at end()). Costs one branch
// on a disabled recorder.
class ScopedSpan {
 public:
  ScopedSpan(RankRecorder& recorder, SpanKind kind, Stream stream, std::int32_t microbatch = -1,
             std::int32_t chunk = -1, std::int32_t peer = -1, NameId name = 0)
      : recorder_(recorder.enabled() ? &recorder : nullptr) {
    if (recorder_ != nullptr) id_ = recorder_->begin(kind, stream, microbatch, chunk, peer, name);
  }
  ScopedSpan(RankRecorder& recorder, SpanKind kind, Stream stream, std::int32_t microbatch,
             std::int32_t chunk, std::int32_t peer, std::string_view name)
      : recorder_(recorder.enabled() ? &recorder : nullptr) {
    if (recorder_ != nullptr) id_ = recorder_->begin(kind, stream, microbatch, chunk, peer, name);
  }
  // A recorder that may be absent (nullptr records nothing).
  ScopedSpan(RankRecorder* recorder, SpanKind kind, Stream stream, std::int32_t microbatch = -1,
             std::int32_t chunk = -1, std::int32_t peer = -1, NameId name = 0)
      : recorder_(recorder != nullptr && recorder->enabled() ? recorder : nullptr) {
    if (recorder_ != nullptr) id_ = recorder_->begin(kind, stream, microbatch, chunk, peer, name);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  ~ScopedSpan() {
    if (recorder_ != nullptr) recorder_->end(id_);
  }

  // Ends the span before the scope does (once; later calls do nothing).
  void end() {
    if (recorder_ != nullptr) {
      recorder_->end(id_);
      recorder_ = nullptr;
    }
  }
  SpanId id() const noexcept { return id_; }

 private:
  RankRecorder* recorder_;
  SpanId id_ = kNoSpan;
};

}  // namespace pipetune::profiler
