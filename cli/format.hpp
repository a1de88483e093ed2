// Human-readable numbers and terminal facts shared by the commands.
#pragma once

#include <cstdint>
#include <string>

namespace pipetune::cli {

// profiler::format_seconds for seconds; plain numbers for other units (cost units).
std::string human_time(double t, const std::string& unit = "s");
// Stored text (run names) as a terminal shows it safely: control characters and bytes that are
// not UTF-8 as \xNN (db::printable_text).
std::string shown_text(const std::string& text);
// A stored time in nanoseconds in seconds, the unit of the JSON reports.
inline double seconds_of(std::int64_t ns) {
  return static_cast<double>(ns) * 1e-9;
}
// profiler::format_bytes.
std::string human_bytes(double bytes);
// A number a user gave, in the fewest digits that read back to it (1.5, not 1.500000), for
// messages that quote it.
std::string shown_number(double value);
// Columns for charts: the terminal's width when stdout is one, else 100.
int terminal_width();
// --width of a text Gantt chart: 0 (the terminal's) or 1 to 10000 columns, else InputError
// (the chart's output grows with it).
void check_gantt_width(int width);

}  // namespace pipetune::cli
