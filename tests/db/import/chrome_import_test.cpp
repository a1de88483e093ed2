// The Chrome-trace importer on small files written here: both container forms, string and
// integer pid/tid, exact µs -> ns, B/E pairs, async pairs, counters, rank rules, and bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>

#include "db/import/chrome_event_reader.hpp"
#include "db/import/chrome_trace_import.hpp"
#include "engine/errors.hpp"
#include "tests/db/import/import_test_helpers.hpp"
#include "tests/db/import/nsys_export_writer.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::db::testing;
using profiler::Span;

// (lane name, kind, micro-batch, name, start, end).
using SpanRow = std::tuple<std::string, std::string, int, std::string, std::int64_t, std::int64_t>;

std::vector<SpanRow> rows_of(const profiler::Trace& t) {
  std::vector<SpanRow> rows;
  for (const Span& s : t.spans)
    rows.emplace_back(t.lanes.at(static_cast<std::size_t>(s.lane)).name,
                      std::string(profiler::span_kind_name(s.kind)), s.microbatch,
                      t.names.at(s.name), s.start_ns, s.end_ns);
  return rows;
}

std::string print(const std::vector<SpanRow>& rows) {
  std::string out;
  for (const auto& [lane, kind, mb, name, start, end] : rows)
    out += "  {\"" + lane + "\", \"" + kind + "\", " + std::to_string(mb) + ", \"" + name + "\", " +
           std::to_string(start) + ", " + std::to_string(end) + "}\n";
  return out;
}

void write(const std::filesystem::path& file, const std::string& text) {
  std::ofstream(file, std::ios::binary) << text;
}

TEST(ChromeImport, ArrayFormWithStringIdsAndExactMicroseconds) {
  TempFile file(".json");
  write(file.path(), R"([
    {"name": "F_0,0", "ph": "X", "pid": "0", "tid": "0", "ts": 1649317709410899.2, "dur": 1.0005},
    {"name": "B_1,0", "ph": "X", "pid": "0", "tid": "1", "ts": 10, "dur": 2},
    {"name": "S_1,0", "ph": "X", "pid": "0", "tid": "1", "ts": 13.5, "dur": 0.25, "id": "S_1,0"}
  ])");
  const ImportedProfile p = import_chrome_trace(file.path());
  const std::vector<SpanRow> expected = {
      // 1.0005 µs = 1000.5 ns, rounded half away from zero.
      {"rank 0 compute", "F", 0, "F_0,0", 1'649'317'709'410'899'200, 1'649'317'709'410'900'201},
      {"rank 1 compute", "BW", 0, "B_1,0", 10'000, 12'000},
      {"rank 1 compute", "barrier", 0, "S_1,0", 13'500, 13'750}};
  EXPECT_EQ(rows_of(p.trace), expected) << print(rows_of(p.trace));
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[1].source, "pipeline stage in range names");
  EXPECT_TRUE(p.warnings.empty()) << join(p.warnings);
}

TEST(ChromeImport, ObjectFormPairsMetadataCountersAndProcessOrder) {
  TempFile file(".json");
  write(file.path(), R"({"displayTimeUnit": "ns", "traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "trainer"}},
    {"ph": "M", "name": "thread_name", "pid": 9, "tid": "reader", "args": {"name": "io thread"}},
    {"ph": "B", "name": "step", "pid": 7, "tid": 70, "ts": 0, "args": {"n": [1, {"deep": true}]}},
    {"ph": "B", "name": "forward 2", "pid": 7, "tid": 70, "ts": 1},
    {"ph": "E", "pid": 7, "tid": 70, "ts": 4},
    {"ph": "E", "pid": 7, "tid": 70, "ts": 9},
    {"ph": "E", "pid": 7, "tid": 70, "ts": 10},
    {"ph": "B", "name": "never ends", "pid": 7, "tid": 71, "ts": 3},
    {"ph": "X", "name": "io", "pid": 9, "tid": "reader", "ts": 2, "dur": 1, "stack": [1, 2]},
    {"ph": "i", "name": "mark", "pid": 7, "tid": 70, "ts": 5, "s": "t"},
    {"ph": "C", "name": "queue", "pid": 7, "ts": 6, "args": {"depth": 3}},
    {"ph": "b", "cat": "io", "id": "0x1", "name": "read", "pid": 9, "tid": "reader", "ts": 3},
    {"ph": "e", "cat": "io", "id": "0x1", "name": "read", "pid": 9, "tid": "reader", "ts": 8},
    {"ph": "X", "name": "backwards", "pid": 9, "tid": "reader", "ts": 20, "dur": -1}
  ], "otherData": {"version": "x"}})");
  const ImportedProfile p = import_chrome_trace(file.path());
  const std::vector<SpanRow> expected = {
      {"rank 0 compute", "range", -1, "step", 0, 9'000},
      {"rank 0 compute", "F", 2, "forward 2", 1'000, 4'000},
      {"rank 1 host -1 (io thread)", "range", -1, "io", 2'000, 3'000},
      {"rank 1 host -1 (io thread)", "range", -1, "read", 3'000, 8'000}};
  EXPECT_EQ(rows_of(p.trace), expected) << print(rows_of(p.trace));
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].pid, 7);
  EXPECT_EQ(p.ranks[0].process_name, "trainer");
  EXPECT_EQ(p.ranks[0].source, "process order");
  ASSERT_EQ(p.trace.counters.size(), 1u);
  EXPECT_EQ(p.trace.names[p.trace.counters[0].name], "queue depth");
  EXPECT_EQ(p.trace.counters[0].t_ns, 6'000);
  EXPECT_EQ(p.trace.counters[0].value, 3.0);
  const std::string w = join(p.warnings);
  for (const char* needle : {"1 begin events (B/b) never ended", "1 end events (E/e) without",
                             "1 events ending before they start", "1 instant, flow or other"})
    EXPECT_NE(w.find(needle), std::string::npos) << "'" << needle << "' not in\n" << w;
}

TEST(ChromeImport, ProcessNamesAndTorchPipeliningStages) {
  TempFile file(".json");
  write(file.path(), R"({"traceEvents": [
    {"ph": "M", "name": "process_name", "pid": 100, "args": {"name": "rank 3"}},
    {"ph": "X", "name": "opt", "pid": 100, "tid": 1, "ts": 0, "dur": 1},
    {"ph": "X", "name": "PP:1F0", "pid": 300, "tid": 5, "ts": 0, "dur": 2},
    {"ph": "X", "name": "PP:1W0", "pid": 300, "tid": 5, "ts": 2, "dur": 2},
    {"ph": "X", "name": "load", "pid": 200, "tid": 2, "ts": 0, "dur": 1}
  ]})");
  const ImportedProfile p = import_chrome_trace(file.path());
  const std::vector<SpanRow> expected = {{"rank 1 compute", "F", 0, "PP:1F0", 0, 2'000},
                                         {"rank 1 compute", "W", 0, "PP:1W0", 2'000, 4'000},
                                         {"rank 3 host 1", "range", -1, "opt", 0, 1'000},
                                         {"rank 4 host 2", "range", -1, "load", 0, 1'000}};
  EXPECT_EQ(rows_of(p.trace), expected) << print(rows_of(p.trace));
  ASSERT_EQ(p.ranks.size(), 3u);
  EXPECT_EQ(p.ranks[1].source, "process name 'rank 3'");
  EXPECT_EQ(p.ranks[2].source, "process order");
}

TEST(ChromeImport, KinetoEventsAndNcclKernels) {
  TempFile file(".json");
  write(file.path(), R"json({"schemaVersion": 1, "distributedInfo": {"rank": 5, "world_size": 8},
    "traceEvents": [
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 40, "tid": 41,
     "ts": 100, "dur": 3, "args": {"correlation": 9}},
    {"ph": "X", "cat": "cpu_op", "name": "forward", "pid": 40, "tid": 41, "ts": 90, "dur": 20},
    {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL", "pid": 1, "tid": 7,
     "ts": 105, "dur": 10.5, "args": {"device": 1, "stream": 7, "correlation": 9,
     "grid": [2, 1, 1], "block": [64, 1, 1]}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 1,
     "tid": 8, "ts": 120, "dur": 1, "args": {"device": 1, "stream": 8, "bytes": 4096}},
    {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "pid": 1, "tid": 7, "ts": 130,
     "dur": 1, "args": {"stream": 7, "bytes": 64}}
  ]})json");
  const ImportedProfile p = import_chrome_trace(file.path());
  const std::vector<SpanRow> expected = {
      {"rank 5 gpu 7", "all-gather", -1, "ncclDevKernel_AllGather_RING_LL", 105'000, 115'500},
      {"rank 5 gpu 7", "memset", -1, "Memset (Device)", 130'000, 131'000},
      {"rank 5 gpu 8", "memcpy", -1, "Memcpy HtoD (Pageable -> Device)", 120'000, 121'000},
      {"rank 5 host 41", "range", -1, "forward", 90'000, 110'000},  // an operator, not a phase
      {"rank 5 host 41", "runtime", -1, "cudaLaunchKernel", 100'000, 103'000}};
  EXPECT_EQ(rows_of(p.trace), expected) << print(rows_of(p.trace));
  EXPECT_EQ(p.schema_version, "1");
  ASSERT_EQ(p.kernels.size(), 3u);
  EXPECT_EQ(p.kernels[0].rank, 5);
  EXPECT_EQ(p.kernels[0].device, 1);
  EXPECT_EQ(p.kernels[0].correlation, 9);
  EXPECT_EQ(p.kernels[0].grid, (std::array<std::int32_t, 3>{2, 1, 1}));
  EXPECT_EQ(p.kernels[1].bytes, 64);
  EXPECT_EQ(p.kernels[1].device, 1) << "a GPU event's pid is its device";
  EXPECT_EQ(p.kernels[2].bytes, 4096);
  // The kernel's launch call (correlation 9, at 100 us on thread 41) ran inside "forward".
  EXPECT_EQ(p.kernels[0].op, "forward");
  EXPECT_EQ(p.attribution.attributed, 1u);
  EXPECT_EQ(p.attribution.without_launch, 2u);
  ASSERT_EQ(p.ranks.size(), 1u);
  EXPECT_EQ(p.ranks[0].pid, 40);
  EXPECT_EQ(p.ranks[0].devices, std::vector<std::int32_t>{1});
}

// PyTorch's profile_memory instants: the CUDA allocator's "Total Allocated" after each event is
// the rank's (unattributed) device memory; CPU-side ones are not device memory.
TEST(ChromeImport, KinetoMemoryEventsAreTheRanksDeviceMemory) {
  TempFile file(".json");
  write(file.path(), R"json({"traceEvents": [
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 40, "tid": 41, "ts": 90, "dur": 40},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 40, "tid": 41, "ts": 100,
     "args": {"Device Type": 1, "Device Id": 0, "Bytes": 1000, "Total Allocated": 1000}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 40, "tid": 41, "ts": 110,
     "args": {"Device Type": 0, "Device Id": -1, "Bytes": 64, "Total Allocated": 64}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 40, "tid": 41, "ts": 115,
     "args": {"Device Type": 1, "Device Id": 0, "Bytes": 2000, "Total Allocated": 3000}},
    {"ph": "i", "s": "t", "name": "[memory]", "pid": 40, "tid": 41, "ts": 120,
     "args": {"Device Type": 1, "Device Id": 0, "Bytes": -2500, "Total Allocated": 500}}
  ]})json");
  const ImportedProfile p = import_chrome_trace(file.path());
  using profiler::MemoryCategory;
  ASSERT_EQ(p.trace.memory.size(), 3u);
  const std::int64_t t[] = {100'000, 115'000, 120'000}, bytes[] = {1000, 3000, 500};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(p.trace.memory[i].category, MemoryCategory::Unattributed);
    EXPECT_EQ(p.trace.memory[i].t_ns, t[i]);
    EXPECT_EQ(p.trace.memory[i].bytes, bytes[i]);
  }
  // Only the CPU-side one is left over, and said.
  EXPECT_NE(join(p.warnings).find("1 instant, flow or other non-span events ignored"),
            std::string::npos)
      << join(p.warnings);
}

TEST(ChromeImport, MicrosecondText) {
  using import_detail::microseconds_text_to_ns;
  EXPECT_EQ(microseconds_text_to_ns("10"), 10'000);
  EXPECT_EQ(microseconds_text_to_ns("10.0"), 10'000);
  EXPECT_EQ(microseconds_text_to_ns("1649317709410899.2"), 1'649'317'709'410'899'200);
  EXPECT_EQ(microseconds_text_to_ns("110.626220703125"), 110'626);
  EXPECT_EQ(microseconds_text_to_ns("0.0005"), 1);
  EXPECT_EQ(microseconds_text_to_ns("0.0004999"), 0);
  EXPECT_EQ(microseconds_text_to_ns("-1.5"), -1'500);
  EXPECT_EQ(microseconds_text_to_ns("-0.0005"), -1);
  EXPECT_EQ(microseconds_text_to_ns("1.5e3"), 1'500'000);
  EXPECT_EQ(microseconds_text_to_ns("2E-3"), 2);
  EXPECT_EQ(microseconds_text_to_ns("1e-4"), 0);
  EXPECT_EQ(microseconds_text_to_ns("1e+2"), 100'000);
  EXPECT_FALSE(microseconds_text_to_ns("").has_value());
  EXPECT_FALSE(microseconds_text_to_ns("abc").has_value());
  EXPECT_FALSE(microseconds_text_to_ns("1e").has_value());
  EXPECT_FALSE(microseconds_text_to_ns("1.2.3").has_value());
  EXPECT_FALSE(microseconds_text_to_ns("1e30").has_value());
  EXPECT_FALSE(microseconds_text_to_ns("99999999999999999999").has_value());
}

// Bad input: an InputError whose one-line message names the file and what is wrong.
void expect_input_error(const std::filesystem::path& file, const std::string& needle) {
  try {
    import_chrome_trace(file);
    ADD_FAILURE() << "no error for " << file << " (expected '" << needle << "')";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file.string()), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << "'" << needle << "' not in: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

void expect_bad_json(const std::string& text, const std::string& needle) {
  TempFile file(".json");
  write(file.path(), text);
  SCOPED_TRACE(text);
  expect_input_error(file.path(), needle);
}

TEST(ChromeImport, WrongTypesAreInputErrors) {
  expect_bad_json("42", "the top level is a number");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 2,
     "args": {"Device Type": 1, "Total Allocated": -5}}])",
                  "memory bytes -5.000000 of 'unattributed' is not a byte count");
  // A sample whose time, after the trace's base, is beyond what the analyses handle.
  expect_bad_json(R"({"baseTimeNanoseconds": 4611686018000000000, "traceEvents": [
    {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1000000000,
     "args": {"Device Type": 1, "Total Allocated": 5}}]})",
                  "a memory sample at 4611687018000000000 ns is beyond the times");
  expect_bad_json(R"({"foo": 1})", R"(no "traceEvents" array)");
  expect_bad_json(R"({"traceEvents": {}})", R"("traceEvents" is an object, not an array)");
  expect_bad_json(R"({"traceEvents": "none"})", R"("traceEvents" is a string, not an array)");
  expect_bad_json("[1]", "event 0 is a number, not an object");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}, [2]])",
                  "event 1 is an array, not an object");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "12", "dur": 1}])",
                  R"(event 0 ("a"): "ts" is a string, not a number of microseconds)");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": {"x": 1}, "tid": 1, "ts": 1, "dur": 1}])",
                  R"("pid" is an object, not a single value)");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": 1.5, "tid": 1, "ts": 1, "dur": 1}])",
                  R"("pid" is a number, not an integer or a string)");
  expect_bad_json(R"([{"ph": "X", "name": 5, "pid": 1, "tid": 1, "ts": 1, "dur": 1}])",
                  R"("name" is a number, not a string)");
  expect_bad_json(R"([{"ph": 88, "name": "a"}])", R"("ph" is a number, not a string)");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
                      "args": [1]}])",
                  R"("args" is an array, not an object)");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
                      "args": "x"}])",
                  R"("args" is a string, not an object)");
  expect_bad_json(R"([{"name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}])", R"(no "ph")");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1}])",
                  R"(needs "ts" and "dur")");
  expect_bad_json(R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1e300, "dur": 1}])",
                  R"("ts" is out of range)");
}

TEST(ChromeImport, TruncatedEmptyAndForeignFiles) {
  expect_bad_json(
      R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 1}, {"ph": "X", "na)",
      "not valid JSON");
  expect_bad_json("", "not valid JSON");
  expect_input_error("/nonexistent/trace.json", "no such file");
  TempFile sqlite(".json");
  {
    NsysExportWriter w(sqlite.path());
    w.string_id(1, "k");
    w.close();
  }
  expect_input_error(sqlite.path(), "not valid JSON");
}

// The JSON Array Format's closing ']' is optional (Trace Event Format): a file cut between two
// events imports those before the cut, with a warning; an array with no span is refused.
TEST(ChromeImport, AnUnterminatedArrayImportsTheEventsBeforeTheCut) {
  TempFile f(".json");
  write(f.path(), R"([{"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
                     {"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 5, "dur": 2},)");
  const ImportedProfile p = import_chrome_trace(f.path());
  ASSERT_EQ(p.trace.spans.size(), 2u);
  EXPECT_EQ(p.trace.spans[1].end_ns, 7000);
  ASSERT_FALSE(p.warnings.empty());
  EXPECT_NE(p.warnings.back().find("ends without its ']'"), std::string::npos) << p.warnings.back();
  expect_bad_json("[]", "no spans to import (0 events");
  expect_bad_json(R"({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1,
                     "args": {"name": "x"}}]})",
                  "no spans to import (1 events");
}

TEST(ChromeImport, DamagedGzip) {
  ASSERT_TRUE(chrome_trace_gzip_supported()) << "db/CMakeLists.txt requires zlib";
  TempFile plain(".json"), gz(".json.gz");
  std::string text = "[";
  for (int i = 0; i < 2000; ++i)
    text += std::string(i ? "," : "") + R"({"ph": "X", "name": "op )" + std::to_string(i) +
            R"(", "pid": 1, "tid": 1, "ts": )" + std::to_string(i * 10) + R"(, "dur": 5})";
  write(plain.path(), text + "]");
  const std::string cmd = "gzip -c '" + plain.path().string() + "' > '" + gz.path().string() + "'";
  if (std::system(cmd.c_str()) != 0) PIPETUNE_SKIP_OR_FAIL("no gzip to compress with");
  EXPECT_EQ(import_chrome_trace(gz.path()).trace.spans.size(), 2000u);
  std::filesystem::resize_file(gz.path(), std::filesystem::file_size(gz.path()) / 2);
  expect_input_error(gz.path(), "gzip data is damaged");
}

}  // namespace
}  // namespace pipetune::db
