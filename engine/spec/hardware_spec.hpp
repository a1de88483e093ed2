// HardwareSpec: one accelerator kind and the node it usually sits in. All figures are in base
// units (FLOP/s, bytes, bytes/s, seconds) so that cost formulas need no unit conversions.
#pragma once

#include <cstdint>
#include <string>

namespace pipetune::spec {

struct HardwareSpec {
  std::string name;
  std::string description;
  double peak_flops = 0.0;            // dense BF16 FLOP/s (no sparsity)
  std::int64_t hbm_bytes = 0;         // device memory
  double hbm_bandwidth = 0.0;         // bytes/s
  double intra_node_bandwidth = 0.0;  // scale-up link (NVLink...), bytes/s per GPU per direction
  double inter_node_bandwidth = 0.0;  // scale-out NIC, bytes/s per GPU per direction
  int devices_per_node = 8;
  // Start-up latency of one transfer. Order-of-magnitude defaults (NCCL small-message latency
  // is a few microseconds over NVLink and around ten across a network); calibrate by measurement.
  double intra_node_latency = 3e-6;   // seconds
  double inter_node_latency = 10e-6;  // seconds
};

}  // namespace pipetune::spec
