// The synthetic run of the store and timeline benchmarks: it looks like a profiled training
// job, 16 lanes (8 ranks x compute/comm), on each a level of step ranges holding kernels of
// 2-40 us with 0-8 us gaps and, now and then, a long kernel (2 ms): many spans far below a pixel
// at a whole-run zoom, a few above.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "db/store/run_writer.hpp"
#include "profiler/trace.hpp"

namespace pipetune::bench {

constexpr int kRanks = 8;
constexpr int kLanes = kRanks * 2;
constexpr std::int64_t kKernelsPerRange = 200;

// Generates the synthetic run in parts of about `part_spans` spans, lane by lane in time order
// (as a recorder streams them), calling sink(part) for each.
class SyntheticRun {
 public:
  SyntheticRun(std::int64_t spans, std::uint64_t seed) : total_(spans), rng_(seed) {}

  template <typename Sink>
  void generate(std::int64_t part_spans, Sink&& sink) {
    const std::int64_t per_lane = total_ / kLanes;
    std::vector<std::int64_t> clock(kLanes, 0);
    std::vector<std::int64_t> done(kLanes, 0);
    // Round robin over lanes, a slice of each lane per part: parts stay in start order per lane.
    const std::int64_t slice = std::max<std::int64_t>(kKernelsPerRange, part_spans / kLanes);
    bool more = true;
    while (more) {
      more = false;
      profiler::Trace part;
      const std::uint32_t kernel_name = part.intern("sm90_xmma_gemm_bf16_kernel");
      const std::uint32_t nccl_name = part.intern("ncclDevKernel_SendRecv");
      for (int lane = 0; lane < kLanes; ++lane) {
        const int rank = lane / 2;
        const bool comm = lane % 2 == 1;
        const std::int32_t li =
            part.lane(rank, comm ? profiler::Stream::Comm : profiler::Stream::Compute);
        std::int64_t n = std::min(slice, per_lane - done[static_cast<std::size_t>(lane)]);
        std::int64_t& t = clock[static_cast<std::size_t>(lane)];
        while (n > 0) {
          const std::int64_t kernels = std::min<std::int64_t>(kKernelsPerRange - 1, n - 1);
          profiler::Span range;
          range.lane = li;
          range.kind = profiler::SpanKind::Range;
          range.start_ns = t;
          const std::size_t range_at = part.spans.size();
          part.spans.push_back(range);
          for (std::int64_t k = 0; k < kernels; ++k) {
            profiler::Span s;
            s.lane = li;
            s.kind = comm ? profiler::SpanKind::Recv : profiler::SpanKind::Kernel;
            s.name = comm ? nccl_name : kernel_name;
            s.start_ns = t + static_cast<std::int64_t>(rng_() % 8000);
            const bool long_kernel = rng_() % 1000 == 0;
            s.end_ns = s.start_ns + (long_kernel ? 2'000'000 : 2000 + rng_() % 38000);
            t = s.end_ns;
            part.spans.push_back(s);
          }
          t += 1000;
          part.spans[range_at].end_ns = t;
          t += 5000;
          n -= kernels + 1;
          done[static_cast<std::size_t>(lane)] += kernels + 1;
        }
        if (done[static_cast<std::size_t>(lane)] < per_lane) more = true;
      }
      sink(std::move(part));
    }
  }

 private:
  std::int64_t total_;
  std::mt19937_64 rng_;
};

// A workspace file of this process in the temporary folder: pipetune_<tag>_<pid>.db.
inline std::string temp_workspace(const std::string& tag) {
  return (std::filesystem::temp_directory_path() /
          ("pipetune_" + tag + "_" + std::to_string(::getpid()) + ".db"))
      .string();
}

// Removes a workspace and SQLite's files beside it.
inline void remove_workspace(const std::string& path) {
  std::error_code ec;
  for (const char* suffix : {"", "-wal", "-shm", "-journal"})
    std::filesystem::remove(path + suffix, ec);
}

// A synthetic run written through RunWriter into a workspace of its own (temp_workspace), in
// parts of 100,000 spans; the workspace is removed with it.
struct StoredSyntheticRun {
  std::string path;
  std::int64_t run = 0;
  std::int64_t end_ns = 0;      // the last span's end
  double ingest_seconds = 0.0;  // appending and finishing

  StoredSyntheticRun(const std::string& tag, std::int64_t spans, std::uint64_t seed)
      : path(temp_workspace(tag)) {
    remove_workspace(path);
    const auto t0 = std::chrono::steady_clock::now();
    db::RunWriter writer(path, {profiler::TraceKind::Measured, "big", "", ""});
    SyntheticRun(spans, seed).generate(100000, [&](profiler::Trace p) {
      for (const auto& s : p.spans) end_ns = std::max(end_ns, s.end_ns);
      writer.append(std::move(p));
    });
    writer.finish(db::RunStatus::Complete);
    run = writer.run_id();
    ingest_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  ~StoredSyntheticRun() { remove_workspace(path); }
  StoredSyntheticRun(const StoredSyntheticRun&) = delete;
  StoredSyntheticRun& operator=(const StoredSyntheticRun&) = delete;
};

}  // namespace pipetune::bench
