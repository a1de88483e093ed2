// The Chrome-trace importer against real files, checked against the facts in their README.md
// files: PiPPy's 4-stage pipeline run (pippy-4stage-toy) and two ranks of a Kineto trace with
// NCCL kernels (hta-2rank-nccl; numbers measured there with Python's json/gzip).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <map>

#include "db/import/chrome_trace_import.hpp"
#include "db/import/merge_profiles.hpp"
#include "engine/errors.hpp"
#include "tests/db/import/import_test_helpers.hpp"
#include "tests/db/import/nsys_export_writer.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::db::testing;
using profiler::is_communication;
using profiler::Span;
using profiler::SpanKind;
using profiler::Stream;

std::vector<Span> rank_spans(const profiler::Trace& t, std::int32_t rank) {
  auto v = spans_where(
      t, [&](const Span& s) { return t.lanes[static_cast<std::size_t>(s.lane)].rank == rank; });
  std::sort(v.begin(), v.end(),
            [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
  return v;
}

std::string op_order(const std::vector<Span>& spans) {
  std::string order;
  for (const Span& s : spans) {
    const char* op = s.kind == SpanKind::F         ? "F"
                     : s.kind == SpanKind::BW      ? "B"
                     : s.kind == SpanKind::Barrier ? "S"
                                                   : "?";
    order += (order.empty() ? "" : " ") + std::string(op) + std::to_string(s.microbatch);
  }
  return order;
}

TEST(PippyTrace, StagesOpsAndBubbles) {
  const auto file = real_trace("pippy-4stage-toy/pipe_visualized.json");
  PIPETUNE_REQUIRE_FILE(file);
  const ImportedProfile p = import_chrome_trace(file);
  const auto& t = p.trace;
  ASSERT_EQ(t.spans.size(), 36u);
  ASSERT_EQ(p.ranks.size(), 4u) << "tid = pipeline stage = rank";
  for (std::int32_t stage = 0; stage < 4; ++stage) {
    EXPECT_EQ(p.ranks[static_cast<std::size_t>(stage)].rank, stage);
    EXPECT_GE(find_lane(t, stage, Stream::Compute, 0), 0) << "stage " << stage;
  }

  // Op order per stage (README): fill-drain on stages 0-2, 1F1B-like on the last.
  const char* gpipe = "F0 F1 F2 F3 B0 B1 B2 B3";
  EXPECT_EQ(op_order(rank_spans(t, 0)), gpipe);
  EXPECT_EQ(op_order(rank_spans(t, 1)), gpipe);
  EXPECT_EQ(op_order(rank_spans(t, 2)), gpipe);
  EXPECT_EQ(op_order(rank_spans(t, 3)), "F0 F1 B0 F2 B1 F3 B2 S0 B3 S1 S2 S3");

  // Makespan: the README's 14,686,315.5 µs, from 1649317709410899.2 to 1649317724097214.8, was
  // summed in doubles (0.25 µs apart at 1.6e15). From the file's text the last event, S_3,3, is
  // ts 1649317724097104.0 + dur 110.626220703125 = ...214.626 µs: the importer keeps that exactly.
  std::int64_t first = INT64_MAX, last = INT64_MIN;
  for (const Span& s : t.spans) {
    first = std::min(first, s.start_ns);
    last = std::max(last, s.end_ns);
  }
  EXPECT_EQ(first, 1'649'317'709'410'899'200);
  EXPECT_EQ(last, 1'649'317'724'097'104'000 + 110'626);
  EXPECT_NEAR(static_cast<double>(last - first), 14'686'315'500.0, 250.0);

  // Busy per stage 8.088 / 8.087 / 8.169 / 8.564 s, idle 0.449 / 0.449 / 0.444 / 0.417 of the
  // makespan (both given to 3 decimals).
  const double busy_s[] = {8.088, 8.087, 8.169, 8.564};
  const double idle[] = {0.449, 0.449, 0.444, 0.417};
  for (std::int32_t stage = 0; stage < 4; ++stage) {
    const double busy = static_cast<double>(union_ns(rank_spans(t, stage))) * 1e-9;
    EXPECT_NEAR(busy, busy_s[stage], 0.0005) << "stage " << stage;
    EXPECT_NEAR(1.0 - busy / ((last - first) * 1e-9), idle[stage], 0.0005) << "stage " << stage;
  }

  // Op durations: F and B 1.00-1.04 s on stages 0-2; stage-3 forwards 1.105-1.157 s (loss
  // included); the sync barriers 0.1-0.5 ms.
  for (const Span& s : t.spans) {
    const std::int32_t stage = t.lanes[static_cast<std::size_t>(s.lane)].rank;
    const double d = static_cast<double>(s.end_ns - s.start_ns) * 1e-9;
    if (s.kind == SpanKind::Barrier) {
      EXPECT_EQ(stage, 3);
      EXPECT_GE(d, 0.0001);
      EXPECT_LE(d, 0.0005);
    } else if (stage == 3 && s.kind == SpanKind::F) {
      EXPECT_GE(d, 1.105);
      EXPECT_LE(d, 1.1575);
    } else {
      EXPECT_GE(d, 1.0);
      EXPECT_LE(d, 1.0405) << t.span_label(s) << " on stage " << stage;
    }
  }

  // F_{s,mb} after F_{s-1,mb}, B_{s,mb} after B_{s+1,mb}: 23 of 24 pairs; F_2,0 starts 72 µs
  // before F_1,0 ends (per-stage RPC clocks); all within 0.1 ms.
  auto op = [&](std::int32_t stage, SpanKind kind, std::int32_t mb) {
    for (const Span& s : rank_spans(t, stage))
      if (s.kind == kind && s.microbatch == mb) return s;
    ADD_FAILURE() << "no op " << profiler::span_kind_name(kind) << mb << " on stage " << stage;
    return Span{};
  };
  int in_order = 0;
  for (std::int32_t mb = 0; mb < 4; ++mb) {
    for (std::int32_t s = 1; s < 4; ++s) {
      const std::int64_t f_gap =
          op(s, SpanKind::F, mb).start_ns - op(s - 1, SpanKind::F, mb).end_ns;
      const std::int64_t b_gap =
          op(s - 1, SpanKind::BW, mb).start_ns - op(s, SpanKind::BW, mb).end_ns;
      in_order += (f_gap >= 0) + (b_gap >= 0);
      EXPECT_GT(f_gap, -100'000) << "F" << mb << " stage " << s;
      EXPECT_GT(b_gap, -100'000) << "B" << mb << " stage " << s - 1;
    }
  }
  EXPECT_EQ(in_order, 23);
  const std::int64_t early = op(1, SpanKind::F, 0).end_ns - op(2, SpanKind::F, 0).start_ns;
  EXPECT_NEAR(static_cast<double>(early), 72'000.0, 1'000.0);
  // F_1,0 starts at ...710452487.2, 1.6 ms after F_0,0 ends at ...710450865.3.
  EXPECT_EQ(op(1, SpanKind::F, 0).start_ns % 1'000'000'000, 452'487'200);
  EXPECT_EQ(op(0, SpanKind::F, 0).end_ns % 1'000'000'000, 450'865'306);  // .3055 µs, rounded
}

// The Kineto files, decompressed by the system gzip (so the test runs without zlib too).
class KinetoTraces : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int r = 0; r < 2; ++r) {
      const auto gz = real_trace("hta-2rank-nccl/sampled_rank-" + std::to_string(r) + ".json.gz");
      PIPETUNE_REQUIRE_SHARED(gz);
      plain_[r] = std::make_unique<TempFile>(".json");
      const std::string cmd =
          "gzip -dc '" + gz.string() + "' > '" + plain_[r]->path().string() + "'";
      if (std::system(cmd.c_str()) != 0) PIPETUNE_SKIP_OR_FAIL("no gzip to decompress " << gz);
      profile_[r] = import_chrome_trace(plain_[r]->path());
    }
  }
  std::vector<Span> kernels(int r, std::int32_t stream) const {
    const auto& t = profile_[r].trace;
    const int lane = find_lane(t, r, Stream::Gpu, stream);
    return spans_where(t, [&](const Span& s) {
      return s.lane == lane && (s.kind == SpanKind::Kernel || is_communication(s.kind));
    });
  }
  const Span& step(int r, const std::string& name) const {
    const auto& t = profile_[r].trace;
    for (const Span& s : t.spans)
      if (t.names[s.name] == name) return s;
    throw std::runtime_error("no " + name);
  }
  std::unique_ptr<TempFile> plain_[2];
  ImportedProfile profile_[2];
};

TEST_F(KinetoTraces, RanksFromDistributedInfo) {
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(profile_[r].ranks.size(), 1u);
    EXPECT_EQ(profile_[r].ranks[0].rank, r);
    EXPECT_EQ(profile_[r].ranks[0].source, "distributedInfo.rank");
    EXPECT_EQ(profile_[r].ranks[0].devices, std::vector<std::int32_t>{r}) << "GPU pid = device";
    for (const auto& lane : profile_[r].trace.lanes) EXPECT_EQ(lane.rank, r);
  }
  EXPECT_EQ(profile_[0].ranks[0].process_name, "pyper:trainer:0:0");
}

TEST_F(KinetoTraces, KernelsPerStream) {
  const std::map<std::int32_t, std::size_t> expected[2] = {
      {{7, 1036}, {23, 108}, {84, 8}, {203, 2}}, {{7, 986}, {23, 108}, {84, 8}, {203, 2}}};
  const std::size_t totals[2] = {1154, 1104};
  for (int r = 0; r < 2; ++r) {
    std::size_t total = 0;
    for (const auto& [stream, n] : expected[r]) {
      EXPECT_EQ(kernels(r, stream).size(), n) << "rank " << r << " stream " << stream;
      total += kernels(r, stream).size();
    }
    EXPECT_EQ(total, totals[r]);
    EXPECT_TRUE(kernels(r, 25).empty()) << "stream 25 carries copies only";
  }
}

TEST_F(KinetoTraces, NcclKernelsAreCommunication) {
  const std::int64_t nccl_us[2] = {396'199, 379'053};
  for (int r = 0; r < 2; ++r) {
    const auto& t = profile_[r].trace;
    const auto comm = spans_where(t, [](const Span& s) { return is_communication(s.kind); });
    EXPECT_EQ(comm.size(), 10u);
    for (const Span& s : comm) {
      EXPECT_EQ(s.kind, SpanKind::Send);  // SendRecv kernels: direction unknown -> send
      EXPECT_EQ(t.names[s.name].rfind("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(", 0), 0u)
          << t.names[s.name];
    }
    EXPECT_EQ(kernels(r, 84).size(), 8u);
    EXPECT_EQ(kernels(r, 203).size(), 2u);
    EXPECT_EQ(sum_ns(comm), nccl_us[r] * 1000) << "rank " << r;
  }
}

TEST_F(KinetoTraces, UnionBusyTimePerStream) {
  const std::map<std::int32_t, std::int64_t> busy_us[2] = {
      {{7, 202'489}, {23, 7'831}, {84, 290'059}, {203, 106'140}},
      {{7, 263'508}, {23, 8'465}, {84, 274'146}, {203, 104'907}}};
  for (int r = 0; r < 2; ++r)
    for (const auto& [stream, us] : busy_us[r])
      EXPECT_EQ(union_ns(kernels(r, stream)), us * 1000) << "rank " << r << " stream " << stream;
}

TEST_F(KinetoTraces, StepsSpansAndHostEvents) {
  const std::int64_t step551[2][2] = {{1682725898079292, 607'312}, {1682725898079484, 607'904}};
  const std::int64_t step552[2][2] = {{1682725898686653, 622'928}, {1682725898687438, 630'639}};
  const std::int64_t kernel_span[2][2] = {{1682725898082228, 1682725899305046},
                                          {1682725898082381, 1682725899313563}};
  const std::int64_t all_span_us[2] = {3'367'344, 3'366'398};
  const std::size_t runtime[2] = {1204, 1154};
  const std::size_t cpu_ops_and_annotations[2] = {2329 + 73, 2302 + 65};
  for (int r = 0; r < 2; ++r) {
    const auto& t = profile_[r].trace;
    const Span& s1 = step(r, "ProfilerStep#551");
    EXPECT_EQ(s1.start_ns, step551[r][0] * 1000);
    EXPECT_EQ(s1.end_ns - s1.start_ns, step551[r][1] * 1000);
    EXPECT_EQ(s1.kind, SpanKind::Range);
    const Span& s2 = step(r, "ProfilerStep#552");
    EXPECT_EQ(s2.start_ns, step552[r][0] * 1000);
    EXPECT_EQ(s2.end_ns - s2.start_ns, step552[r][1] * 1000);

    std::int64_t k_first = INT64_MAX, k_last = INT64_MIN, first = INT64_MAX, last = INT64_MIN;
    std::size_t api = 0, host_other = 0;
    for (const Span& s : t.spans) {
      first = std::min(first, s.start_ns);
      last = std::max(last, s.end_ns);
      if (s.kind == SpanKind::Kernel || is_communication(s.kind)) {
        k_first = std::min(k_first, s.start_ns);
        k_last = std::max(k_last, s.end_ns);
      }
      const auto stream = t.lanes[static_cast<std::size_t>(s.lane)].stream;
      if (s.kind == SpanKind::Runtime) ++api;
      if (stream == Stream::Host && s.kind != SpanKind::Runtime) ++host_other;
    }
    EXPECT_EQ(k_first, kernel_span[r][0] * 1000);
    EXPECT_EQ(k_last, kernel_span[r][1] * 1000);
    EXPECT_EQ(last - first, all_span_us[r] * 1000);
    EXPECT_EQ(api, runtime[r]);
    EXPECT_EQ(host_other, cpu_ops_and_annotations[r] + 1) << "plus the profiler's own 'Trace'";
  }
  // Across ranks: step 551 starts 192 µs later on rank 1; the stream-203 NCCL kernels line up.
  EXPECT_EQ(step(1, "ProfilerStep#551").start_ns - step(0, "ProfilerStep#551").start_ns, 192'000);
  const std::int64_t base = 1682725898000000;
  const std::int64_t start203[2][2] = {{585'321, 1'185'890}, {585'405, 1'187'182}};
  const std::int64_t dur203[2][2] = {{42'496, 63'644}, {42'744, 62'163}};
  for (int r = 0; r < 2; ++r) {
    const auto k = kernels(r, 203);
    ASSERT_EQ(k.size(), 2u);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(k[static_cast<std::size_t>(i)].start_ns, (base + start203[r][i]) * 1000);
      EXPECT_EQ(k[static_cast<std::size_t>(i)].end_ns - k[static_cast<std::size_t>(i)].start_ns,
                dur203[r][i] * 1000);
    }
  }
}

TEST_F(KinetoTraces, KernelRecordsFromArgs) {
  const ImportedProfile& p = profile_[0];
  std::size_t kernels = 0;
  for (const profiler::KernelRecord& k : p.kernels) {
    EXPECT_EQ(k.rank, 0);
    EXPECT_EQ(k.device, 0);
    EXPECT_GE(k.correlation, 0);
    if (k.grid[0] > 0) ++kernels;
  }
  EXPECT_EQ(kernels, 1154u);
  // The first kernel (README excerpt): permute_2D_lengths_kernel, grid 2400, block 256, stream 23.
  const profiler::KernelRecord* first = nullptr;
  for (const profiler::KernelRecord& k : p.kernels)
    if (k.grid[0] > 0 && (first == nullptr || k.start_ns < first->start_ns)) first = &k;
  ASSERT_NE(first, nullptr);
  EXPECT_EQ(first->name,
            "void fbgemm_gpu::permute_2D_lengths_kernel<int>(int, int, int const*, int const*, "
            "int*)");
  EXPECT_EQ(first->grid, (std::array<std::int32_t, 3>{2400, 1, 1}));
  EXPECT_EQ(first->block, (std::array<std::int32_t, 3>{256, 1, 1}));
  EXPECT_EQ(first->stream, 23);
  EXPECT_EQ(first->correlation, 6935929);
}

TEST_F(KinetoTraces, MergedRanksShareOneTrace) {
  const std::size_t spans = profile_[0].trace.spans.size() + profile_[1].trace.spans.size();
  const std::size_t kernels = profile_[0].kernels.size() + profile_[1].kernels.size();
  const ImportedProfile merged = merge_imported_profiles({profile_[0], profile_[1]});
  const auto& t = merged.trace;
  EXPECT_EQ(t.spans.size(), 4811u + 4676u);
  EXPECT_EQ(t.spans.size(), spans);
  EXPECT_EQ(merged.kernels.size(), kernels);
  ASSERT_EQ(merged.ranks.size(), 2u);
  EXPECT_EQ(merged.ranks[1].process_name, "pyper:trainer:0:1");
  // Kernel records still sit beside their spans: (lane, start) finds a kernel-kind span.
  std::size_t matched = 0;
  for (const profiler::KernelRecord& k : merged.kernels) {
    const int lane = find_lane(t, k.rank, Stream::Gpu, k.stream);
    for (const Span& s : t.spans)
      if (s.lane == lane && s.start_ns == k.start_ns && s.end_ns == k.end_ns) {
        ++matched;
        break;
      }
  }
  EXPECT_EQ(matched, kernels);
  std::int64_t step[2] = {0, 0};
  for (const Span& s : t.spans)
    if (t.names[s.name] == "ProfilerStep#551")
      step[t.lanes[static_cast<std::size_t>(s.lane)].rank] = s.start_ns;
  EXPECT_EQ(step[1] - step[0], 192'000);
  for (int r = 0; r < 2; ++r) {
    const auto k = spans_where(t, [&](const Span& s) {
      return s.lane == find_lane(t, r, Stream::Gpu, 84) && is_communication(s.kind);
    });
    EXPECT_EQ(k.size(), 8u) << "rank " << r;
  }
  try {
    merge_imported_profiles({profile_[0], profile_[0]});
    ADD_FAILURE() << "two rank-0 profiles merged";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 is in part 1 and part 2"), std::string::npos)
        << e.what();
  }
}

TEST(KinetoGzip, ReadsTheCompressedFileWhenBuiltWithZlib) {
  const auto gz = real_trace("hta-2rank-nccl/sampled_rank-1.json.gz");
  PIPETUNE_REQUIRE_FILE(gz);
  // zlib is required by db/CMakeLists.txt: a build that cannot read .json.gz is a broken build.
  ASSERT_TRUE(chrome_trace_gzip_supported());
  const ImportedProfile p = import_chrome_trace(gz);
  EXPECT_EQ(p.ranks.at(0).rank, 1);
  EXPECT_EQ(p.trace.spans.size(), 4676u);  // every X event of rank 1
  std::size_t kernels = 0;
  for (const profiler::KernelRecord& k : p.kernels) kernels += k.grid[0] > 0;
  EXPECT_EQ(kernels, 1104u);
}

}  // namespace
}  // namespace pipetune::db
