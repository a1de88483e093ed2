// The engine's measurement side: RankRecorder spans and counters, MemoryLedger balances,
// TrackedBuffer accounting and merge_recorders. The threaded merge test also runs under
// ThreadSanitizer (PIPETUNE_SANITIZE=thread).
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "profiler/recorder/memory_ledger.hpp"
#include "profiler/recorder/merge_recorders.hpp"
#include "profiler/recorder/rank_recorder.hpp"
#include "profiler/recorder/span_message.hpp"
#include "profiler/recorder/tracked_buffer.hpp"

namespace pipetune::profiler {
namespace {

using Clock = std::chrono::steady_clock;
using MC = MemoryCategory;

std::string message(SpanKind kind, int mb, int chunk, int peer, std::string_view name = {}) {
  char buf[kSpanMessageCapacity];
  const std::size_t n = format_span_message(buf, kind, mb, chunk, peer, name);
  EXPECT_EQ(n, std::string(buf).size());
  return buf;
}

// ---- RankRecorder ------------------------------------------------------------------------------

TEST(RankRecorder, SpansNestAndRecordKindMicrobatchChunkPeerAndTimes) {
  RankRecorder rec(2, Clock::now(), true);
  {
    ScopedSpan step(rec, SpanKind::Other, Stream::Compute, -1, -1, -1, "step");
    {
      ScopedSpan f(rec, SpanKind::F, Stream::Compute, 3, 1);
      EXPECT_EQ(rec.open_spans(), 2u);
      ScopedSpan send(rec, SpanKind::Send, Stream::P2P, 3, 1, 5);
      EXPECT_EQ(rec.open_spans(), 3u);
    }
    ScopedSpan b(rec, SpanKind::B, Stream::Compute, 3, 1);
  }
  EXPECT_EQ(rec.open_spans(), 0u);
  ASSERT_EQ(rec.spans().size(), 4u);
  const auto& s = rec.spans();

  EXPECT_EQ(s[0].kind, SpanKind::Other);
  EXPECT_EQ(rec.names()[s[0].name], "step");
  EXPECT_EQ(s[0].parent, kNoSpan);

  EXPECT_EQ(s[1].kind, SpanKind::F);
  EXPECT_EQ(s[1].stream, Stream::Compute);
  EXPECT_EQ(s[1].microbatch, 3);
  EXPECT_EQ(s[1].chunk, 1);
  EXPECT_EQ(s[1].peer, -1);
  EXPECT_EQ(s[1].name, 0u);
  EXPECT_EQ(s[1].parent, 0u);

  EXPECT_EQ(s[2].kind, SpanKind::Send);
  EXPECT_EQ(s[2].stream, Stream::P2P);
  EXPECT_EQ(s[2].peer, 5);
  EXPECT_EQ(s[2].parent, 1u);

  EXPECT_EQ(s[3].kind, SpanKind::B);
  EXPECT_EQ(s[3].parent, 0u);

  // Times: monotonic and properly nested (children inside parents, siblings in order).
  for (const auto& span : s) EXPECT_LE(span.start_ns, span.end_ns);
  EXPECT_GE(s[0].start_ns, 0);
  EXPECT_LE(s[0].start_ns, s[1].start_ns);
  EXPECT_LE(s[1].start_ns, s[2].start_ns);
  EXPECT_LE(s[2].end_ns, s[1].end_ns);
  EXPECT_LE(s[1].end_ns, s[3].start_ns);
  EXPECT_LE(s[3].end_ns, s[0].end_ns);
}

TEST(RankRecorder, TimesAreNanosecondsSinceTheSharedEpoch) {
  const auto epoch = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  RankRecorder rec(0, epoch, true);
  { ScopedSpan f(rec, SpanKind::F, Stream::Compute, 0, 0); }
  EXPECT_GE(rec.spans()[0].start_ns, 2'000'000);
  EXPECT_LE(rec.spans()[0].end_ns, rec.now_ns());
}

TEST(RankRecorder, BeginEndMustCloseTheInnermostSpan) {
  RankRecorder rec(1, Clock::now(), true);
  const SpanId outer = rec.begin(SpanKind::F, Stream::Compute, 0, 0);
  const SpanId inner = rec.begin(SpanKind::Send, Stream::P2P, 0, 0, 2);
  EXPECT_THROW(rec.end(outer), std::logic_error);
  rec.end(inner);
  EXPECT_THROW(rec.end(inner), std::logic_error);  // already ended
  rec.end(outer);
  EXPECT_THROW(rec.end(1234), std::logic_error);  // never begun
  rec.end(kNoSpan);                               // ignored
  EXPECT_EQ(rec.open_spans(), 0u);
  EXPECT_EQ(rec.spans()[inner].parent, outer);
}

TEST(RankRecorder, ScopedSpanCanEndEarlyOnce) {
  RankRecorder rec(0, Clock::now(), true);
  {
    ScopedSpan f(rec, SpanKind::F, Stream::Compute, 0, 0);
    f.end();
    f.end();
    ScopedSpan b(rec, SpanKind::B, Stream::Compute, 0, 0);  // a sibling, not a child
  }
  ASSERT_EQ(rec.spans().size(), 2u);
  EXPECT_EQ(rec.spans()[1].parent, kNoSpan);
  EXPECT_LE(rec.spans()[0].end_ns, rec.spans()[1].start_ns);
}

TEST(RankRecorder, DisabledRecorderRecordsNothing) {
  RankRecorder rec(0, Clock::now(), false);
  {
    ScopedSpan f(rec, SpanKind::F, Stream::Compute, 0, 0, -1, "named");
    ScopedSpan s(rec, SpanKind::Send, Stream::P2P, 0, 0, 1);
    EXPECT_EQ(f.id(), kNoSpan);
  }
  EXPECT_EQ(rec.begin(SpanKind::W, Stream::Compute), kNoSpan);
  rec.end(kNoSpan);
  rec.counter("held", 2.0);
  rec.memory().allocate(MC::Activations, 64);
  EXPECT_TRUE(rec.spans().empty());
  EXPECT_TRUE(rec.counters().empty());
  EXPECT_EQ(rec.names().size(), 1u);  // nothing interned on the hot path
  EXPECT_TRUE(rec.memory().samples().empty());
  EXPECT_EQ(rec.memory().current(MC::Activations), 64);  // balances are still kept
  EXPECT_EQ(rec.open_spans(), 0u);
}

TEST(RankRecorder, NamesAreInternedOnceAndSpansDoNotReallocate) {
  RankRecorder rec(0, Clock::now(), true, 256);
  const std::size_t capacity = rec.spans().capacity();
  ASSERT_GE(capacity, 256u);
  const NameId embed = rec.intern("embed");
  for (int mb = 0; mb < 100; ++mb) {
    ScopedSpan a(rec, SpanKind::F, Stream::Compute, mb, 0, -1, "embed");
    ScopedSpan b(rec, SpanKind::Other, Stream::Compute, mb, 0, -1, embed);
  }
  EXPECT_EQ(rec.spans().size(), 200u);
  EXPECT_EQ(rec.spans().capacity(), capacity);
  ASSERT_EQ(rec.names().size(), 2u);
  EXPECT_EQ(rec.intern("embed"), embed);
  EXPECT_EQ(rec.intern(""), 0u);
  for (const auto& s : rec.spans()) EXPECT_EQ(s.name, embed);
}

TEST(RankRecorder, CountersKeepNameValueAndTime) {
  RankRecorder rec(4, Clock::now(), true);
  rec.counter("activations held", 1);
  rec.counter("activations held", 2);
  rec.counter("loss scale", 1024.0);
  ASSERT_EQ(rec.counters().size(), 3u);
  EXPECT_EQ(rec.counters()[0].name, rec.counters()[1].name);
  EXPECT_EQ(rec.names()[rec.counters()[2].name], "loss scale");
  EXPECT_DOUBLE_EQ(rec.counters()[1].value, 2.0);
  EXPECT_LE(rec.counters()[0].t_ns, rec.counters()[1].t_ns);
  EXPECT_LE(rec.counters()[1].t_ns, rec.counters()[2].t_ns);
}

TEST(RankRecorder, ClearDropsRecordsButKeepsNamesAndBalances) {
  RankRecorder rec(0, Clock::now(), true);
  { ScopedSpan f(rec, SpanKind::F, Stream::Compute, 0, 0, -1, "warm-up"); }
  rec.counter("c", 1);
  rec.memory().allocate(MC::Parameters, 100);
  {
    ScopedSpan open(rec, SpanKind::F, Stream::Compute, 1, 0);
    EXPECT_THROW(rec.clear(), std::logic_error);
  }
  rec.clear();
  EXPECT_TRUE(rec.spans().empty());
  EXPECT_TRUE(rec.counters().empty());
  EXPECT_TRUE(rec.memory().samples().empty());
  EXPECT_EQ(rec.names().size(), 3u);
  EXPECT_EQ(rec.memory().current(MC::Parameters), 100);
}

TEST(SpanMessage, FormatsKindMicrobatchChunkAndPeer) {
  EXPECT_EQ(message(SpanKind::F, 3, 0, -1), "F mb=3 c=0");
  EXPECT_EQ(message(SpanKind::Send, 3, -1, 5), "send mb=3 -> 5");
  EXPECT_EQ(message(SpanKind::BW, 12, 1, -1), "BW mb=12 c=1");
  EXPECT_EQ(message(SpanKind::AllReduce, -1, -1, -1), "all-reduce");
  EXPECT_EQ(message(SpanKind::Other, 1, 0, -1, "embed"), "embed mb=1 c=0");
  char small[8];
  EXPECT_EQ(format_span_message(small, SpanKind::Send, 123, 4, 5, {}), 7u);
  EXPECT_EQ(std::string(small), "send mb");
  EXPECT_NE(span_color(SpanKind::F), span_color(SpanKind::B));
}

// ---- MemoryLedger ------------------------------------------------------------------------------

TEST(MemoryLedger, CurrentAndPeakPerCategoryFollowAHandComputedSequence) {
  MemoryLedger ledger(3, Clock::now());
  struct Step {
    bool allocate;
    MC category;
    std::int64_t bytes;
    std::int64_t total_after;
  };
  const Step steps[] = {
      {true, MC::Parameters, 1000, 1000},  {true, MC::Activations, 300, 1300},
      {true, MC::Activations, 200, 1500},  {false, MC::Activations, 300, 1200},
      {true, MC::Temporaries, 250, 1450},  {true, MC::Temporaries, 100, 1550},
      {false, MC::Temporaries, 350, 1200}, {false, MC::Activations, 200, 1000},
  };
  for (const Step& s : steps) {
    if (s.allocate) {
      ledger.allocate(s.category, s.bytes);
    } else {
      ledger.release(s.category, s.bytes);
    }
    EXPECT_EQ(ledger.current_total(), s.total_after);
  }
  EXPECT_EQ(ledger.current(MC::Parameters), 1000);
  EXPECT_EQ(ledger.peak(MC::Parameters), 1000);
  EXPECT_EQ(ledger.current(MC::Activations), 0);
  EXPECT_EQ(ledger.peak(MC::Activations), 500);
  EXPECT_EQ(ledger.current(MC::Temporaries), 0);
  EXPECT_EQ(ledger.peak(MC::Temporaries), 350);
  EXPECT_EQ(ledger.peak(MC::Gradients), 0);
  // The total peaked at 1550 (parameters 1000 + activations 200 + temporaries 350), less than
  // the 1850 that adding the per-category peaks would claim.
  EXPECT_EQ(ledger.peak_total(), 1550);

  // One sample per change: the category's bytes from then on, in time order, tagged with rank.
  const std::int64_t expected[][2] = {{0, 1000}, {3, 300}, {3, 500}, {3, 200},
                                      {4, 250},  {4, 350}, {4, 0},   {3, 0}};
  ASSERT_EQ(ledger.samples().size(), std::size(expected));
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    const MemorySample& m = ledger.samples()[i];
    EXPECT_EQ(static_cast<int>(m.category), expected[i][0]) << "sample " << i;
    EXPECT_EQ(m.bytes, expected[i][1]) << "sample " << i;
    EXPECT_EQ(m.rank, 3);
    if (i > 0) {
      EXPECT_LE(ledger.samples()[i - 1].t_ns, m.t_ns);
    }
  }

  ledger.reset_peaks();
  EXPECT_EQ(ledger.peak(MC::Activations), 0);
  EXPECT_EQ(ledger.peak_total(), 1000);
}

TEST(MemoryLedger, ReleasingMoreThanAllocatedThrowsNamingTheCategory) {
  MemoryLedger ledger(1, Clock::now());
  ledger.allocate(MC::OptimizerState, 100);
  try {
    ledger.release(MC::OptimizerState, 101);
    FAIL() << "expected std::logic_error";
  } catch (const std::logic_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("optimizer_state"), std::string::npos) << what;
    EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
  }
  EXPECT_THROW(ledger.release(MC::VocabularyLayers, 1), std::logic_error);
  EXPECT_THROW(ledger.allocate(MC::Gradients, -5), std::invalid_argument);
  EXPECT_EQ(ledger.current(MC::OptimizerState), 100);  // a failed release changes nothing
  EXPECT_EQ(ledger.samples().size(), 1u);
  ledger.allocate(MC::Gradients, 0);  // no change, no sample
  EXPECT_EQ(ledger.samples().size(), 1u);
}

// ---- TrackedBuffer -----------------------------------------------------------------------------

std::int64_t bytes_of(const TrackedBuffer& b) {
  return static_cast<std::int64_t>(b.capacity() * sizeof(float));
}

TEST(TrackedBuffer, ReportsItsBytesAndReleasesThemOnDestruction) {
  MemoryLedger ledger(0, Clock::now());
  {
    TrackedBuffer a(ledger, MC::Activations, 256, 1.5f);
    EXPECT_EQ(a.size(), 256u);
    EXPECT_EQ(a[255], 1.5f);
    EXPECT_EQ(a.bytes(), bytes_of(a));
    EXPECT_EQ(ledger.current(MC::Activations), 1024);
    a.resize(1000);
    EXPECT_EQ(ledger.current(MC::Activations), bytes_of(a));
    a.clear();  // keeps the storage
    EXPECT_EQ(ledger.current(MC::Activations), bytes_of(a));
    a.shrink_to_fit();
    EXPECT_EQ(ledger.current(MC::Activations), 0);
    a.assign(10, 2.0f);
    EXPECT_EQ(ledger.current(MC::Activations), 40);
    TrackedBuffer copy = a.clone();
    EXPECT_EQ(copy[9], 2.0f);
    EXPECT_EQ(ledger.current(MC::Activations), 80);
    std::span<const float> view = copy;
    EXPECT_EQ(view.size(), 10u);
    a.release();
    EXPECT_EQ(a.capacity(), 0u);
    EXPECT_EQ(ledger.current(MC::Activations), 40);
  }
  EXPECT_EQ(ledger.current(MC::Activations), 0);
  EXPECT_EQ(ledger.peak(MC::Activations), 4000);
}

TEST(TrackedBuffer, MovesCarryTheBytesWithoutDoubleCounting) {
  MemoryLedger ledger(0, Clock::now());
  {
    TrackedBuffer a(ledger, MC::Activations, 256);
    TrackedBuffer b(std::move(a));  // move construction
    EXPECT_EQ(a.bytes(), 0);        // NOLINT(bugprone-use-after-move): moved-from is empty
    EXPECT_TRUE(a.empty());         // NOLINT(bugprone-use-after-move)
    EXPECT_EQ(b.bytes(), 1024);
    EXPECT_EQ(ledger.current(MC::Activations), 1024);

    TrackedBuffer t(ledger, MC::Temporaries, 100);
    EXPECT_EQ(ledger.current_total(), 1424);
    t = std::move(b);  // t gives back its temporaries and takes b's activations
    EXPECT_EQ(ledger.current(MC::Temporaries), 0);
    EXPECT_EQ(ledger.current(MC::Activations), 1024);
    EXPECT_EQ(t.category(), MC::Activations);
    TrackedBuffer& same = t;
    t = std::move(same);  // self-move keeps everything
    EXPECT_EQ(ledger.current(MC::Activations), 1024);
    EXPECT_EQ(t.size(), 256u);

    // Reallocation of a vector of buffers moves them: the total stays put.
    std::vector<TrackedBuffer> many;
    for (int i = 0; i < 20; ++i) many.emplace_back(ledger, MC::Activations, 16);
    EXPECT_EQ(ledger.current(MC::Activations), 1024 + 20 * 64);
    many.erase(many.begin());
    EXPECT_EQ(ledger.current(MC::Activations), 1024 + 19 * 64);
    a.resize(8);  // the moved-from buffer is still bound to its ledger
    EXPECT_EQ(ledger.current(MC::Activations), 1024 + 19 * 64 + 32);
  }
  EXPECT_EQ(ledger.current_total(), 0);
}

TEST(TrackedBuffer, MoveAcrossLedgersKeepsEachBalanceRight) {
  MemoryLedger first(0, Clock::now());
  MemoryLedger second(1, Clock::now());
  TrackedBuffer from_first(first, MC::Gradients, 10);
  TrackedBuffer in_second(second, MC::Gradients, 20);
  in_second = std::move(from_first);
  EXPECT_EQ(second.current(MC::Gradients), 0);
  EXPECT_EQ(first.current(MC::Gradients), 40);
  EXPECT_EQ(in_second.ledger(), &first);
  in_second.release();
  EXPECT_EQ(first.current(MC::Gradients), 0);

  TrackedBuffer untracked;  // no ledger: nothing reported
  untracked.resize(100);
  EXPECT_EQ(untracked.bytes(), 0);
}

// ---- merge_recorders ---------------------------------------------------------------------------

// What a pipeline rank of a 3-stage run does per micro-batch: forward (and, except on the last
// stage, a send to the next rank), an all-reduce on rank 1, memory and a counter.
void fill(RankRecorder& rec, int microbatches) {
  const int rank = rec.rank();
  std::vector<TrackedBuffer> held;
  for (int mb = 0; mb < microbatches; ++mb) {
    {
      ScopedSpan f(rec, SpanKind::F, Stream::Compute, mb, 0);
      held.emplace_back(rec.memory(), MC::Activations, 64);
    }
    if (rank < 2) ScopedSpan send(rec, SpanKind::Send, Stream::P2P, mb, 0, rank + 1);
    rec.counter("activations held", static_cast<double>(held.size()));
  }
  for (int mb = 0; mb < microbatches; ++mb) {
    ScopedSpan b(rec, SpanKind::BW, Stream::Compute, mb, 0, -1, "backward");
    held.erase(held.begin());
  }
  if (rank == 1) ScopedSpan ar(rec, SpanKind::AllReduce, Stream::Comm);
}

TEST(MergeRecorders, ThreeRanksRecordedConcurrentlyMergeIntoLanes) {
  constexpr int kMicrobatches = 50;
  const auto epoch = Clock::now();
  // One recorder per rank, each used by its own thread only.
  RankRecorder r0(0, epoch, true), r1(1, epoch, true), r2(2, epoch, true);
  {
    std::vector<std::jthread> threads;
    for (RankRecorder* r : {&r2, &r0, &r1}) threads.emplace_back([r] { fill(*r, kMicrobatches); });
  }
  const Trace trace = merge_recorders({&r2, &r0, &r1});  // any order in, rank order out
  EXPECT_EQ(trace.kind, TraceKind::Measured);

  struct ExpectedLane {
    std::int32_t rank;
    Stream stream;
    std::size_t spans;
  };
  const ExpectedLane expected[] = {
      {0, Stream::Compute, 2 * kMicrobatches}, {0, Stream::P2P, kMicrobatches},
      {1, Stream::Compute, 2 * kMicrobatches}, {1, Stream::Comm, 1},
      {1, Stream::P2P, kMicrobatches},         {2, Stream::Compute, 2 * kMicrobatches},
  };
  ASSERT_EQ(trace.lanes.size(), std::size(expected));
  std::vector<std::size_t> per_lane(trace.lanes.size(), 0);
  for (const Span& s : trace.spans) ++per_lane.at(static_cast<std::size_t>(s.lane));
  for (std::size_t i = 0; i < std::size(expected); ++i) {
    EXPECT_EQ(trace.lanes[i].rank, expected[i].rank) << "lane " << i;
    EXPECT_EQ(trace.lanes[i].stream, expected[i].stream) << "lane " << i;
    EXPECT_EQ(per_lane[i], expected[i].spans) << "lane " << i;
  }
  EXPECT_EQ(trace.lanes[1].name, "rank 0 p2p");

  // Lanes are contiguous and in time order; sends name their peer.
  for (std::size_t i = 1; i < trace.spans.size(); ++i) {
    const Span& prev = trace.spans[i - 1];
    const Span& s = trace.spans[i];
    EXPECT_LE(prev.lane, s.lane);
    if (prev.lane == s.lane) {
      EXPECT_LE(prev.start_ns, s.start_ns);
    }
    EXPECT_LE(s.start_ns, s.end_ns);
    if (s.kind == SpanKind::Send) {
      EXPECT_EQ(s.peer, trace.lanes[static_cast<std::size_t>(s.lane)].rank + 1);
    }
  }
  // One "backward" name for all ranks; its spans use it.
  std::size_t named = 0;
  for (const Span& s : trace.spans) {
    if (s.kind == SpanKind::BW) {
      EXPECT_EQ(trace.names.at(s.name), "backward");
      ++named;
    }
  }
  EXPECT_EQ(named, 3u * kMicrobatches);
  EXPECT_EQ(trace.span_label(trace.spans[0]), "F0.0");

  // Memory: every forward allocated 256 bytes and every backward released them.
  ASSERT_EQ(trace.memory.size(), 3u * 2 * kMicrobatches);
  for (std::size_t i = 0; i < trace.memory.size(); ++i) {
    const MemorySample& m = trace.memory[i];
    EXPECT_EQ(m.rank, static_cast<std::int32_t>(i / (2 * kMicrobatches)));
    EXPECT_EQ(m.category, MC::Activations);
    const auto k = static_cast<std::int64_t>(i % (2 * kMicrobatches));
    EXPECT_EQ(m.bytes, k < kMicrobatches ? (k + 1) * 256 : (2 * kMicrobatches - 1 - k) * 256);
  }
  for (const RankRecorder* r : {&r0, &r1, &r2}) {
    EXPECT_EQ(r->memory().peak(MC::Activations), kMicrobatches * 256);
    EXPECT_EQ(r->memory().current_total(), 0);
  }

  ASSERT_EQ(trace.counters.size(), 3u * kMicrobatches);
  for (const CounterSample& c : trace.counters)
    EXPECT_EQ(trace.names.at(c.name), "activations held");
  EXPECT_EQ(trace.counters.back().rank, 2);
  EXPECT_DOUBLE_EQ(trace.counters.back().value, kMicrobatches);
}

TEST(MergeRecorders, RejectsOpenSpansDuplicateRanksAndNull) {
  const auto epoch = Clock::now();
  RankRecorder a(0, epoch, true), b(0, epoch, true), c(1, epoch, true);
  EXPECT_THROW(merge_recorders({&a, &b}), std::invalid_argument);
  EXPECT_THROW(merge_recorders({&a, nullptr}), std::invalid_argument);
  const SpanId open = c.begin(SpanKind::F, Stream::Compute, 0, 0);
  EXPECT_THROW(merge_recorders({&a, &c}), std::logic_error);
  c.end(open);
  EXPECT_EQ(merge_recorders({&a, &c}).spans.size(), 1u);
}

TEST(MergeRecorders, DisabledRecordersGiveAnEmptyMeasuredTrace) {
  RankRecorder a(0, Clock::now(), false);
  { ScopedSpan f(a, SpanKind::F, Stream::Compute, 0, 0); }
  const Trace trace = merge_recorders({&a});
  EXPECT_EQ(trace.kind, TraceKind::Measured);
  EXPECT_TRUE(trace.lanes.empty());
  EXPECT_TRUE(trace.spans.empty());
  EXPECT_TRUE(trace.memory.empty());
}

}  // namespace
}  // namespace pipetune::profiler
