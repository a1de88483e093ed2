// A text Gantt chart of a Trace's compute lanes, for terminals and logs.
#pragma once

#include <string>

#include "profiler/trace.hpp"

namespace pipetune::profiler {

struct TextGanttOptions {
  int width = 100;     // columns for the time axis, exactly (at least 1)
  bool labels = true;  // write "F12" inside spans that are wide enough
  // What one second of the trace's clock stands for: "s" (real time) labels the axis as time;
  // any other unit (the simulator's "cost units") labels it with plain numbers of that unit.
  std::string time_unit = "s";
};

// One line per compute lane ("rank 0 |FFFF....BBBB|"), idle time as '.', a time axis and a
// legend. Chunk 0 ops are upper case (F, B, W), chunk 1 and above lower case; a fused backward is
// 'X'/'x', vocabulary passes S, T, I (IF) and J (IB).
std::string render_text_gantt(const Trace& trace, const TextGanttOptions& options = {});

}  // namespace pipetune::profiler
