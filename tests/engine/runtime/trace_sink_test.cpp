// TrainOptions::trace_sink streams a run step by step: the parts, put together, hold exactly the
// records of the whole-run trace (record_trace), and each part holds one step of one rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::runtime {
namespace {

using Key = std::tuple<int, int, std::string, std::int64_t, std::int64_t, int, int>;

// A span as (rank, stream, label, start, end, micro-batch, chunk): comparable across traces
// whose lane and name tables differ.
std::vector<Key> keys(const profiler::Trace& t) {
  std::vector<Key> out;
  for (const profiler::Span& s : t.spans) {
    const profiler::Lane& lane = t.lanes[static_cast<std::size_t>(s.lane)];
    out.emplace_back(lane.rank, static_cast<int>(lane.stream), t.span_label(s), s.start_ns,
                     s.end_ns, s.microbatch, s.chunk);
  }
  return out;
}

TrainOptions options() {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.pp = 2;
  o.plan.dp = 2;
  o.plan.micro_batch_size = 2;
  o.plan.microbatches = 4;
  o.steps = 3;
  return o;
}

TEST(TraceSink, PartsAddUpToTheWholeRunTrace) {
  TrainOptions o = options();
  o.record_trace = true;
  std::mutex mutex;
  std::vector<profiler::Trace> parts;
  o.trace_sink = [&](profiler::Trace part) {
    std::lock_guard lock(mutex);
    parts.push_back(std::move(part));
  };
  const TrainResult r = train(o);
  ASSERT_EQ(parts.size(), 3u * 4u) << "one part per step and rank";

  std::vector<Key> streamed;
  std::vector<profiler::StepMetric> steps;
  std::int64_t memory = 0;
  for (const profiler::Trace& p : parts) {
    const std::vector<Key> k = keys(p);
    streamed.insert(streamed.end(), k.begin(), k.end());
    steps.insert(steps.end(), p.steps.begin(), p.steps.end());
    memory += static_cast<std::int64_t>(p.memory.size());
    std::set<int> ranks;
    for (const auto& lane : p.lanes) ranks.insert(lane.rank);
    EXPECT_EQ(ranks.size(), 1u) << "a part holds one rank";
  }
  std::vector<Key> whole = keys(r.trace);
  std::sort(streamed.begin(), streamed.end());
  std::sort(whole.begin(), whole.end());
  EXPECT_EQ(streamed.size(), whole.size());
  EXPECT_TRUE(streamed == whole) << "the streamed spans differ from the whole-run trace";
  EXPECT_EQ(memory, static_cast<std::int64_t>(r.trace.memory.size()));
  ASSERT_EQ(steps.size(), 3u);
  std::sort(steps.begin(), steps.end(),
            [](const auto& a, const auto& b) { return a.step < b.step; });
  for (std::size_t i = 0; i < steps.size(); ++i) {
    EXPECT_EQ(steps[i].step, r.trace.steps[i].step);
    EXPECT_EQ(steps[i].loss, r.trace.steps[i].loss);
  }
}

TEST(TraceSink, StreamsEveryStepWithoutKeepingTheWholeTrace) {
  TrainOptions o = options();
  std::mutex mutex;
  std::map<int, int> forwards_per_rank;
  o.trace_sink = [&](profiler::Trace part) {
    std::lock_guard lock(mutex);
    for (const profiler::Span& s : part.spans)
      if (s.kind == profiler::SpanKind::F)
        ++forwards_per_rank[part.lanes[static_cast<std::size_t>(s.lane)].rank];
  };
  const TrainResult r = train(o);
  EXPECT_TRUE(r.trace.spans.empty());
  ASSERT_EQ(forwards_per_rank.size(), 4u);
  for (const auto& [rank, count] : forwards_per_rank)
    EXPECT_EQ(count, 3 * 4) << "rank " << rank << ": one F per micro-batch and step";
}

// Steps are timed back to back: what a step end spends handing its trace to the sink and
// reporting counts in the next step's time, so the run's tokens/s is its wall-clock throughput.
// Reference: the sleeps themselves (each step after the first includes the previous step's sink
// and report), and the wall clock around the run (the steps' times add up to no more than it).
TEST(TraceSink, AStepEndsWorkCountsInTheRunsTime) {
  TrainOptions o = options();
  o.plan.pp = 1;
  o.plan.dp = 1;
  o.steps = 4;
  constexpr auto kSink = std::chrono::milliseconds(150), kReport = std::chrono::milliseconds(50);
  o.trace_sink = [&](profiler::Trace) { std::this_thread::sleep_for(kSink); };
  o.on_step = [&](const StepResult&) { std::this_thread::sleep_for(kReport); };
  const auto t0 = std::chrono::steady_clock::now();
  const TrainResult r = train(o);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ASSERT_EQ(r.steps.size(), 4u);
  double sum = 0.0;
  for (const StepResult& s : r.steps) {
    sum += s.seconds;
    if (s.step > 1) {
      EXPECT_GE(s.seconds, std::chrono::duration<double>(kSink + kReport).count())
          << "step " << s.step << " leaves out the previous step's end";
    }
    EXPECT_NEAR(s.tokens_per_s * s.seconds, static_cast<double>(r.tokens_per_step),
                1e-6 * static_cast<double>(r.tokens_per_step));
  }
  EXPECT_LE(sum, wall);
  const double steady_seconds =
      static_cast<double>(r.tokens_per_step) * 3.0 / steady_tokens_per_s(r);
  EXPECT_GE(steady_seconds, 3.0 * std::chrono::duration<double>(kSink + kReport).count());
}

}  // namespace
}  // namespace pipetune::runtime
