// A HardwareSpec as the text of a hardware file (what load.cpp reads back): what
// `pipetune calibrate` writes. Numbers keep 9 significant digits, so a written file loads back
// to the same figures to within 1e-8 relative.
#pragma once

#include <string>

#include "engine/spec/hardware_spec.hpp"

namespace pipetune::spec {

// `header` is written first, each of its lines as a `# ` comment.
std::string hardware_toml(const HardwareSpec& hardware, const std::string& header = "");

// The same keys, with the name, as the table `table` of a larger file ("cluster.hardware" gives
// [cluster.hardware] and [cluster.hardware.efficiency]), every figure exact: the spec reads back
// equal. InputError when a name or description is not UTF-8.
std::string hardware_toml_table(const HardwareSpec& hardware, const std::string& table);

}  // namespace pipetune::spec
