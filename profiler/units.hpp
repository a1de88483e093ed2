// Durations and sizes as every front end shows them: one rounding rule, so the CLI, the GUI's
// tables and the timeline print the same figure the same way.
#pragma once

#include <string>

namespace pipetune::profiler {

// Three decimals in the largest unit that keeps the value >= 1: "1.234 s", "12.345 ms",
// "3.000 us"; below a microsecond "850 ns"; "0" for zero. Negative values keep their sign.
std::string format_seconds(double seconds);
std::string format_ns(double ns);  // the same for nanoseconds
// Two decimals in the largest binary unit that keeps the value >= 1: "1.50 GiB", "12.00 MiB",
// "3.25 KiB"; below a KiB "512 B"; "0" for zero.
std::string format_bytes(double bytes);

}  // namespace pipetune::profiler
