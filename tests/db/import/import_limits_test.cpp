// The import limits (db/import/import_limits.hpp), each on a small file with a small limit: what
// exceeds it is an InputError naming the file and the limit, found while reading. And the steps
// export-trace writes come back as the Trace's steps.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cmath>
#include <fstream>
#include <sstream>
#include <string>

#include "db/chrome_trace.hpp"
#include "db/import/chrome_trace_import.hpp"
#include "db/import/import_limits.hpp"
#include "db/import/nsys_sqlite.hpp"
#include "db/import/trace_builder.hpp"
#include "engine/errors.hpp"
#include "tests/db/import/import_test_helpers.hpp"
#include "tests/db/import/nsys_export_writer.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::db::testing;

std::string span_event(long long pid, long long ts) {
  return "{\"ph\":\"X\",\"name\":\"op\",\"cat\":\"F\",\"pid\":" + std::to_string(pid) +
         ",\"tid\":1,\"ts\":" + std::to_string(ts) + ",\"dur\":5}";
}

// A JSON array of `events` one-span events, pid i % pids.
std::string events_text(long long events, long long pids = 1) {
  std::string text = "[";
  for (long long i = 0; i < events; ++i) text += (i > 0 ? "," : "") + span_event(i % pids, i);
  return text + "]";
}

void write_plain(const TempFile& file, const std::string& text) {
  std::ofstream(file.path(), std::ios::binary) << text;
}

void write_gzip(const TempFile& file, const std::string& text) {
  gzFile gz = gzopen(file.path().c_str(), "wb9");
  ASSERT_NE(gz, nullptr);
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())),
            static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(gz), Z_OK);
}

void expect_refused(const TempFile& file, const ImportLimits& limits, const std::string& needle) {
  try {
    import_chrome_trace(file.path(), limits);
    ADD_FAILURE() << "no error for " << file.path() << " (expected '" << needle << "')";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file.path().string()), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << "'" << needle << "' not in: " << what;
    EXPECT_NE(what.find("limit"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(ImportLimits, TextBeyondTheLimitIsRefused) {
  const std::string text = events_text(100);
  ImportLimits limits;
  limits.max_text_bytes = 1024;
  TempFile plain(".json"), gz(".json.gz");
  write_plain(plain, text);
  write_gzip(gz, text);
  expect_refused(plain, limits,
                 std::to_string(text.size()) + " bytes, more than 1 KiB of JSON text");
  expect_refused(gz, limits, "more than 1 KiB of JSON text inflated");
  limits.max_text_bytes = text.size();
  EXPECT_EQ(import_chrome_trace(plain.path(), limits).trace.spans.size(), 100u);
  EXPECT_EQ(import_chrome_trace(gz.path(), limits).trace.spans.size(), 100u);
}

// Repeated events inflate far beyond 100:1; past the first 256 KiB they are refused, before the
// whole text is read.
TEST(ImportLimits, InflateRatioIsCheckedWhileInflating) {
  std::string text = "[" + span_event(1, 0);  // one event 100,000 times: 6 MB
  for (int i = 1; i < 100'000; ++i) text += "," + span_event(1, 0);
  text += "]";
  TempFile gz(".json.gz");
  write_gzip(gz, text);
  ASSERT_GT(text.size() / std::filesystem::file_size(gz.path()), 100u);
  ImportLimits limits;
  limits.ratio_check_after_bytes = 256 << 10;
  expect_refused(gz, limits, "gzip data inflating more than 100:1");
  expect_refused(gz, limits, "(import limit: 100:1 past 256 KiB)");
  limits.max_inflate_ratio = 100'000;
  EXPECT_EQ(import_chrome_trace(gz.path(), limits).trace.spans.size(), 100'000u);
}

// The real traces compress 14-17:1: far inside the default ratio, whatever the threshold.
TEST(ImportLimits, RealGzipTracesAreWithinTheRatio) {
  const auto file = real_trace("hta-2rank-nccl/sampled_rank-0.json.gz");
  PIPETUNE_REQUIRE_FILE(file);
  ImportLimits limits;
  limits.ratio_check_after_bytes = 0;
  EXPECT_FALSE(import_chrome_trace(file, limits).trace.spans.empty());
}

TEST(ImportLimits, LongTokensAndWhitespaceAreRefused) {
  ImportLimits limits;
  limits.max_token_bytes = 1024;
  TempFile name(".json"), blank(".json");
  write_plain(name, "[{\"ph\":\"X\",\"name\":\"" + std::string(200'000, 'a') +
                        "\",\"pid\":1,\"tid\":1,\"ts\":0,\"dur\":1}]");
  write_plain(blank, "[" + std::string(200'000, ' ') + span_event(1, 0) + "]");
  expect_refused(name, limits, "a JSON value or run of whitespace longer than 1 KiB (at byte");
  expect_refused(blank, limits, "a JSON value or run of whitespace longer than 1 KiB (at byte 1)");
}

TEST(ImportLimits, NestedValuesAreBounded) {
  ImportLimits limits;
  limits.max_nested_values = 100;
  std::string numbers;
  for (int i = 0; i < 1000; ++i) numbers += (i > 0 ? "," : "") + std::to_string(i);
  TempFile args(".json"), top(".json");
  write_plain(args, "[" + span_event(1, 0) +
                        ",{\"ph\":\"X\",\"name\":\"op\",\"pid\":1,\"tid\":1,\"ts\":9,\"dur\":1,"
                        "\"args\":{\"dims\":[" +
                        numbers + "]}}]");
  write_plain(
      top, "{\"deviceProperties\":[" + numbers + "],\"traceEvents\":[" + span_event(1, 0) + "]}");
  expect_refused(args, limits,
                 "more than 100 values in event 1's \"args\": beyond the import limit");
  expect_refused(top, limits, "more than 100 values in the kept top-level members");
  limits.max_nested_values = 1001;
  EXPECT_EQ(import_chrome_trace(args.path(), limits).trace.spans.size(), 2u);
}

TEST(ImportLimits, RecordsHeldAreBounded) {
  ImportLimits limits;
  limits.max_records = 50;
  TempFile spans(".json"), begins(".json");
  write_plain(spans, events_text(60));
  std::string open = "[";
  for (int i = 0; i < 60; ++i)
    open += std::string(i > 0 ? "," : "") +
            "{\"ph\":\"B\",\"name\":\"x\",\"pid\":1,\"tid\":1,\"ts\":" + std::to_string(i) + "}";
  write_plain(begins, open + "]");
  expect_refused(spans, limits, "more than 50 spans, samples, step markers");
  expect_refused(begins, limits, "more than 50 spans, samples, step markers");
  limits.max_records = 62;  // 60 spans, a process and a thread
  EXPECT_EQ(import_chrome_trace(spans.path(), limits).trace.spans.size(), 60u);
}

TEST(ImportLimits, RanksAreBoundedInEveryImporter) {
  ImportLimits limits;
  limits.max_ranks = 4;
  TempFile five(".json"), four(".json");
  write_plain(five, events_text(5, 5));
  write_plain(four, events_text(8, 4));
  expect_refused(five, limits, "more than 4 ranks: beyond the import limit");
  EXPECT_EQ(import_chrome_trace(four.path(), limits).ranks.size(), 4u);

  // The builder every importer (nsys, merges) makes its lanes with.
  import_detail::ImportedTraceBuilder builder;
  builder.set_source("profile.sqlite");
  builder.set_limits(limits);
  for (std::int32_t rank = 0; rank < 4; ++rank)
    for (std::int32_t index = 0; index < 3; ++index)
      builder.lane(rank, profiler::Stream::Gpu, index);
  EXPECT_EQ(builder.lane(2, profiler::Stream::Gpu, 1), builder.lane(2, profiler::Stream::Gpu, 1));
  try {
    builder.lane(9, profiler::Stream::Host, 0);
    ADD_FAILURE() << "a fifth rank was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), "profile.sqlite: more than 4 ranks: beyond the import limit");
  }
}

// Nsight Systems: one kernel in each of 65537 processes is one rank more than an import holds.
TEST(ImportLimits, NsysProfileOfTooManyRanksIsRefused) {
  TempFile db(".sqlite");
  {
    NsysExportWriter w(db.path());
    w.string_id(1, "gemm");
    for (std::int64_t pid = 1; pid <= 65537; ++pid)
      w.kernel(pid, 0, 7, pid, 1000 * pid, 1000 * pid + 500, 1, 1);
    w.close();
  }
  try {
    import_nsys_sqlite(db.path());
    ADD_FAILURE() << "65537 ranks were imported";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              db.path().string() + ": more than 65536 ranks: beyond the import limit");
  }
}

// Lanes come out named and ordered as Trace::lane makes them, found by hash.
TEST(ImportLimits, BuilderLanesMatchTraceLanes) {
  import_detail::ImportedTraceBuilder builder;
  profiler::Trace expected;
  for (std::int32_t rank : {3, 0, -2, 1 << 29})
    for (profiler::Stream stream : {profiler::Stream::Gpu, profiler::Stream::Host})
      for (std::int32_t index : {0, 7, -1}) {
        EXPECT_EQ(builder.lane(rank, stream, index), expected.lane(rank, stream, index));
      }
  ASSERT_EQ(builder.trace().lanes.size(), expected.lanes.size());
  for (std::size_t i = 0; i < expected.lanes.size(); ++i)
    EXPECT_EQ(builder.trace().lanes[i].name, expected.lanes[i].name);
}

TEST(ImportLimits, ExportedStepsComeBackAsSteps) {
  profiler::Trace t;
  t.kind = profiler::TraceKind::Measured;
  const std::int32_t lane = t.lane(0, profiler::Stream::Compute);
  for (int step = 0; step < 3; ++step) {
    const std::int64_t start = 1'000'000'000'123 + step * 400'000'001;
    t.spans.push_back(profiler::Span{lane, profiler::SpanKind::F, -1, 0, -1, start, start + 1000});
    t.steps.push_back(profiler::StepMetric{step, start + 300'000'007, 2.5 - step,
                                           step == 1 ? std::nan("") : 1e6 + step});
  }
  TempFile file(".json");
  write_chrome_trace_file(t, file.path().string());
  const ImportedProfile back = import_chrome_trace(file.path());
  ASSERT_EQ(back.trace.steps.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    const profiler::StepMetric& a = t.steps[i];
    const profiler::StepMetric& b = back.trace.steps[i];
    EXPECT_EQ(b.step, a.step);
    EXPECT_EQ(b.t_ns, a.t_ns) << "the export writes ns as µs with three decimals: exact";
    EXPECT_EQ(b.loss, a.loss);
    if (std::isnan(a.tokens_per_s))
      EXPECT_TRUE(std::isnan(b.tokens_per_s));
    else
      EXPECT_EQ(b.tokens_per_s, a.tokens_per_s);
  }
  EXPECT_TRUE(back.warnings.empty()) << join(back.warnings);

  TempFile bad(".json");
  write_plain(bad, "[" + span_event(1, 0) +
                       ",{\"ph\":\"i\",\"s\":\"g\",\"cat\":\"pipetune.step\",\"name\":\"step\","
                       "\"ts\":9}]");
  try {
    import_chrome_trace(bad.path());
    ADD_FAILURE() << "a step marker without its number was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("a step marker needs \"step\" in its args"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::db
