// The Chrome trace export, checked by parsing its output: a process per rank, a thread per lane
// with its name, every span once (kind as category), memory counters by category, one flow per
// matched send/receive; and the round trip through db/import's Chrome importer.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "db/chrome_trace.hpp"
#include "db/import/chrome_trace_import.hpp"
#include "db/import/nsys_sqlite.hpp"
#include "engine/schedule/generators.hpp"
#include "tests/db/import/import_test_helpers.hpp"
#include "tests/db/import/nsys_export_writer.hpp"
#include "tuner/sim/simulator.hpp"

namespace pipetune::db {
namespace {

using nlohmann::json;
using namespace pipetune::db::testing;
using profiler::Lane;
using profiler::MemoryCategory;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;
using profiler::Trace;

json export_json(const Trace& t, const ChromeTraceOptions& options = {}) {
  std::ostringstream out;
  write_chrome_trace(t, out, options);
  return json::parse(out.str());
}

std::int64_t ns_of(const json& us) {
  return std::llround(us.get<double>() * 1000.0);
}

// 1F1B over 4 stages and 6 micro-batches with a p2p latency, activations in bytes; a receive per
// simulated send (same window, on the receiver's p2p lane) and a parameter sample per rank.
Trace simulated_trace() {
  schedule::GeneratorParams g;
  g.name = "1f1b";
  g.stages = 4;
  g.microbatches = 6;
  schedule::CostTable costs = schedule::CostTable::uniform(4, 1.0, 1.0, 1.0);
  costs.p2p_latency = 0.1;
  g.costs = costs;
  sim::SimOptions options;
  options.activation_bytes_per_microbatch = {1000.0, 1000.0, 1000.0, 1000.0};
  Trace t = sim::simulate(schedule::generate(g), costs, options).trace;
  const std::size_t n = t.spans.size();
  for (std::size_t i = 0; i < n; ++i) {
    const Span s = t.spans[i];
    if (s.kind != SpanKind::Send) continue;
    Span r = s;
    r.kind = SpanKind::Recv;
    r.lane = t.lane(s.peer, Stream::P2P);
    r.peer = t.lanes[static_cast<std::size_t>(s.lane)].rank;
    t.spans.push_back(r);
  }
  for (std::int32_t rank = 0; rank < 4; ++rank)  // before the activations of the same instant
    t.memory.insert(t.memory.begin(), {rank, MemoryCategory::Parameters, 0, 5000 + rank});
  return t;
}

struct Parsed {
  std::map<std::int64_t, std::string> process_names;                     // pid -> name
  std::map<std::pair<std::int64_t, std::int64_t>, std::string> threads;  // (pid, tid) -> name
  std::vector<json> spans;                                               // X and b events
  std::vector<json> memory;    // "memory bytes" counter events
  std::vector<json> counters;  // other counter events
  std::size_t async_ends = 0;
};

Parsed parse(const json& doc) {
  Parsed p;
  for (const json& e : doc.at("traceEvents")) {
    const std::string ph = e.at("ph");
    if (ph == "M" && e.at("name") == "process_name")
      p.process_names[e.at("pid")] = e.at("args").at("name");
    if (ph == "M" && e.at("name") == "thread_name") {
      const bool fresh =
          p.threads.emplace(std::pair(e.at("pid"), e.at("tid")), e.at("args").at("name")).second;
      EXPECT_TRUE(fresh) << "two thread_name events for " << e.dump();
    }
    if (ph == "X" || ph == "b") p.spans.push_back(e);
    if (ph == "e") ++p.async_ends;
    if (ph == "C") (e.at("name") == "memory bytes" ? p.memory : p.counters).push_back(e);
  }
  return p;
}

TEST(ChromeTraceExport, SimulatedTraceProcessesThreadsSpansAndMemory) {
  const Trace t = simulated_trace();
  const Parsed p = parse(export_json(t));

  EXPECT_EQ(p.process_names, (std::map<std::int64_t, std::string>{
                                 {0, "rank 0"}, {1, "rank 1"}, {2, "rank 2"}, {3, "rank 3"}}));
  // A thread per lane, named after its stream.
  ASSERT_EQ(p.threads.size(), t.lanes.size());
  for (std::size_t i = 0; i < t.lanes.size(); ++i) {
    const Lane& lane = t.lanes[i];
    auto it = p.threads.find({lane.rank, static_cast<std::int64_t>(i)});
    ASSERT_NE(it, p.threads.end()) << lane.name;
    EXPECT_EQ(it->second, std::string(profiler::stream_name(lane.stream))) << lane.name;
  }

  // Every span once, on its lane's thread, with its kind, times and micro-batch.
  ASSERT_EQ(p.spans.size(), t.spans.size());
  EXPECT_EQ(p.async_ends, static_cast<std::size_t>(
                              std::count_if(t.spans.begin(), t.spans.end(), [](const Span& s) {
                                return s.kind == SpanKind::Send || s.kind == SpanKind::Recv;
                              })));
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    const Span& s = t.spans[i];
    const json& e = p.spans[i];
    const Lane& lane = t.lanes[static_cast<std::size_t>(s.lane)];
    EXPECT_EQ(e.at("pid"), lane.rank);
    EXPECT_EQ(e.at("tid"), s.lane);
    EXPECT_EQ(e.at("cat"), std::string(profiler::span_kind_name(s.kind)));
    EXPECT_EQ(e.at("name"), t.span_label(s));
    EXPECT_EQ(ns_of(e.at("ts")), s.start_ns);
    if (e.at("ph") == "X") {
      EXPECT_EQ(ns_of(e.at("dur")), s.end_ns - s.start_ns);
    }
    EXPECT_EQ(e.at("args").value("microbatch", -1), s.microbatch);
  }

  // Memory: an event per sample; each carries the rank's parameters (set at t = 0) and its
  // activations so far, which replay the simulator's activation samples in time order.
  ASSERT_EQ(p.memory.size(), t.memory.size());
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> activations;
  for (const auto& m : t.memory)
    if (m.category == MemoryCategory::Activations)
      activations[m.rank].emplace_back(m.t_ns, m.bytes);
  std::map<std::int64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> replay;
  for (const json& e : p.memory) {
    const std::int64_t rank = e.at("pid");
    EXPECT_EQ(e.at("args").at("parameters"), 5000 + rank) << e.dump();
    if (e.at("args").contains("activations"))
      replay[rank].emplace_back(ns_of(e.at("ts")), e.at("args").at("activations"));
  }
  for (auto& [rank, v] : activations) std::stable_sort(v.begin(), v.end());
  EXPECT_EQ(replay, activations);
  EXPECT_EQ(p.counters.size(), t.counters.size());  // "activations (micro-batches)"
}

TEST(ChromeTraceExport, OneFlowPerMatchedSendAndReceive) {
  const Trace t = simulated_trace();
  const Parsed p = parse(export_json(t));
  std::map<std::int64_t, std::vector<json>> by_id;
  std::size_t outs = 0, ins = 0;
  for (const json& e : p.spans) {
    if (!e.contains("bind_id")) continue;
    by_id[e.at("bind_id")].push_back(e);
    outs += e.value("flow_out", false);
    ins += e.value("flow_in", false);
  }
  const auto sends = static_cast<std::size_t>(std::count_if(
      t.spans.begin(), t.spans.end(), [](const Span& s) { return s.kind == SpanKind::Send; }));
  ASSERT_GT(sends, 0u);
  EXPECT_EQ(outs, sends);
  EXPECT_EQ(ins, sends);
  EXPECT_EQ(by_id.size(), sends);
  for (const auto& [id, events] : by_id) {
    ASSERT_EQ(events.size(), 2u) << "flow " << id;
    const json& send = events[0].value("flow_out", false) ? events[0] : events[1];
    const json& recv = events[0].value("flow_out", false) ? events[1] : events[0];
    EXPECT_EQ(send.at("cat"), "send");
    EXPECT_EQ(recv.at("cat"), "recv");
    EXPECT_TRUE(recv.value("flow_in", false));
    EXPECT_EQ(send.at("args").at("peer"), recv.at("pid"));
    EXPECT_EQ(recv.at("args").at("peer"), send.at("pid"));
    EXPECT_EQ(send.at("args").at("microbatch"), recv.at("args").at("microbatch"));
    EXPECT_EQ(send.at("ts"), recv.at("ts"));  // the test made each receive its send's window
  }
}

TEST(ChromeTraceExport, FlowsPairSendsAndReceivesInStartOrder) {
  Trace t;
  const auto p0 = t.lane(0, Stream::P2P), p1 = t.lane(1, Stream::P2P);
  auto span = [&](std::int32_t lane, SpanKind k, std::int32_t peer, std::int32_t mb, std::int64_t a,
                  std::int64_t b) {
    Span s;
    s.lane = lane;
    s.kind = k;
    s.peer = peer;
    s.microbatch = mb;
    s.start_ns = a;
    s.end_ns = b;
    t.spans.push_back(s);
  };
  span(p1, SpanKind::Recv, 0, 0, 25'000, 40'000);  // listed first, but the second receive
  span(p0, SpanKind::Send, 1, 0, 20'000, 30'000);
  span(p0, SpanKind::Send, 1, 0, 0, 10'000);
  span(p1, SpanKind::Recv, 0, 0, 5'000, 12'000);
  span(p1, SpanKind::Send, 0, 1, 50'000, 60'000);   // no receive for it
  span(p0, SpanKind::Recv, 1, 2, 70'000, 80'000);   // no send for it
  span(p0, SpanKind::Send, -1, 0, 90'000, 95'000);  // peer unknown
  span(p1, SpanKind::Recv, 0, 3, 1'000, 2'000);     // micro-batch 3: no send
  const Parsed p = parse(export_json(t));
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> pairs;  // id -> send ts, recv ts
  for (const json& e : p.spans) {
    if (!e.contains("bind_id")) continue;
    (e.value("flow_out", false) ? pairs[e.at("bind_id")].first : pairs[e.at("bind_id")].second) =
        ns_of(e.at("ts"));
  }
  std::set<std::pair<std::int64_t, std::int64_t>> got;
  for (const auto& [id, pr] : pairs) got.insert(pr);
  EXPECT_EQ(got, (std::set<std::pair<std::int64_t, std::int64_t>>{{0, 5'000}, {20'000, 25'000}}));
  ChromeTraceOptions no_flows;
  no_flows.flows = false;
  for (const json& e : parse(export_json(t, no_flows)).spans) EXPECT_FALSE(e.contains("bind_id"));
}

TEST(ChromeTraceExport, EverySpanKindOnEveryStream) {
  Trace t;
  std::vector<std::int32_t> lanes;
  for (int s = 0; s < profiler::kStreamCount; ++s) {
    const auto stream = static_cast<Stream>(s);
    const std::int32_t index = stream == Stream::Gpu ? 7 : stream == Stream::Host ? 144 : 0;
    lanes.push_back(t.lane(0, stream, index));
  }
  t.lanes[static_cast<std::size_t>(lanes[4])].name = "rank 0 host 144 (python3)";
  t.lanes[static_cast<std::size_t>(t.lane(2, Stream::Compute, 1))].name = "stage two, chunk 1";
  std::int64_t at = 0;
  for (std::int32_t lane : lanes) {
    for (int k = 0; k < profiler::kSpanKindCount; ++k) {
      Span s;
      s.lane = lane;
      s.kind = static_cast<SpanKind>(k);
      s.start_ns = at;
      s.end_ns = at + 1500;  // 1.5 µs
      at += 2000;
      t.spans.push_back(s);
    }
  }
  const Parsed p = parse(export_json(t));
  EXPECT_EQ(p.threads, (std::map<std::pair<std::int64_t, std::int64_t>, std::string>{
                           {{0, 0}, "compute"},
                           {{0, 1}, "comm"},
                           {{0, 2}, "p2p"},
                           {{0, 3}, "gpu 7"},
                           {{0, 4}, "host 144 (python3)"},
                           {{0, 5}, "offload"},
                           {{2, 6}, "compute 1 (stage two, chunk 1)"}}));
  ASSERT_EQ(p.spans.size(), t.spans.size());
  for (std::size_t i = 0; i < t.spans.size(); ++i) {
    const Span& s = t.spans[i];
    const json& e = p.spans[i];
    EXPECT_EQ(e.at("cat"), std::string(profiler::span_kind_name(s.kind)));
    const bool transfer = s.kind == SpanKind::Send || s.kind == SpanKind::Recv;
    const bool gpu = t.lanes[static_cast<std::size_t>(s.lane)].stream == Stream::Gpu;
    EXPECT_EQ(e.at("ph"), transfer && !gpu ? "b" : "X") << e.dump();
    EXPECT_EQ(e.at("ts").get<double>(), static_cast<double>(s.start_ns) / 1000.0);
  }
}

// What survives an export and an import: lanes (rank, stream, index), spans (kind, label,
// micro-batch, chunk, peer, times), memory and counters.
void expect_round_trip(const Trace& original, const ImportedProfile& back) {
  const Trace& t = back.trace;
  auto lane_key = [](const Lane& l) { return std::tuple(l.rank, l.stream, l.index); };
  std::set<std::tuple<std::int32_t, Stream, std::int32_t>> a, b;
  for (const Lane& l : original.lanes) a.insert(lane_key(l));
  for (const Lane& l : t.lanes) b.insert(lane_key(l));
  EXPECT_EQ(a, b);
  using Row = std::tuple<std::int32_t, Stream, std::int32_t, std::int64_t, std::int64_t, int,
                         std::string, std::int32_t, std::int32_t, std::int32_t>;
  auto rows = [&](const Trace& tr) {
    std::vector<Row> v;
    for (const Span& s : tr.spans) {
      const Lane& l = tr.lanes[static_cast<std::size_t>(s.lane)];
      v.emplace_back(l.rank, l.stream, l.index, s.start_ns, s.end_ns, static_cast<int>(s.kind),
                     tr.span_label(s), s.microbatch, s.chunk, s.peer);
    }
    std::sort(v.begin(), v.end());
    return v;
  };
  const auto ra = rows(original), rb = rows(t);
  ASSERT_EQ(ra.size(), rb.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < ra.size(); ++i) differing += ra[i] != rb[i];
  EXPECT_EQ(differing, 0u);
  EXPECT_EQ(t.memory.size(), original.memory.size());
  EXPECT_EQ(t.counters.size(), original.counters.size());
}

TEST(ChromeTraceExport, SimulatedTraceRoundTripsThroughTheImporter) {
  const Trace original = simulated_trace();
  TempFile file(".json");
  write_chrome_trace_file(original, file.path().string());
  const ImportedProfile back = import_chrome_trace(file.path());
  expect_round_trip(original, back);
  // Memory samples come back as the same step functions.
  auto series = [](const Trace& t) {
    std::map<std::pair<std::int32_t, int>, std::vector<std::pair<std::int64_t, std::int64_t>>> m;
    for (const auto& s : t.memory)
      m[{s.rank, static_cast<int>(s.category)}].emplace_back(s.t_ns, s.bytes);
    for (auto& [k, v] : m) std::stable_sort(v.begin(), v.end());
    return m;
  };
  EXPECT_EQ(series(back.trace), series(original));
  for (const auto& r : back.ranks)
    EXPECT_EQ(r.source, "process name 'rank " + std::to_string(r.rank) + "'");
}

// Whether an op's nested communication was its wait (one thread per rank) is the trace's kind
// for a measured run; an export says so in "otherData" and the import keeps it, so the
// analyses' NestedComm::Auto reads the re-import as the run. A simulated trace's streams are
// concurrent: no mark, none read back.
TEST(ChromeTraceExport, NestedCommunicationWaitsAreMarkedAndReadBack) {
  Trace measured = simulated_trace();
  measured.kind = profiler::TraceKind::Measured;
  EXPECT_EQ(export_json(measured)["otherData"]["pipetune.nested_communication"], "wait");
  EXPECT_FALSE(export_json(simulated_trace()).contains("otherData"));
  TempFile file(".json");
  write_chrome_trace_file(measured, file.path().string());
  const ImportedProfile back = import_chrome_trace(file.path());
  EXPECT_TRUE(back.trace.ops_wait_for_nested_comm);
  // Exported again, the import still says so.
  TempFile again(".json");
  write_chrome_trace_file(back.trace, again.path().string());
  EXPECT_TRUE(import_chrome_trace(again.path()).trace.ops_wait_for_nested_comm);
  TempFile simulated(".json");
  write_chrome_trace_file(simulated_trace(), simulated.path().string());
  EXPECT_FALSE(import_chrome_trace(simulated.path()).trace.ops_wait_for_nested_comm);
}

TEST(ChromeTraceExport, ImportedNsysProfileExportsAndRoundTrips) {
  TempFile db(".sqlite");
  {
    NsysExportWriter w(db.path());
    w.string_id(1, "gemm");
    w.string_id(2, "ncclDevKernel_SendRecv");
    w.string_id(3, "cudaLaunchKernel");
    w.string_id(4, "python3");
    w.thread_name(10, 10, 4);
    w.kernel(10, 0, 7, 1, 1000, 2000, 1, 1);
    w.kernel(10, 0, 13, 2, 2100, 2500, 2, 2);
    w.kernel(20, 1, 7, 3, 1000, 1800, 1, 1);
    w.runtime(10, 10, 1, 900, 950, 3);
    w.nvtx(59, 10, 10, 800, 2600, "forward_2");
    w.nvtx(59, 20, 21, 700, 1900, "step");
    w.close();
  }
  const ImportedProfile imported = import_nsys_sqlite(db.path());
  const Parsed p = parse(export_json(imported.trace));
  EXPECT_EQ(p.process_names, (std::map<std::int64_t, std::string>{{0, "rank 0"}, {1, "rank 1"}}));
  std::multiset<std::string> names;
  for (const auto& [key, name] : p.threads) names.insert(name);
  EXPECT_EQ(names, (std::multiset<std::string>{"gpu 7", "gpu 13", "host 10 (python3)", "gpu 7",
                                               "host 21"}));
  EXPECT_EQ(p.spans.size(), imported.trace.spans.size());
  EXPECT_EQ(p.async_ends, 0u) << "the NCCL send is a kernel on its stream: an X event";

  TempFile json_file(".json");
  write_chrome_trace_file(imported.trace, json_file.path().string());
  const ImportedProfile back = import_chrome_trace(json_file.path());
  expect_round_trip(imported.trace, back);
  std::set<std::string> lane_names;
  for (const Lane& l : back.trace.lanes) lane_names.insert(l.name);
  EXPECT_TRUE(lane_names.count("rank 0 host 10 (python3)")) << "lane names survive";
}

TEST(ChromeTraceExport, RealNsysProfileExports) {
  const auto file = real_trace("nsys-2gpu-torchrun/mfu_2gpu_before.sqlite");
  PIPETUNE_REQUIRE_FILE(file);
  const ImportedProfile imported = import_nsys_sqlite(file);
  TempFile json_file(".json");
  write_chrome_trace_file(imported.trace, json_file.path().string());
  const ImportedProfile back = import_chrome_trace(json_file.path());
  expect_round_trip(imported.trace, back);
}

}  // namespace
}  // namespace pipetune::db
