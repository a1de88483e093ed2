// `pipetune calibrate --local`: measures this machine with the engine's own CPU kernels
// (engine/runtime/machine_benchmark) and writes a CPU hardware file for the cost model
// (tuner/calibration/cpu_profile), so predict and simulate describe the embedded engine.
#pragma once

#include <string>

namespace pipetune::cli {

struct LocalCalibrateArgs {
  int devices = 0;  // 0: cores / threads
  int threads = 1;  // compute threads per rank
  bool quick = false;
  std::string name;  // default: the output file's stem, else "cpu-local"
  std::string output;
  bool force = false;
  bool json = false;
};

void run_calibrate_local(const LocalCalibrateArgs& args);

}  // namespace pipetune::cli
