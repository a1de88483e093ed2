// The nsys importer against two real exports, checked against the facts in their README.md files
// (shared/data/real_traces/nsys-2gpu-torchrun and nsys-mpi-saxpy; numbers measured there from the
// files with Python's sqlite3, independently of this importer).
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "db/import/nsys_sqlite.hpp"
#include "profiler/analysis/gpu_op_time.hpp"
#include "profiler/gpu/kernel_class.hpp"
#include "tests/db/import/import_test_helpers.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::db::testing;
using profiler::is_communication;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;

class TorchrunExport : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto file = real_trace("nsys-2gpu-torchrun/mfu_2gpu_before.sqlite");
    if (std::filesystem::exists(file)) profile_ = new ImportedProfile(import_nsys_sqlite(file));
  }
  static void TearDownTestSuite() {
    delete profile_;
    profile_ = nullptr;
  }
  void SetUp() override {
    if (profile_ == nullptr)
      PIPETUNE_SKIP_OR_FAIL("real trace nsys-2gpu-torchrun/mfu_2gpu_before.sqlite is absent");
  }
  const profiler::Trace& trace() const { return profile_->trace; }
  // Kernel spans (compute and NCCL) on a rank's stream.
  std::vector<Span> kernels_on(std::int32_t rank, std::int32_t stream) const {
    const int lane = find_lane(trace(), rank, Stream::Gpu, stream);
    return spans_where(trace(), [&](const Span& s) {
      return s.lane == lane && (s.kind == SpanKind::Kernel || is_communication(s.kind));
    });
  }
  static ImportedProfile* profile_;
};
ImportedProfile* TorchrunExport::profile_ = nullptr;

TEST_F(TorchrunExport, SchemaVersionAndMissingGpuTable) {
  EXPECT_EQ(profile_->schema_version, "3.25.0");
  EXPECT_EQ(trace().kind, profiler::TraceKind::Imported);
  // The trimming dropped TARGET_INFO_GPU: GPU names unknown, said as a warning.
  EXPECT_TRUE(profile_->gpus.empty());
  EXPECT_TRUE(any_contains(profile_->warnings, "TARGET_INFO_GPU")) << join(profile_->warnings);
}

TEST_F(TorchrunExport, RanksAreTheTwoGpuProcessesInDeviceOrder) {
  ASSERT_EQ(profile_->ranks.size(), 2u);
  EXPECT_EQ(profile_->ranks[0].pid, 144);
  EXPECT_EQ(profile_->ranks[0].devices, std::vector<std::int32_t>{0});
  EXPECT_EQ(profile_->ranks[0].process_name, "python3");
  EXPECT_EQ(profile_->ranks[1].pid, 145);
  EXPECT_EQ(profile_->ranks[1].devices, std::vector<std::int32_t>{1});
  EXPECT_EQ(profile_->ranks[0].source, "device order (device 0); torchrun local rank 0 of node 0");
}

TEST_F(TorchrunExport, KernelCountsPerDeviceAndStream) {
  std::int64_t kernels = 0;
  std::set<std::string> short_names;
  for (const auto& s : trace().spans) {
    if (s.kind == SpanKind::Kernel || is_communication(s.kind)) {
      ++kernels;
      short_names.insert(trace().names[s.name]);
    }
  }
  EXPECT_EQ(kernels, 4010);
  EXPECT_EQ(short_names.size(), 11u);
  EXPECT_EQ(kernels_on(0, 7).size(), 1993u);
  EXPECT_EQ(kernels_on(1, 15).size(), 2017u);
  // Only those two streams carry kernels.
  EXPECT_EQ(kernels_on(0, 15).size(), 0u);
  EXPECT_EQ(kernels_on(1, 7).size(), 0u);
}

TEST_F(TorchrunExport, UnionBusyTimeAndKernelSpan) {
  EXPECT_EQ(union_ns(kernels_on(0, 7)), 270'863'484);
  EXPECT_EQ(union_ns(kernels_on(1, 15)), 264'324'724);
  std::int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& s : trace().spans) {
    if (s.kind != SpanKind::Kernel && !is_communication(s.kind)) continue;
    first = std::min(first, s.start_ns);
    last = std::max(last, s.end_ns);
  }
  EXPECT_EQ(first, 60'111'513'113);
  EXPECT_EQ(last, 60'411'390'119);
}

TEST_F(TorchrunExport, NcclSendRecvKernelsAreSendsOnTheComputeStream) {
  // Every SendRecv group on both ranks issues ncclSend and ncclRecv: the documented rule says Send.
  for (auto [rank, stream, nccl_ns] :
       {std::tuple{0, 7, std::int64_t{17'172'652}}, std::tuple{1, 15, std::int64_t{8'229'100}}}) {
    const auto comm = spans_where(trace(), [&](const Span& s) {
      return s.lane == find_lane(trace(), rank, Stream::Gpu, stream) && is_communication(s.kind);
    });
    EXPECT_EQ(comm.size(), 33u) << "rank " << rank;
    for (const auto& s : comm) {
      EXPECT_EQ(s.kind, SpanKind::Send);
      EXPECT_EQ(trace().names[s.name], "ncclDevKernel_SendRecv");
    }
    EXPECT_EQ(sum_ns(comm), nccl_ns) << "rank " << rank;
  }
}

TEST_F(TorchrunExport, KernelRecordsCarryDemangledNamesAndLaunchShape) {
  std::int64_t kernels = 0, nccl = 0;
  for (const auto& k : profile_->kernels) {
    if (k.bytes != 0 || k.name.rfind("mem", 0) == 0) continue;
    ++kernels;
    EXPECT_GT(k.grid[0], 0) << k.name;
    EXPECT_GT(k.block[0], 0) << k.name;
    EXPECT_EQ(k.device, k.rank);  // rank i is the process on device i here
    if (k.name == "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<(unsigned long)4096>)") ++nccl;
  }
  EXPECT_EQ(kernels, 4010);
  EXPECT_EQ(nccl, 66);
}

TEST_F(TorchrunExport, CopiesAndMemsets) {
  std::map<std::string, std::pair<std::int64_t, std::int64_t>> copies;  // name -> count, bytes
  std::int64_t memsets = 0;
  for (const auto& k : profile_->kernels) {
    if (k.name.rfind("memcpy ", 0) == 0) {
      copies[k.name].first += 1;
      copies[k.name].second += k.bytes;
    }
    if (k.name == "memset") ++memsets;
  }
  EXPECT_EQ(copies.size(), 2u);
  using CountBytes = std::pair<std::int64_t, std::int64_t>;
  EXPECT_EQ(copies["memcpy HtoD"], CountBytes(34, 272));
  EXPECT_EQ(copies["memcpy DtoD"], CountBytes(986, 8'046'134'272));
  EXPECT_EQ(memsets, 269);
  EXPECT_EQ(spans_where(trace(), [](const Span& s) { return s.kind == SpanKind::Memcpy; }).size(),
            1020u);
  EXPECT_EQ(spans_where(trace(), [](const Span& s) { return s.kind == SpanKind::Memset; }).size(),
            269u);
}

TEST_F(TorchrunExport, NvtxRangesPerThreadAndNcclDomainWithoutName) {
  const auto ranges = [&](std::int32_t rank, std::int32_t tid) {
    const int lane = find_lane(trace(), rank, Stream::Host, tid);
    return spans_where(
        trace(), [&](const Span& s) { return s.lane == lane && s.kind != SpanKind::Runtime; });
  };
  const auto r0 = ranges(0, 144), r1 = ranges(1, 145);
  EXPECT_EQ(r0.size(), 9443u);
  EXPECT_EQ(r1.size(), 9675u);
  // No pipeline phase names in this capture: every range stays a Range.
  std::map<std::string, int> nccl_calls;
  std::set<std::string> base_names;
  for (const auto* v : {&r0, &r1}) {
    for (const auto& s : *v) {
      EXPECT_EQ(s.kind, SpanKind::Range) << trace().names[s.name];
      const std::string& name = trace().names[s.name];
      if (name == "ncclSend" || name == "ncclRecv" || name == "ncclGroupStart" ||
          name == "ncclGroupEnd" || name == "ncclCommCount") {
        ++nccl_calls[name];
      } else {
        base_names.insert(name.substr(0, name.find(',')));
      }
    }
  }
  // Domain 1 (NCCL's, its domain-create row outside the window) names via StringIds.
  EXPECT_EQ(nccl_calls, (std::map<std::string, int>{{"ncclCommCount", 66},
                                                    {"ncclGroupEnd", 66},
                                                    {"ncclGroupStart", 66},
                                                    {"ncclRecv", 132},
                                                    {"ncclSend", 132}}));
  EXPECT_EQ(base_names.size(), 88u);  // domain 0: 88 distinct base names (text before a comma)
  EXPECT_EQ(find_lane(trace(), 0, Stream::Host, 144) >= 0 &&
                trace().lanes[static_cast<std::size_t>(find_lane(trace(), 0, Stream::Host, 144))]
                        .name.find("python") != std::string::npos,
            true)
      << "host lanes are named after their thread";
}

TEST_F(TorchrunExport, CudaApiCallsOnTheirThreads) {
  const auto api = [&](std::int32_t rank, std::int32_t tid) {
    const int lane = find_lane(trace(), rank, Stream::Host, tid);
    return spans_where(trace(),
                       [&](const Span& s) { return s.lane == lane && s.kind == SpanKind::Runtime; })
        .size();
  };
  EXPECT_EQ(api(0, 144), 3558u);
  EXPECT_EQ(api(0, 245), 130u);
  EXPECT_EQ(api(1, 145), 3639u);
  EXPECT_EQ(api(1, 242), 139u);
  EXPECT_EQ(spans_where(trace(), [](const Span& s) { return s.kind == SpanKind::Runtime; }).size(),
            7466u);
}

// The launch command nsys recorded: torchrun with 2 workers on 1 node (README: "torchrun
// --nnodes=1 --nproc_per_node=2 --master_port=29506 .../fv_mfu_training.py"); the two rank
// processes are its local ranks 0 and 1.
TEST_F(TorchrunExport, LaunchCommandGivesTheWorldSize) {
  EXPECT_EQ(
      profile_->launch.rfind("torchrun --nnodes=1 --nproc_per_node=2 --master_port=29506 ", 0), 0u)
      << profile_->launch;
  EXPECT_EQ(profile_->launch_world_size, 2);
  ASSERT_EQ(profile_->ranks.size(), 2u);
  EXPECT_NE(profile_->ranks[1].source.find("torchrun local rank 1 of node 0"), std::string::npos)
      << profile_->ranks[1].source;
  EXPECT_TRUE(any_contains(profile_->warnings, "world size 2")) << join(profile_->warnings);
}

// Kernels attributed to the PyTorch op ranges (emit_nvtx names, ", op_id = ..." dropped) that
// launched them. The README's facts: NCCL kernel time per device is the communication class's;
// FlashAttention kernels (FlashAttnFunc in the README) are attention launched from flash_attn.
TEST_F(TorchrunExport, KernelsAttributedToTheOpsThatLaunchedThem) {
  const auto times =
      profiler::analysis::gpu_op_time(profile_->kernels, profiler::analysis::trace_extent(trace()));
  ASSERT_EQ(times.size(), 2u);
  const auto comm = static_cast<std::size_t>(profiler::KernelClass::Communication);
  EXPECT_EQ(times[0].class_ns[comm], 17'172'652);
  EXPECT_EQ(times[1].class_ns[comm], 8'229'100);
  EXPECT_EQ(times[0].class_count[comm] + times[1].class_count[comm], 66);
  std::size_t flash = 0, sendrecv_with_op = 0;
  for (const profiler::KernelRecord& k : profile_->kernels) {
    EXPECT_EQ(k.op.find(", op_id"), std::string::npos) << k.op;
    EXPECT_FALSE(k.phase.has_value()) << "no pipeline phase in this run: " << k.name;
    if (k.name.find("flash_fwd_kernel") != std::string::npos) {
      ++flash;
      EXPECT_EQ(profiler::classify_gpu_activity(k), profiler::KernelClass::Attention) << k.name;
      if (!k.op.empty()) {
        EXPECT_NE(k.op.find("flash_attn"), std::string::npos) << k.op;
      }
    }
    if (k.name.find("ncclDevKernel_SendRecv") != std::string::npos && !k.op.empty()) {
      ++sendrecv_with_op;
      EXPECT_NE(k.op.find("all_to_all"), std::string::npos) << k.op;  // c10d's range, not NCCL's
    }
  }
  EXPECT_GT(flash, 0u);
  EXPECT_EQ(sendrecv_with_op, 64u);  // 66, less the 2 whose launch fell outside the window
  // Nearly every activity's launch call is in the window; those are all inside a range.
  EXPECT_EQ(profile_->attribution.outside_ranges, 0u);
  EXPECT_EQ(profile_->attribution.attributed + profile_->attribution.without_launch,
            profile_->kernels.size());
  EXPECT_LT(profile_->attribution.without_launch, 50u);
}

TEST(SaxpyExport, OlderSchemaExplicitRankAndUnclippedEvents) {
  const auto file = real_trace("nsys-mpi-saxpy/saxpy-mpi-cuda_nsys_perlmutter0.sqlite");
  PIPETUNE_REQUIRE_FILE(file);
  const ImportedProfile p = import_nsys_sqlite(file);
  const auto& t = p.trace;
  EXPECT_EQ(p.schema_version, "2.9.1");  // from EXPORT_META_DATA

  ASSERT_EQ(p.ranks.size(), 1u) << "only PID 1230493 of 1,667 processes has CUDA/NVTX activity";
  EXPECT_EQ(p.ranks[0].rank, 0);
  EXPECT_EQ(p.ranks[0].pid, 1230493);
  EXPECT_EQ(p.ranks[0].process_name, "./saxpy-mpi-cuda");
  EXPECT_EQ(p.ranks[0].source, "thread name 'MPI Rank 0'");

  ASSERT_EQ(p.gpus.size(), 1u);
  EXPECT_EQ(p.gpus[0].id, 0);
  EXPECT_EQ(p.gpus[0].name, "NVIDIA A100-SXM4-40GB");

  const int gpu_lane = find_lane(t, 0, Stream::Gpu, 7);
  const auto kernels = spans_where(t, [](const Span& s) { return s.kind == SpanKind::Kernel; });
  ASSERT_EQ(kernels.size(), 5u) << dump(t, kernels);
  for (const auto& k : kernels) {
    EXPECT_EQ(k.lane, gpu_lane);
    EXPECT_EQ(t.names[k.name], "saxpy");
  }
  EXPECT_EQ(kernels.front().start_ns, 924'922'186);
  EXPECT_EQ(kernels.back().end_ns, 1'965'496'577);
  EXPECT_EQ(union_ns(kernels), 88'573'480);

  const int host = find_lane(t, 0, Stream::Host, 1230493);
  const auto ranges =
      spans_where(t, [&](const Span& s) { return s.lane == host && s.kind != SpanKind::Runtime; });
  ASSERT_EQ(ranges.size(), 22u) << dump(t, ranges);
  std::map<std::string, int> names;
  std::int64_t first = INT64_MAX, last = INT64_MIN;
  for (const auto& r : ranges) {
    EXPECT_EQ(r.kind, SpanKind::Range);
    ++names[t.names[r.name]];
    first = std::min(first, r.start_ns);
    last = std::max(last, r.end_ns);
  }
  EXPECT_EQ(
      names,
      (std::map<std::string, int>{
          {"MPI_Send", 10}, {"MPI_Recv", 5}, {"MPI_Init", 1}, {"MPI_Finalize", 1}, {"saxpy", 5}}));
  // Before ANALYSIS_DETAILS.startTime (1,170,854,025): kept, not clipped.
  EXPECT_EQ(first, 65'117'824);
  EXPECT_EQ(last, 2'088'944'716);

  std::map<std::string, std::pair<std::int64_t, std::int64_t>> copies;
  for (const auto& k : p.kernels) {
    if (k.name.rfind("memcpy ", 0) != 0) continue;
    copies[k.name].first += 1;
    copies[k.name].second += k.bytes;
  }
  EXPECT_EQ(copies,
            (std::map<std::string, std::pair<std::int64_t, std::int64_t>>{
                {"memcpy HtoD", {10, 2'621'440'000}}, {"memcpy DtoH", {5, 1'310'720'000}}}));
  EXPECT_EQ(spans_where(t, [](const Span& s) { return s.kind == SpanKind::Runtime; }).size(), 95u);
  EXPECT_EQ(spans_where(t, [](const Span& s) { return s.kind == SpanKind::Memset; }).size(), 0u);
}

}  // namespace
}  // namespace pipetune::db
