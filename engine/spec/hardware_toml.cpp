#include "engine/spec/hardware_toml.hpp"

#include <cstdio>
#include <sstream>

namespace pipetune::spec {

namespace {

std::string number(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

// TOML basic string: quotes, backslashes and control characters escaped.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", static_cast<unsigned>(c));
      out += esc;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

}  // namespace

std::string hardware_toml(const HardwareSpec& hw, const std::string& header) {
  std::ostringstream out;
  std::istringstream lines(header);
  for (std::string line; std::getline(lines, line);) out << "# " << line << "\n";
  out << "description = " << quoted(hw.description) << "\n";
  out << "device = \"" << (hw.device == DeviceKind::Cpu ? "cpu" : "gpu") << "\"\n";
  out << "peak_flops = " << number(hw.peak_flops) << "\n";
  if (hw.fp32_peak_flops > 0.0) out << "fp32_peak_flops = " << number(hw.fp32_peak_flops) << "\n";
  out << "hbm_bytes = " << hw.hbm_bytes << "\n";
  out << "hbm_bandwidth = " << number(hw.hbm_bandwidth) << "\n";
  out << "intra_node_bandwidth = " << number(hw.intra_node_bandwidth) << "\n";
  out << "inter_node_bandwidth = " << number(hw.inter_node_bandwidth) << "\n";
  out << "devices_per_node = " << hw.devices_per_node << "\n";
  out << "intra_node_latency = " << number(hw.intra_node_latency) << "\n";
  out << "inter_node_latency = " << number(hw.inter_node_latency) << "\n";
  if (hw.special_function_rate > 0.0)
    out << "special_function_rate = " << number(hw.special_function_rate) << "\n";
  out << "\n";
  const HardwareEfficiency& e = hw.efficiency;
  out << "[efficiency]\n";
  out << "gemm = " << number(e.gemm) << "\n";
  out << "gemm_half_flops = " << number(e.gemm_half_flops) << "\n";
  out << "attention = " << number(e.attention) << "\n";
  out << "memory = " << number(e.memory) << "\n";
  out << "intra_node_bus = " << number(e.intra_node_bus) << "\n";
  out << "inter_node_bus = " << number(e.inter_node_bus) << "\n";
  // Only where given: 0 means "as intra_node_bus", and the file reader takes fractions in (0, 1].
  if (e.all_reduce_bus > 0.0) out << "all_reduce_bus = " << number(e.all_reduce_bus) << "\n";
  if (e.all_gather_bus > 0.0) out << "all_gather_bus = " << number(e.all_gather_bus) << "\n";
  if (e.reduce_scatter_bus > 0.0)
    out << "reduce_scatter_bus = " << number(e.reduce_scatter_bus) << "\n";
  return out.str();
}

}  // namespace pipetune::spec
