#include "engine/spec/hardware_toml.hpp"

#include <sstream>

#include "engine/spec/toml_text.hpp"

namespace pipetune::spec {

namespace {

using detail::toml_number;
using detail::toml_string;

// The keys of a hardware file after its name, then its [efficiency] table under the header
// `efficiency_header`; figures with `digits` significant digits (0: exact).
void write_hardware_keys(std::ostream& out, const HardwareSpec& hw,
                         const std::string& efficiency_header, int digits) {
  const auto number = [digits](double v) { return toml_number(v, digits); };
  out << "description = " << toml_string(hw.description, "the hardware's description") << "\n";
  out << "device = \"" << (hw.device == DeviceKind::Cpu ? "cpu" : "gpu") << "\"\n";
  out << "peak_flops = " << number(hw.peak_flops) << "\n";
  if (hw.fp32_peak_flops > 0.0) out << "fp32_peak_flops = " << number(hw.fp32_peak_flops) << "\n";
  out << "hbm_bytes = " << hw.hbm_bytes << "\n";
  out << "hbm_bandwidth = " << number(hw.hbm_bandwidth) << "\n";
  out << "intra_node_bandwidth = " << number(hw.intra_node_bandwidth) << "\n";
  out << "inter_node_bandwidth = " << number(hw.inter_node_bandwidth) << "\n";
  out << "devices_per_node = " << hw.devices_per_node << "\n";
  if (hw.host_bandwidth > 0.0) out << "host_bandwidth = " << number(hw.host_bandwidth) << "\n";
  if (hw.host_memory_bytes > 0) out << "host_memory_bytes = " << hw.host_memory_bytes << "\n";
  out << "intra_node_latency = " << number(hw.intra_node_latency) << "\n";
  out << "inter_node_latency = " << number(hw.inter_node_latency) << "\n";
  if (hw.special_function_rate > 0.0)
    out << "special_function_rate = " << number(hw.special_function_rate) << "\n";
  out << "\n";
  const HardwareEfficiency& e = hw.efficiency;
  out << efficiency_header << "\n";
  out << "gemm = " << number(e.gemm) << "\n";
  out << "gemm_half_flops = " << number(e.gemm_half_flops) << "\n";
  out << "attention = " << number(e.attention) << "\n";
  out << "memory = " << number(e.memory) << "\n";
  out << "intra_node_bus = " << number(e.intra_node_bus) << "\n";
  out << "inter_node_bus = " << number(e.inter_node_bus) << "\n";
  out << "host_link = " << number(e.host_link) << "\n";
  // Only where given: 0 means "as intra_node_bus", and the file reader takes fractions in (0, 1].
  if (e.all_reduce_bus > 0.0) out << "all_reduce_bus = " << number(e.all_reduce_bus) << "\n";
  if (e.all_gather_bus > 0.0) out << "all_gather_bus = " << number(e.all_gather_bus) << "\n";
  if (e.reduce_scatter_bus > 0.0)
    out << "reduce_scatter_bus = " << number(e.reduce_scatter_bus) << "\n";
}

}  // namespace

std::string hardware_toml(const HardwareSpec& hw, const std::string& header) {
  std::ostringstream out;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) out << "# " << line << "\n";
  write_hardware_keys(out, hw, "[efficiency]", 9);
  return out.str();
}

std::string hardware_toml_table(const HardwareSpec& hw, const std::string& table) {
  std::ostringstream out;
  out << "[" << table << "]\n";
  out << "name = " << toml_string(hw.name, "the hardware's name") << "\n";
  write_hardware_keys(out, hw, "[" + table + ".efficiency]", 0);
  return out.str();
}

}  // namespace pipetune::spec
