#include "cli/calibrate_local.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/json_output.hpp"
#include "cli/stdout_status.hpp"
#include "cli/workspace_cli.hpp"
#include "engine/errors.hpp"
#include "engine/runtime/machine_benchmark.hpp"
#include "engine/spec/hardware_toml.hpp"
#include "profiler/units.hpp"
#include "tuner/calibration/cpu_profile.hpp"

namespace pipetune::cli {

namespace {

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) != 0) return "this machine";
  return name;
}

nlohmann::json measurements_json(const runtime::MachineMeasurements& m) {
  nlohmann::json gemm = nlohmann::json::array(), attention = nlohmann::json::array();
  for (const auto& g : m.gemm)
    gemm.push_back({{"m", g.m}, {"k", g.k}, {"n", g.n}, {"seconds", g.seconds}});
  for (const auto& t : m.attention)
    attention.push_back({{"batch", t.batch},
                         {"heads", t.heads},
                         {"seq", t.seq},
                         {"head_dim", t.head_dim},
                         {"forward_seconds", t.forward_seconds},
                         {"backward_seconds", t.backward_seconds}});
  return {{"gemm", gemm},
          {"attention", attention},
          {"memory_bandwidth", m.memory_bandwidth},
          {"special_function_rate", m.special_function_rate},
          {"transfer_bandwidth", m.transfer_bandwidth},
          {"transfer_latency", m.transfer_latency},
          {"collective_bytes", m.collective_bytes},
          {"all_reduce_seconds", m.all_reduce_seconds},
          {"all_gather_seconds", m.all_gather_seconds},
          {"reduce_scatter_seconds", m.reduce_scatter_seconds},
          {"memory_bytes", m.memory_bytes}};
}

nlohmann::json hardware_json(const spec::HardwareSpec& hw) {
  return {{"peak_flops", hw.peak_flops},
          {"hbm_bytes", hw.hbm_bytes},
          {"hbm_bandwidth", hw.hbm_bandwidth},
          {"intra_node_bandwidth", hw.intra_node_bandwidth},
          {"intra_node_latency", hw.intra_node_latency},
          {"special_function_rate", hw.special_function_rate},
          {"devices_per_node", hw.devices_per_node},
          {"efficiency",
           {{"gemm", hw.efficiency.gemm},
            {"gemm_half_flops", hw.efficiency.gemm_half_flops},
            {"attention", hw.efficiency.attention},
            {"memory", hw.efficiency.memory},
            {"intra_node_bus", hw.efficiency.intra_node_bus},
            {"inter_node_bus", hw.efficiency.inter_node_bus},
            {"all_reduce_bus", hw.efficiency.all_reduce_bus},
            {"all_gather_bus", hw.efficiency.all_gather_bus},
            {"reduce_scatter_bus", hw.efficiency.reduce_scatter_bus}}}};
}

// The hardware file, with a header saying how it was made and how to refine it.
void write_profile(const LocalCalibrateArgs& a, const runtime::MachineMeasurements& m,
                   const spec::HardwareSpec& hw) {
  const std::string header =
      "Written by `pipetune calibrate --local" + std::string(a.quick ? " --quick" : "") +
      " --threads " + std::to_string(m.threads_per_device) + " --devices " +
      std::to_string(m.devices) +
      "`: micro-benchmarks of the engine's own\n"
      "kernels with every device busy at once (engine/runtime/machine_benchmark.hpp), fitted\n"
      "as tuner/calibration/cpu_profile.hpp says (the faster of GEMM and attention and each\n"
      "bandwidth at 0.9 of a peak scaled to match). Refine the compute curves with\n"
      "`pipetune calibrate --hardware THIS_FILE --fit gemm,gemm_half_flops,attention,memory`\n"
      "on short `train --threads 1` runs of two model shapes (tests/bench/cpu_prediction.sh).";
  write_output_file(a.output, spec::hardware_toml(hw, header));
  note_kept("the hardware profile was written to " + a.output);
}

void print_human(const LocalCalibrateArgs& a, const runtime::MachineMeasurements& m,
                 const spec::HardwareSpec& hw) {
  const runtime::GemmSample* largest = m.gemm.empty() ? nullptr : &m.gemm.back();
  const double large = largest == nullptr ? 0.0
                                          : 2.0 * static_cast<double>(largest->m) *
                                                static_cast<double>(largest->k) *
                                                static_cast<double>(largest->n) / largest->seconds;
  std::printf("measured %d device(s) of %d thread(s) at once with the engine's CPU kernels\n",
              m.devices, m.threads_per_device);
  std::printf(
      "GEMM        %8.2f GFLOP/s on the largest product, %.2f GFLOP/s asymptotic, "
      "%.3g FLOPs per-call overhead\n",
      large / 1e9, hw.peak_flops * hw.efficiency.gemm / 1e9, hw.efficiency.gemm_half_flops);
  std::printf("attention   %8.2f GFLOP/s (cost-model FLOPs, forward + backward)\n",
              hw.peak_flops * hw.efficiency.attention / 1e9);
  std::printf("memory      %8.2f GB/s per device (add)\n", m.memory_bandwidth / 1e9);
  std::printf("exp         %8.2f G/s (cross-entropy kernels)\n", m.special_function_rate / 1e9);
  std::printf("transfer    %8.2f GB/s between two ranks, latency %s\n", m.transfer_bandwidth / 1e9,
              profiler::format_seconds(m.transfer_latency).c_str());
  if (m.collective_bytes > 0) {
    const double bw = hw.intra_node_bandwidth;
    std::printf(
        "collectives %8.2f / %.2f / %.2f GB/s bus bandwidth all-reduce / all-gather / "
        "reduce-scatter over %d devices (%s buffer)\n",
        bw * hw.efficiency.all_reduce_bus / 1e9, bw * hw.efficiency.all_gather_bus / 1e9,
        bw * hw.efficiency.reduce_scatter_bus / 1e9, m.devices,
        profiler::format_bytes(static_cast<double>(m.collective_bytes)).c_str());
  }
  std::printf("memory      %s per device\n",
              profiler::format_bytes(static_cast<double>(m.memory_bytes)).c_str());
  if (!a.output.empty())
    std::printf("\nwritten to %s (hardware \"%s\", device = \"cpu\")\n", a.output.c_str(),
                hw.name.c_str());
  else
    std::printf("\n%s", spec::hardware_toml(hw).c_str());
}

}  // namespace

void run_calibrate_local(const LocalCalibrateArgs& a) {
  if (a.threads < 1)
    throw InputError("--threads must be at least 1, got " + std::to_string(a.threads));
  if (a.devices < 0)
    throw InputError("--devices must be >= 0 (0: cores / threads), got " +
                     std::to_string(a.devices));
  if (!a.output.empty()) check_output_file(a.output, a.force);

  runtime::MachineBenchmarkOptions options;
  options.devices = a.devices;
  options.threads_per_device = a.threads;
  options.quick = a.quick;
  const runtime::MachineMeasurements m = runtime::measure_machine(options);

  std::string name = a.name;
  if (name.empty())
    name = a.output.empty() ? "cpu-local" : std::filesystem::path(a.output).stem().string();
  const unsigned cores = std::thread::hardware_concurrency();
  char description[256];
  std::snprintf(description, sizeof description,
                "%s: %d rank(s) of %d thread(s) on %u core(s), the embedded engine's CPU backend",
                host_name().c_str(), m.devices, m.threads_per_device, cores);
  const spec::HardwareSpec hw = tuner::cpu_hardware_profile(m, name, description);

  if (!a.output.empty()) write_profile(a, m, hw);
  if (!a.json) {
    print_human(a, m, hw);
    return;
  }
  nlohmann::json out = {{"name", hw.name},
                        {"devices", m.devices},
                        {"threads_per_device", m.threads_per_device},
                        {"measured", measurements_json(m)},
                        {"hardware", hardware_json(hw)}};
  if (!a.output.empty()) out["output"] = a.output;
  std::printf("%s\n", json_text(out).c_str());
}

}  // namespace pipetune::cli
