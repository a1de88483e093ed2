// Human-readable numbers and terminal facts shared by the commands.
#pragma once

#include <string>

namespace pipetune::cli {

// profiler::format_seconds for seconds; plain numbers for other units (cost units).
std::string human_time(double t, const std::string& unit = "s");
// profiler::format_bytes.
std::string human_bytes(double bytes);
// Columns for charts: the terminal's width when stdout is one, else 100.
int terminal_width();

}  // namespace pipetune::cli
