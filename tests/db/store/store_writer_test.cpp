// RunWriter behaviour: batches visible to readers while the run is live, producers on several
// threads, summary JSON, bad parts refused on the caller's thread, writer-thread failures
// rethrown and the run marked failed, and a writer destroyed without finish().
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "store_test_support.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::profiler;
using testing::TempDir;

// `count` back-to-back spans on (rank, Compute) starting at span index `first`.
Trace numbered_part(std::int32_t rank, std::int64_t first, std::int64_t count) {
  Trace part;
  part.kind = TraceKind::Measured;
  const auto lane = part.lane(rank, Stream::Compute);
  const auto name = part.intern("op");
  for (std::int64_t i = first; i < first + count; ++i)
    part.spans.push_back(Span{lane, SpanKind::F, 0, static_cast<std::int32_t>(i % 1000), -1, 10 * i,
                              10 * i + 7, name});
  return part;
}

TEST(RunWriter, CommittedBatchesAreVisibleWhileTheRunIsLive) {
  TempDir dir;
  const std::string path = dir.file("live.db");
  RunWriter writer(path, {TraceKind::Measured, "live", R"({"tp":1})", ""},
                   WriterOptions{1000, std::chrono::milliseconds(10)});
  writer.append(numbered_part(0, 0, 2500));
  writer.flush();
  {
    Workspace ws(path);
    const RunRecord r = ws.run(writer.run_id());
    EXPECT_EQ(r.status, RunStatus::Running) << "the writer (this process) is alive";
    EXPECT_EQ(r.span_count, 2500);
    EXPECT_EQ(ws.spans(r.id, 0, 0, 25000).size(), 2500u) << "partial blocks are readable";
  }
  writer.append(numbered_part(0, 2500, 500));
  writer.finish(RunStatus::Complete);
  Workspace ws(path);
  EXPECT_EQ(ws.run(writer.run_id()).status, RunStatus::Complete);
  EXPECT_EQ(ws.load(writer.run_id()).trace.spans.size(), 3000u);
}

TEST(RunWriter, ProducersOnManyThreadsLoseNothing) {
  TempDir dir;
  const std::string path = dir.file("threads.db");
  RunWriter writer(path, {TraceKind::Measured, "ranks", "", ""},
                   WriterOptions{700, std::chrono::milliseconds(2)});
  constexpr int kRanks = 4, kParts = 30, kSpans = 100;
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r)
    ranks.emplace_back([&, r] {
      for (int p = 0; p < kParts; ++p) writer.append(numbered_part(r, p * kSpans, kSpans));
    });
  for (auto& t : ranks) t.join();
  writer.finish();
  Workspace ws(path);
  const StoredRun run = ws.load(writer.run_id());
  ASSERT_EQ(run.trace.lanes.size(), static_cast<std::size_t>(kRanks));
  std::vector<std::set<std::int64_t>> starts(kRanks);
  for (const Span& s : run.trace.spans)
    starts[static_cast<std::size_t>(run.trace.lanes[static_cast<std::size_t>(s.lane)].rank)].insert(
        s.start_ns);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(starts[static_cast<std::size_t>(r)].size(), static_cast<std::size_t>(kParts * kSpans))
        << "rank " << r;
    EXPECT_EQ(ws.lanes(writer.run_id())[static_cast<std::size_t>(r)].max_depth, 0);
  }
}

TEST(RunWriter, SummaryJsonIsStoredAndBadJsonRefused) {
  TempDir dir;
  const std::string path = dir.file("summary.db");
  RunWriter writer(path, {TraceKind::Simulated, "s", "", ""});
  EXPECT_THROW(writer.set_summary_json("{iteration: 1"), InputError);
  writer.set_summary_json(R"({"iteration_s":1.5,"bubble_ratio":0.25})");
  writer.finish();
  Workspace ws(path);
  EXPECT_EQ(ws.run(writer.run_id()).summary_json, R"({"iteration_s":1.5,"bubble_ratio":0.25})");
  ws.set_summary_json(writer.run_id(), R"({"iteration_s":2})");
  EXPECT_EQ(ws.run(writer.run_id()).summary_json, R"({"iteration_s":2})");
  EXPECT_THROW(ws.set_summary_json(writer.run_id(), "nope"), InputError);
  EXPECT_THROW(RunWriter(path, {TraceKind::Simulated, "x", "{plan", ""}), InputError);
}

TEST(RunWriter, MalformedPartsAreRefusedOnTheCallersThread) {
  TempDir dir;
  RunWriter writer(dir.file("bad.db"), {TraceKind::Simulated, "s", "", ""});
  const auto message = [&](Trace part) {
    try {
      writer.append(part);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  Trace t = numbered_part(0, 0, 3);
  t.spans[1].lane = 5;
  EXPECT_EQ(message(t), "trace part: span 1 refers to lane 5 of 1");
  t = numbered_part(0, 0, 3);
  t.spans[2].end_ns = t.spans[2].start_ns - 1;
  EXPECT_EQ(message(t), "trace part: span 2 ends before it starts (start 20 ns, end 19 ns)");
  t = numbered_part(0, 0, 3);
  t.spans[0].name = 9;
  EXPECT_EQ(message(t), "trace part: span 0 refers to name 9 of 2");
  t = numbered_part(0, 0, 1);
  t.counters.push_back(CounterSample{0, 4, 0, 1.0});
  EXPECT_EQ(message(t), "trace part: counter 0 refers to name 4 of 2");
  writer.finish();
  EXPECT_THROW(writer.append(numbered_part(0, 0, 1)), std::logic_error);
  EXPECT_THROW(writer.finish(), std::logic_error);
}

// The writer thread's statement fails (the table is gone): the error comes back on the next
// call, the run is marked failed, and finish() rethrows it.
TEST(RunWriter, WriterThreadFailureIsRethrownAndTheRunMarkedFailed) {
  TempDir dir;
  const std::string path = dir.file("fail.db");
  RunWriter writer(path, {TraceKind::Imported, "doomed", "", ""});
  writer.append(numbered_part(0, 0, 10));
  writer.flush();
  {
    sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.set_busy_timeout(std::chrono::milliseconds(5000));
    raw.exec("DROP TABLE kernels");
  }
  writer.append_kernels({profiler::KernelRecord{}});
  try {
    writer.flush();
    ADD_FAILURE() << "flush should rethrow the writer thread's error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no such table: kernels"), std::string::npos) << e.what();
  }
  EXPECT_THROW(writer.append(numbered_part(0, 10, 1)), std::runtime_error);
  EXPECT_THROW(writer.finish(), std::runtime_error);
  // The workspace now lacks a table, so it no longer opens as one (Workspace refuses it, naming
  // the table): read the run's row directly.
  sqlite::Connection raw(path, SQLITE_OPEN_READONLY);
  sqlite::Statement s = raw.prepare(
      "SELECT status, (SELECT sum(span_count) FROM lanes WHERE run = ?1) FROM runs WHERE id = ?1");
  s.bind(1, writer.run_id());
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.column_text(0), "failed");
  EXPECT_EQ(s.column_int64(1), 10) << "what was committed before the failure stays";
}

TEST(RunWriter, DestroyedWithoutFinishFlushesAndMarksFailed) {
  TempDir dir;
  const std::string path = dir.file("abandoned.db");
  std::int64_t id = 0;
  {
    RunWriter writer(path, {TraceKind::Measured, "abandoned", "", ""},
                     WriterOptions{1000000, std::chrono::milliseconds(60000)});
    id = writer.run_id();
    writer.append(numbered_part(0, 0, 1234));  // nothing due: only the destructor commits it
  }
  Workspace ws(path);
  const RunRecord r = ws.run(id);
  EXPECT_EQ(r.status, RunStatus::Failed);
  EXPECT_EQ(r.span_count, 1234);
  EXPECT_GE(r.ended_unix_ns, r.started_unix_ns);
}

TEST(RunWriter, TrialsRoundTrip) {
  TempDir dir;
  Workspace ws(dir.file("trials.db"), OpenMode::Create);
  TrialRecord a;
  a.search_id = 7;
  a.plan_json = R"({"tp":2,"pp":4})";
  a.iteration_s = 1.25;
  a.tokens_per_s = 5000.5;
  a.mfu = 0.41;
  a.peak_memory_bytes = std::int64_t{70} << 30;
  TrialRecord b = a;
  b.feasible = false;
  b.pruned_reason = "tp=3 does not divide heads=16";
  b.run_id = -1;
  a.id = ws.add_trial(a);
  b.id = ws.add_trial(b);
  TrialRecord other = a;
  other.search_id = 8;
  ws.add_trial(other);
  const auto got = ws.trials(7);
  ASSERT_EQ(got.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const TrialRecord& want = i == 0 ? a : b;
    EXPECT_EQ(got[i].id, want.id);
    EXPECT_EQ(got[i].plan_json, want.plan_json);
    EXPECT_EQ(got[i].iteration_s, want.iteration_s);
    EXPECT_EQ(got[i].tokens_per_s, want.tokens_per_s);
    EXPECT_EQ(got[i].mfu, want.mfu);
    EXPECT_EQ(got[i].peak_memory_bytes, want.peak_memory_bytes);
    EXPECT_EQ(got[i].feasible, want.feasible);
    EXPECT_EQ(got[i].pruned_reason, want.pruned_reason);
    EXPECT_EQ(got[i].run_id, -1);
  }
}

}  // namespace
}  // namespace pipetune::db
