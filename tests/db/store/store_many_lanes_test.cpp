// store_trace of a trace with more spans than one transaction holds: stored in slices of which
// only the first carries every lane and name (a profile of a million ranks has a million lanes,
// copied once, not once per slice), it comes back field by field, idle lanes and counter names
// included.
#include <gtest/gtest.h>

#include <string>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "store_test_support.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::profiler;
using testing::TempDir;

TEST(StoreManyLanes, SlicedTraceComesBackFieldByField) {
  constexpr std::int32_t kSpans = 250'003;  // three slices of WriterOptions::batch_rows
  constexpr std::int32_t kBusyLanes = 1000, kLanes = 1500;  // the last 500 idle
  Trace t;
  t.kind = TraceKind::Imported;
  for (std::int32_t r = 0; r < kLanes; ++r)
    t.lanes.push_back(Lane{r, Stream::Host, "rank " + std::to_string(r) + " host", 0});
  for (int n = 0; n < 5000; ++n) t.names.push_back("op " + std::to_string(n));
  t.names.push_back("counted only");
  const auto counted = static_cast<std::uint32_t>(t.names.size() - 1);
  for (std::int32_t i = 0; i < kSpans; ++i)
    t.spans.push_back(Span{static_cast<std::int32_t>(std::int64_t{i} * kBusyLanes / kSpans),
                           SpanKind::Range, -1, -1, -1, 1000 * std::int64_t{i},
                           1000 * std::int64_t{i} + 500,
                           i % 7 == 0 ? 0u : 1u + static_cast<std::uint32_t>(i % 5000)});
  t.counters.push_back(CounterSample{kLanes - 1, counted, 5, 1.5});
  t.counters.push_back(CounterSample{0, 3, 6, 2.5});
  t.steps.push_back(StepMetric{0, 1000 * std::int64_t{kSpans}, 1.0, 2.0});

  TempDir dir;
  const std::string path = dir.file("many.db");
  const std::int64_t id = store_trace(path, {TraceKind::Imported, "many lanes", "", ""}, t);
  Workspace ws(path);
  const StoredRun back = ws.load(id);
  EXPECT_EQ(testing::diff_traces(t, back.trace), "");
  EXPECT_EQ(back.run.span_count, kSpans);
}

}  // namespace
}  // namespace pipetune::db
