// A HardwareSpec as the text of a hardware file (what load.cpp reads back): what
// `pipetune calibrate` writes. Numbers keep 9 significant digits, so a written file loads back
// to the same figures to within 1e-8 relative.
#pragma once

#include <string>

#include "engine/spec/hardware_spec.hpp"

namespace pipetune::spec {

// `header` is written first, each of its lines as a `# ` comment.
std::string hardware_toml(const HardwareSpec& hardware, const std::string& header = "");

}  // namespace pipetune::spec
