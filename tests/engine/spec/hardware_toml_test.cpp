// Hardware files written by spec::hardware_toml load back to the same figures; `device` reads
// "gpu" and "cpu" and names anything else.
#include "engine/spec/hardware_toml.hpp"

#include <gtest/gtest.h>

#include "engine/errors.hpp"
#include "engine/spec/spec.hpp"

namespace pipetune::spec {
namespace {

void expect_close(double want, double got, const char* what) {
  EXPECT_NEAR(got, want, 1e-8 * std::abs(want)) << what;
}

TEST(HardwareToml, EveryFigureLoadsBack) {
  HardwareSpec hw = load_hardware("a100-80gb");
  hw.description = "quote \" and backslash \\ kept";
  hw.device = DeviceKind::Cpu;
  hw.intra_node_latency = 1.234567891e-7;
  hw.special_function_rate = 2.5e8;
  hw.fp32_peak_flops = 1.95e13;
  hw.efficiency.gemm_half_flops = 3.14159265358979e6;
  const std::string text = hardware_toml(hw, "first line\nsecond line");
  EXPECT_EQ(text.rfind("# first line\n# second line\n", 0), 0u) << text;
  const HardwareSpec back = parse_hardware(text, "written");
  EXPECT_EQ(back.description, hw.description);
  EXPECT_EQ(back.device, DeviceKind::Cpu);
  EXPECT_EQ(back.hbm_bytes, hw.hbm_bytes);
  EXPECT_EQ(back.devices_per_node, hw.devices_per_node);
  expect_close(hw.peak_flops, back.peak_flops, "peak_flops");
  expect_close(hw.hbm_bandwidth, back.hbm_bandwidth, "hbm_bandwidth");
  expect_close(hw.intra_node_bandwidth, back.intra_node_bandwidth, "intra_node_bandwidth");
  expect_close(hw.inter_node_bandwidth, back.inter_node_bandwidth, "inter_node_bandwidth");
  expect_close(hw.intra_node_latency, back.intra_node_latency, "intra_node_latency");
  expect_close(hw.inter_node_latency, back.inter_node_latency, "inter_node_latency");
  expect_close(hw.special_function_rate, back.special_function_rate, "special_function_rate");
  expect_close(hw.fp32_peak_flops, back.fp32_peak_flops, "fp32_peak_flops");
  expect_close(hw.efficiency.gemm, back.efficiency.gemm, "gemm");
  expect_close(hw.efficiency.gemm_half_flops, back.efficiency.gemm_half_flops, "half");
  expect_close(hw.efficiency.attention, back.efficiency.attention, "attention");
  expect_close(hw.efficiency.memory, back.efficiency.memory, "memory");
  expect_close(hw.efficiency.intra_node_bus, back.efficiency.intra_node_bus, "intra bus");
  expect_close(hw.efficiency.inter_node_bus, back.efficiency.inter_node_bus, "inter bus");
  // Per-collective bus fractions are written only where given (0: as intra_node_bus).
  EXPECT_EQ(text.find("all_gather_bus"), std::string::npos) << text;
  EXPECT_EQ(back.efficiency.all_reduce_bus, 0.0);
  EXPECT_EQ(back.efficiency.all_gather_bus, 0.0);
  EXPECT_EQ(back.efficiency.reduce_scatter_bus, 0.0);
  hw.efficiency.all_reduce_bus = 0.25;
  hw.efficiency.all_gather_bus = 0.875;
  hw.efficiency.reduce_scatter_bus = 1.0 / 3.0;
  const HardwareSpec collectives = parse_hardware(hardware_toml(hw), "written");
  expect_close(0.25, collectives.efficiency.all_reduce_bus, "all_reduce_bus");
  expect_close(0.875, collectives.efficiency.all_gather_bus, "all_gather_bus");
  expect_close(1.0 / 3.0, collectives.efficiency.reduce_scatter_bus, "reduce_scatter_bus");
}

TEST(HardwareToml, CollectiveBusFractionsOutsideZeroToOneAreNamed) {
  const std::string base =
      "peak_flops = 1e12\nhbm_bytes = 1000\nhbm_bandwidth = 1e9\nintra_node_bandwidth = 1e9\n"
      "inter_node_bandwidth = 1e9\n[efficiency]\n";
  for (const char* bad :
       {"all_gather_bus = 1.5\n", "reduce_scatter_bus = 0\n", "all_reduce_bus = -0.5\n"}) {
    try {
      parse_hardware(base + bad, "h");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const SpecError& e) {
      const std::string what = e.what();
      const std::string key = std::string(bad).substr(0, std::string(bad).find(' '));
      EXPECT_NE(what.find("efficiency." + key), std::string::npos) << what;
    }
  }
}

TEST(HardwareToml, DeviceDefaultsToGpuAndRejectsOthers) {
  const std::string base =
      "peak_flops = 1e12\nhbm_bytes = 1000\nhbm_bandwidth = 1e9\nintra_node_bandwidth = 1e9\n"
      "inter_node_bandwidth = 1e9\n";
  EXPECT_EQ(parse_hardware(base, "h").device, DeviceKind::Gpu);
  EXPECT_EQ(parse_hardware(base + "device = \"gpu\"\n", "h").device, DeviceKind::Gpu);
  EXPECT_EQ(parse_hardware(base + "device = \"cpu\"\n", "h").device, DeviceKind::Cpu);
  try {
    parse_hardware(base + "device = \"tpu\"\n", "h");
    FAIL() << "device = \"tpu\" was accepted";
  } catch (const SpecError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("device"), std::string::npos) << what;
    EXPECT_NE(what.find("tpu"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace pipetune::spec
