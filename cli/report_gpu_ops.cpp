#include "cli/report_gpu_ops.hpp"

#include <cstdio>
#include <string>

#include "cli/format.hpp"
#include "profiler/analysis/gpu_op_time.hpp"

namespace pipetune::cli {

namespace {

namespace an = profiler::analysis;
using profiler::KernelClass;
using profiler::kKernelClassCount;
using profiler::SpanKind;

std::vector<an::GpuOpTime> op_times(const LoadedRun& r) {
  return an::gpu_op_time(r.stored.kernels, r.window);
}

// Classes (or phases) with time on any rank, in enum order.
template <std::size_t N, class Get>
std::vector<int> used(const std::vector<an::GpuOpTime>& times, Get get) {
  std::vector<int> out;
  for (int i = 0; i < static_cast<int>(N); ++i)
    for (const an::GpuOpTime& t : times)
      if (get(t, i) > 0) {
        out.push_back(i);
        break;
      }
  return out;
}

}  // namespace

void print_gpu_op_time(const LoadedRun& r) {
  const std::vector<an::GpuOpTime> times = op_times(r);
  if (times.empty()) return;
  const std::string& u = r.time_unit;
  const auto classes = used<kKernelClassCount>(
      times, [](const an::GpuOpTime& t, int i) { return t.class_ns[static_cast<std::size_t>(i)]; });
  std::printf(
      "\nGPU time by kind of work (kernel durations summed; op = the range that launched "
      "it):\n%-5s",
      "rank");
  for (int c : classes)
    std::printf(" %13s",
                std::string(profiler::kernel_class_name(static_cast<KernelClass>(c))).c_str());
  std::printf(" %13s\n", "attributed");
  for (const an::GpuOpTime& t : times) {
    std::printf("%-5d", t.rank);
    for (int c : classes)
      std::printf(" %13s",
                  human_time(seconds_of(t.class_ns[static_cast<std::size_t>(c)]), u).c_str());
    std::printf(" %12.1f%%\n", t.activities > 0 ? 100.0 * static_cast<double>(t.attributed) /
                                                      static_cast<double>(t.activities)
                                                : 0.0);
  }
  const auto phases = used<profiler::kSpanKindCount>(
      times, [](const an::GpuOpTime& t, int i) { return t.phase_ns[static_cast<std::size_t>(i)]; });
  if (phases.empty()) return;
  std::printf("\nGPU compute time by pipeline phase (launched inside the phase's range):\n%-5s",
              "rank");
  for (int p : phases)
    std::printf(" %11s", std::string(profiler::span_kind_name(static_cast<SpanKind>(p))).c_str());
  std::printf(" %11s\n", "outside");
  for (const an::GpuOpTime& t : times) {
    std::printf("%-5d", t.rank);
    for (int p : phases)
      std::printf(" %11s",
                  human_time(seconds_of(t.phase_ns[static_cast<std::size_t>(p)]), u).c_str());
    std::printf(" %11s\n", human_time(seconds_of(t.outside_phase_ns), u).c_str());
  }
}

nlohmann::json gpu_op_time_json(const LoadedRun& r) {
  const std::vector<an::GpuOpTime> times = op_times(r);
  if (times.empty()) return nullptr;
  nlohmann::json out = nlohmann::json::array();
  for (const an::GpuOpTime& t : times) {
    nlohmann::json classes = nlohmann::json::object();
    for (int c = 0; c < kKernelClassCount; ++c) {
      const auto i = static_cast<std::size_t>(c);
      if (t.class_count[i] == 0) continue;
      classes[std::string(profiler::kernel_class_name(static_cast<KernelClass>(c)))] = {
          {"count", t.class_count[i]}, {"time", seconds_of(t.class_ns[i])}};
    }
    nlohmann::json phases = nlohmann::json::object();
    for (int p = 0; p < profiler::kSpanKindCount; ++p)
      if (t.phase_ns[static_cast<std::size_t>(p)] > 0)
        phases[std::string(profiler::span_kind_name(static_cast<SpanKind>(p)))] =
            seconds_of(t.phase_ns[static_cast<std::size_t>(p)]);
    out.push_back({{"rank", t.rank},
                   {"activities", t.activities},
                   {"attributed", t.attributed},
                   {"time", seconds_of(t.total_ns)},
                   {"classes", classes},
                   {"phases", phases},
                   {"outside_phase", seconds_of(t.outside_phase_ns)}});
  }
  return out;
}

}  // namespace pipetune::cli
