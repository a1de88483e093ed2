// The nsys importer on small exports written here from the documented schema: every span is
// known by construction, so the imported Trace is compared span for span.
#include <gtest/gtest.h>

#include <fstream>
#include <tuple>

#include "db/import/nsys_sqlite.hpp"
#include "engine/errors.hpp"
#include "tests/db/import/import_test_helpers.hpp"
#include "tests/db/import/nsys_export_writer.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::db::testing;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;

// (lane name, kind, micro-batch, span name, start, end): what a span is, printable.
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

constexpr const char* kWarmup =
    "megatron.core.pipeline_parallel.schedules.forward_backward_pipelining_with_interleaving."
    "warmup";
constexpr const char* kForwardStep = "megatron.core.pipeline_parallel.schedules.forward_step";

// Two training processes (A: PID 100 on device 1, B: PID 200 on device 0) and a launcher with
// NVTX only (PID 300). Names both in text and through StringIds; NCCL ranges in domain 1, whose
// domain-create row is missing; a registered range in domain 2 ("MyLib"); no memset table.
void write_two_rank_export(const std::filesystem::path& file) {
  NsysExportWriter w(file);
  w.metadata("META_DATA_EXPORT", "3.28.1");
  const std::vector<std::pair<int, std::string>> strings = {
      {1, "gemm"},
      {2, "void gemm<float>(float*, int)"},
      {3, "ncclDevKernel_AllReduce_Sum_f32_RING_LL"},
      {4, "ncclDevKernel_SendRecv"},
      {5, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)"},
      {6, "cudaLaunchKernel_v7000"},
      {7, "cuLaunchKernelEx"},
      {8, "cudaMemcpyAsync_v3020"},
      {9, "ncclRecv"},
      {10, "ncclGroupStart"},
      {11, "ncclGroupEnd"},
      {12, "ncclSend"},
      {13, "registered range"},
      {14, "worker"},
      {15, "ncclDevKernel_Reduce_Sum_f32_RING_LL"}};
  for (const auto& [id, s] : strings) w.string_id(id, s);
  w.process(100, "trainer-a");
  w.process(200, "trainer-b");
  w.process(300, "launcher");
  w.thread_name(100, 101, 14);

  // B (device 0).
  w.kernel(200, 0, 7, 1, 1000, 2000, 1, 2);
  w.kernel(200, 0, 13, 2, 2500, 3000, 3, 3);
  w.kernel(200, 0, 13, 3, 3100, 3300, 4, 5);
  w.kernel(200, 0, 13, 4, 3500, 3600, 15, 15);
  w.memcpy(200, 0, 7, 20, 400, 450, 4096, 1);
  w.runtime(200, 200, 1, 900, 950, 6);
  w.runtime(200, 200, 2, 2400, 2450, 6);
  w.runtime(200, 200, 3, 3000, 3010, 7);
  // A (device 1).
  w.kernel(100, 1, 7, 11, 1100, 2100, 1, 2);
  w.kernel(100, 1, 13, 12, 3150, 3350, 4, 5);
  w.kernel(100, 1, 13, 14, 3400, 3450, 4, 5);  // its launch is not in the capture
  w.memcpy(100, 1, 7, 21, 450, 480, 64, 10);
  w.runtime(100, 100, 12, 3050, 3060, 7);
  w.runtime(100, 101, 21, 440, 445, 8);
  // The launcher: no GPU work, so not a rank.
  w.runtime(300, 300, 99, 10, 20, 6);
  w.nvtx(59, 300, 300, 5, 15, "orphan");

  w.nvtx(75, 100, 100, 0, std::nullopt, "MyLib", std::nullopt, 2);
  // B: a push/pop nest with Megatron-style phase names, then a group with only ncclRecv.
  w.nvtx(59, 200, 200, 100, 2300, kWarmup);
  w.nvtx(59, 200, 200, 800, 2100, "forward-compute mb=0");
  w.nvtx(59, 200, 200, 2200, 2290, "backward-compute mb=0");
  w.nvtx(59, 200, 200, 2950, 2960, std::nullopt, 10, 1);
  w.nvtx(59, 200, 200, 2965, 2970, std::nullopt, 9, 1);
  w.nvtx(59, 200, 200, 2980, 3020, std::nullopt, 11, 1);
  // A: a start/end range, a phase named by a module path, a registered range, a mark, an
  // unterminated range, and a group with ncclSend and ncclRecv.
  w.nvtx(60, 100, 100, 50, 400, "data loading");
  w.nvtx(59, 100, 100, 500, 900, kForwardStep);
  w.nvtx(59, 100, 100, 600, 700, std::nullopt, 13, 2);
  w.nvtx(34, 100, 100, 710, std::nullopt, "a mark");
  w.nvtx(59, 100, 100, 800, std::nullopt, "never popped");
  w.nvtx(59, 100, 100, 3030, 3035, std::nullopt, 10, 1);
  w.nvtx(59, 100, 100, 3036, 3038, std::nullopt, 12, 1);
  w.nvtx(59, 100, 100, 3039, 3041, std::nullopt, 9, 1);
  w.nvtx(59, 100, 100, 3045, 3070, std::nullopt, 11, 1);
  w.close();
}

TEST(NsysSyntheticExport, TwoRanksSpanForSpan) {
  TempFile file(".sqlite");
  write_two_rank_export(file.path());
  const ImportedProfile p = import_nsys_sqlite(file.path());

  const std::vector<SpanRow> expected = {
      {"rank 0 gpu 7", "memcpy", -1, "memcpy HtoD", 400, 450},
      {"rank 0 gpu 7", "kernel", 0, "gemm", 1000, 2000},  // micro-batch of its phase
      {"rank 0 gpu 13", "all-reduce", -1, "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 2500, 3000},
      {"rank 0 gpu 13", "recv", -1, "ncclDevKernel_SendRecv", 3100, 3300},
      {"rank 0 gpu 13", "kernel", -1, "ncclDevKernel_Reduce_Sum_f32_RING_LL", 3500, 3600},
      {"rank 0 host 200", "range", -1, kWarmup, 100, 2300},
      {"rank 0 host 200", "F", 0, "forward-compute mb=0", 800, 2100},
      {"rank 0 host 200", "runtime", -1, "cudaLaunchKernel_v7000", 900, 950},
      {"rank 0 host 200", "BW", 0, "backward-compute mb=0", 2200, 2290},
      {"rank 0 host 200", "runtime", -1, "cudaLaunchKernel_v7000", 2400, 2450},
      {"rank 0 host 200", "range", -1, "ncclGroupStart", 2950, 2960},
      {"rank 0 host 200", "range", -1, "ncclRecv", 2965, 2970},
      {"rank 0 host 200", "range", -1, "ncclGroupEnd", 2980, 3020},
      {"rank 0 host 200", "runtime", -1, "cuLaunchKernelEx", 3000, 3010},
      {"rank 1 gpu 7", "memcpy", -1, "memcpy PtoP", 450, 480},
      {"rank 1 gpu 7", "kernel", -1, "gemm", 1100, 2100},
      {"rank 1 gpu 13", "send", -1, "ncclDevKernel_SendRecv", 3150, 3350},
      {"rank 1 gpu 13", "send", -1, "ncclDevKernel_SendRecv", 3400, 3450},
      {"rank 1 host 100", "range", -1, "data loading", 50, 400},
      {"rank 1 host 100", "F", -1, kForwardStep, 500, 900},
      {"rank 1 host 100", "range", -1, "registered range", 600, 700},
      {"rank 1 host 100", "range", -1, "ncclGroupStart", 3030, 3035},
      {"rank 1 host 100", "range", -1, "ncclSend", 3036, 3038},
      {"rank 1 host 100", "range", -1, "ncclRecv", 3039, 3041},
      {"rank 1 host 100", "range", -1, "ncclGroupEnd", 3045, 3070},
      {"rank 1 host 100", "runtime", -1, "cuLaunchKernelEx", 3050, 3060},
      {"rank 1 host 101 (worker)", "runtime", -1, "cudaMemcpyAsync_v3020", 440, 445},
  };
  const auto got = rows_of(p.trace);
  EXPECT_EQ(got, expected) << "got:\n" << print(got) << "expected:\n" << print(expected);

  EXPECT_EQ(p.schema_version, "3.28.1");
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].pid, 200);
  EXPECT_EQ(p.ranks[0].process_name, "trainer-b");
  EXPECT_EQ(p.ranks[0].source, "device order (device 0)");
  EXPECT_EQ(p.ranks[1].pid, 100);
  EXPECT_EQ(p.ranks[1].devices, std::vector<std::int32_t>{1});

  // Kernel records, in span order, with what the span cannot carry.
  ASSERT_EQ(p.kernels.size(), 9u);
  const profiler::KernelRecord& copy = p.kernels[0];
  EXPECT_EQ(copy.name, "memcpy HtoD");
  EXPECT_EQ(copy.bytes, 4096);
  EXPECT_EQ(copy.correlation, 20);
  const profiler::KernelRecord& gemm = p.kernels[1];
  EXPECT_EQ(gemm.rank, 0);
  EXPECT_EQ(gemm.device, 0);
  EXPECT_EQ(gemm.stream, 7);
  EXPECT_EQ(gemm.correlation, 1);
  EXPECT_EQ(gemm.name, "void gemm<float>(float*, int)");
  EXPECT_EQ(gemm.grid, (std::array<std::int32_t, 3>{128, 2, 1}));
  EXPECT_EQ(gemm.block, (std::array<std::int32_t, 3>{256, 1, 1}));
  EXPECT_EQ(gemm.bytes, 0);
  EXPECT_EQ(p.kernels[3].name, "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096>)");
  EXPECT_EQ(p.kernels[7].rank, 1);
  EXPECT_EQ(p.kernels[7].device, 1);
  EXPECT_EQ(p.kernels[7].correlation, 12);
  for (std::size_t i = 0; i < p.kernels.size(); ++i)
    EXPECT_EQ(p.kernels[i].start_ns, p.trace.spans[i < 5 ? i : i + 9].start_ns) << i;

  // Attribution: rank 0's gemm was launched (900) inside "forward-compute mb=0" inside the
  // warm-up range; the other launches sit only in NCCL API ranges (not ops) or in none; four
  // activities have no launch call in the capture (correlations 20, 4, 11, 14).
  EXPECT_EQ(gemm.op, "forward-compute mb=0");
  ASSERT_TRUE(gemm.phase.has_value());
  EXPECT_EQ(*gemm.phase, SpanKind::F);
  EXPECT_EQ(gemm.microbatch, 0);
  for (std::size_t i = 0; i < p.kernels.size(); ++i) {
    if (i != 1) {
      EXPECT_EQ(p.kernels[i].op, "") << p.kernels[i].name;
    }
  }
  EXPECT_EQ(p.attribution.attributed, 1u);
  EXPECT_EQ(p.attribution.in_phase, 1u);
  EXPECT_EQ(p.attribution.outside_ranges, 4u);
  EXPECT_EQ(p.attribution.without_launch, 4u);

  const std::string warnings = join(p.warnings);
  for (const char* w :
       {"table CUPTI_ACTIVITY_KIND_MEMSET absent", "table TARGET_INFO_GPU absent",
        "1 NCCL kernels of a collective with no span kind", "1 NCCL SendRecv kernels without",
        "1 NVTX ranges without an end", "1 CUDA API calls of processes that are not ranks",
        "1 NVTX ranges of processes that are not ranks"})
    EXPECT_NE(warnings.find(w), std::string::npos) << "missing warning '" << w << "' in\n"
                                                   << warnings;
}

// CUDA memory-usage tracing: allocations and frees per process become the rank's running
// device memory (unattributed), so report and the memory timeline have a peak.
TEST(NsysSyntheticExport, CudaMemoryUsageIsTheRanksDeviceMemory) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.string_id(1, "gemm");
    w.kernel(100, 0, 7, 1, 1000, 2000, 1, 1);
    w.memory_usage(100, 0, 500, 1 << 20, 0);
    w.memory_usage(100, 0, 900, 3 << 20, 0);
    w.memory_usage(100, 0, 2500, 1 << 20, 1);
    w.memory_usage(999, 0, 600, 64, 0);  // a process that is not a rank
    w.close();
  }
  const ImportedProfile p = import_nsys_sqlite(file.path());
  ASSERT_EQ(p.trace.memory.size(), 3u);
  const std::int64_t t[] = {500, 900, 2500}, bytes[] = {1 << 20, 4 << 20, 3 << 20};
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(p.trace.memory[i].rank, 0);
    EXPECT_EQ(p.trace.memory[i].category, profiler::MemoryCategory::Unattributed);
    EXPECT_EQ(p.trace.memory[i].t_ns, t[i]);
    EXPECT_EQ(p.trace.memory[i].bytes, bytes[i]);
  }
  EXPECT_NE(join(p.warnings).find("1 CUDA memory-usage events of processes that are not ranks"),
            std::string::npos)
      << join(p.warnings);
}

// A capture of node 1 of a two-node torchrun job: its two workers are global ranks 2 and 3.
TEST(NsysSyntheticExport, TorchrunNodeRankOffsetsTheRanks) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.launch_command("torchrun", {"--nnodes=2", "--nproc_per_node=2", "--node_rank=1", "t.py"});
    w.string_id(1, "gemm");
    w.kernel(100, 0, 7, 1, 1000, 2000, 1, 1);
    w.kernel(200, 1, 7, 2, 1000, 2000, 1, 1);
    w.close();
  }
  const ImportedProfile p = import_nsys_sqlite(file.path());
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].rank, 2);
  EXPECT_EQ(p.ranks[0].pid, 100);
  EXPECT_EQ(p.ranks[1].rank, 3);
  EXPECT_EQ(p.launch_world_size, 4);
  EXPECT_EQ(p.kernels[0].rank, 2);
  EXPECT_NE(join(p.warnings)
                .find("launched by torchrun --nnodes=2 --nproc_per_node=2 --node_rank=1 t.py: "
                      "world size 4"),
            std::string::npos)
      << join(p.warnings);
}

TEST(NsysSyntheticExport, ExplicitRankNamesWinOverDeviceOrder) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.metadata("EXPORT_META_DATA", "2.9.1");  // the older metadata table name
    w.string_id(1, "k");
    w.string_id(2, "MPI Rank 1");
    w.kernel(10, 0, 7, 1, 100, 200, 1, 1);
    w.kernel(20, 1, 7, 2, 100, 250, 1, 1);
    w.nvtx(39, 20, 20, 5, std::nullopt, "MPI Rank 0");        // thread name in text
    w.nvtx(39, 10, 10, 5, std::nullopt, std::nullopt, 2, 0);  // ... and through StringIds
    w.close();
  }
  const ImportedProfile p = import_nsys_sqlite(file.path());
  EXPECT_EQ(p.schema_version, "2.9.1");
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].pid, 20);
  EXPECT_EQ(p.ranks[0].source, "thread name 'MPI Rank 0'");
  EXPECT_EQ(p.ranks[1].pid, 10);
  EXPECT_EQ(p.ranks[1].source, "thread name 'MPI Rank 1'");
  ASSERT_EQ(p.trace.spans.size(), 2u);
  EXPECT_EQ(p.trace.spans[0].end_ns, 250);  // rank 0's kernel: PID 20's
  EXPECT_EQ(p.trace.spans[1].end_ns, 200);
}

TEST(NsysSyntheticExport, PidOrderWhenAProcessUsesTwoDevices) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.string_id(1, "k");
    w.kernel(30, 0, 7, 1, 100, 200, 1, 1);
    w.kernel(30, 1, 7, 2, 300, 400, 1, 1);  // stream id 7 again, on the other device
    w.kernel(7, 2, 9, 3, 100, 150, 1, 1);
    w.close();
  }
  const ImportedProfile p = import_nsys_sqlite(file.path());
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].pid, 7);
  EXPECT_EQ(p.ranks[0].source, "PID order");
  EXPECT_EQ(p.ranks[1].pid, 30);
  EXPECT_EQ(p.ranks[1].devices, (std::vector<std::int32_t>{0, 1}));
  EXPECT_TRUE(any_contains(p.warnings, "same CUDA stream id on several devices"))
      << join(p.warnings);
  EXPECT_TRUE(any_contains(p.warnings, "export schema version unknown")) << join(p.warnings);
  EXPECT_EQ(p.schema_version, "");
}

TEST(NsysSyntheticExport, HostOnlyCaptureMakesRanksOfNvtxProcesses) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.nvtx(59, 5, 5, 0, 10, "forward 3");
    w.nvtx(59, 3, 4, 0, 10, "PP:1I2");
    w.close();
  }
  const ImportedProfile p = import_nsys_sqlite(file.path());
  ASSERT_EQ(p.ranks.size(), 2u);
  EXPECT_EQ(p.ranks[0].pid, 3);
  EXPECT_EQ(p.ranks[1].pid, 5);
  EXPECT_TRUE(any_contains(p.warnings, "no GPU activity")) << join(p.warnings);
  const std::vector<SpanRow> expected = {{"rank 0 host 4", "B", 2, "PP:1I2", 0, 10},
                                         {"rank 1 host 5", "F", 3, "forward 3", 0, 10}};
  EXPECT_EQ(rows_of(p.trace), expected) << print(rows_of(p.trace));
}

// Bad input: an InputError whose one-line message names the file and what is wrong.
void expect_input_error(const std::filesystem::path& file, const std::string& needle) {
  try {
    import_nsys_sqlite(file);
    ADD_FAILURE() << "no error for " << file;
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(file.string()), std::string::npos) << what;
    EXPECT_NE(what.find(needle), std::string::npos) << "'" << needle << "' not in: " << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

TEST(NsysSyntheticExport, MissingFile) {
  expect_input_error("/nonexistent/profile.sqlite", "no such file");
}

TEST(NsysSyntheticExport, NotSqlite) {
  TempFile file(".sqlite");
  std::ofstream(file.path()) << "{\"traceEvents\": []}\n" << std::string(200, 'x');
  expect_input_error(file.path(), "not readable as SQLite");
}

TEST(NsysSyntheticExport, SqliteButNotAnNsysExport) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.create("runs", "id INTEGER");
    w.close();
  }
  expect_input_error(file.path(), "no StringIds, CUPTI_ACTIVITY_KIND_* or NVTX_EVENTS table");
}

TEST(NsysSyntheticExport, MissingRequiredColumn) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.create("CUPTI_ACTIVITY_KIND_KERNEL", "start INTEGER, end INTEGER, deviceId INTEGER");
    w.exec("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (1, 2, 0)");
    w.close();
  }
  expect_input_error(file.path(), "table CUPTI_ACTIVITY_KIND_KERNEL has no column globalPid");
}

TEST(NsysSyntheticExport, TextWhereATimeBelongs) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.runtime(1, 1, 1, 10, 20, 1);
    w.exec("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 'soon'");
    w.close();
  }
  expect_input_error(file.path(), "table CUPTI_ACTIVITY_KIND_RUNTIME column start row 1");
}

TEST(NsysSyntheticExport, TruncatedFile) {
  TempFile file(".sqlite");
  {
    NsysExportWriter w(file.path());
    w.string_id(1, "k");
    for (int i = 0; i < 5000; ++i) w.kernel(1, 0, 7, i, 10 * i, 10 * i + 5, 1, 1);
    w.close();
  }
  const auto size = std::filesystem::file_size(file.path());
  ASSERT_GT(size, 64u * 1024u) << "the export must span many pages";
  std::filesystem::resize_file(file.path(), size / 2);
  try {
    import_nsys_sqlite(file.path());
    ADD_FAILURE() << "a half file imported without error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(file.path().string()), std::string::npos) << e.what();
  }
  std::filesystem::resize_file(file.path(), 50);  // shorter than the SQLite header
  expect_input_error(file.path(), "not readable as SQLite");
}

}  // namespace
}  // namespace pipetune::db
