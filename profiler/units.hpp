// Durations and sizes as every front end shows them: one rounding rule, so the CLI, the GUI's
// tables and the timeline print the same figure the same way.
#pragma once

#include <string>

namespace pipetune::profiler {

// The largest unit that keeps the value >= 1 once rounded (s, ms, us; below a microsecond ns),
// with at most three decimals and no trailing zero decimals, so a figure never shows digits of
// a smaller unit that are all zero: "1.234 s", "12.345 ms", "12.3 ms", "949 us" (not
// "949.000 us"), "850 ns"; 999.9996 us is "1 ms". "0" for zero; negative values keep their sign;
// inf and nan print as "inf" and "nan" with no unit.
std::string format_seconds(double seconds);
std::string format_ns(double ns);  // the same for nanoseconds
// Two decimals in the largest binary unit that keeps the value >= 1: "1.50 GiB", "12.00 MiB",
// "3.25 KiB"; below a KiB "512 B"; "0" for zero.
std::string format_bytes(double bytes);

}  // namespace pipetune::profiler
