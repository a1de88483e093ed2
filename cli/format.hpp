// Human-readable numbers and terminal facts shared by the commands.
#pragma once

#include <string>

namespace pipetune::cli {

// "1.234 s", "12.345 ms", "3.000 us" for seconds; plain numbers for other units.
std::string human_time(double t, const std::string& unit = "s");
// "1.50 GiB", "12.00 MiB", "512 B".
std::string human_bytes(double bytes);
// Columns for charts: the terminal's width when stdout is one, else 100.
int terminal_width();

}  // namespace pipetune::cli
