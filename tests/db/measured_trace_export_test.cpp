// A measured Trace (RankRecorders merged) exports with the Chrome trace writer: the JSON parses
// and holds one event per span, memory sample and counter.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <sstream>

#include "db/chrome_trace.hpp"
#include "profiler/recorder/merge_recorders.hpp"
#include "profiler/recorder/rank_recorder.hpp"
#include "profiler/recorder/tracked_buffer.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::profiler;

TEST(MeasuredTraceExport, MergedRecordersWriteParseableChromeJson) {
  const auto epoch = std::chrono::steady_clock::now();
  RankRecorder r0(0, epoch, true), r1(1, epoch, true);
  for (int mb = 0; mb < 3; ++mb) {
    for (RankRecorder* r : {&r0, &r1}) {
      ScopedSpan f(*r, SpanKind::F, Stream::Compute, mb, 0);
      TrackedBuffer act(r->memory(), MemoryCategory::Activations, 32);
      if (r->rank() == 0) ScopedSpan send(*r, SpanKind::Send, Stream::P2P, mb, 0, 1);
    }
    r1.counter("loss \"scaled\"", 0.5 * mb);  // a name that needs escaping
  }
  Trace trace = merge_recorders({&r0, &r1});
  trace.steps.push_back(StepMetric{0, r1.now_ns(), 2.5, 1000.0});  // step metrics: the caller's

  std::ostringstream out;
  write_chrome_trace(trace, out);
  const nlohmann::json json = nlohmann::json::parse(out.str());
  int complete = 0, async_begin = 0, async_end = 0, memory = 0, counters = 0;
  for (const auto& e : json.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "X") ++complete;
    if (ph == "b") ++async_begin;
    if (ph == "e") ++async_end;
    if (ph == "C" && e.at("name") == "memory bytes") ++memory;
    if (ph == "C" && e.at("name") == "loss \"scaled\"") ++counters;
  }
  EXPECT_EQ(complete, 6);  // F on two ranks, three micro-batches
  EXPECT_EQ(async_begin, 3);
  EXPECT_EQ(async_end, 3);
  EXPECT_EQ(memory, 12);  // allocate and release per F
  EXPECT_EQ(counters, 3);
}

}  // namespace
}  // namespace pipetune::db
