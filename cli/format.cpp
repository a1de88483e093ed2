#include "cli/format.hpp"

#include "db/store/run_name.hpp"
#include "engine/errors.hpp"
#include "profiler/units.hpp"

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace pipetune::cli {

std::string human_time(double t, const std::string& unit) {
  if (unit != "s") {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.4g", t);
    return buf;
  }
  return profiler::format_seconds(t);
}

std::string shown_text(const std::string& text) {
  return db::printable_text(text);
}

std::string human_bytes(double b) {
  return profiler::format_bytes(b);
}

std::string shown_number(double value) {
  char buf[32];  // the shortest form of any double takes at most 24
  return std::string(buf, std::to_chars(buf, buf + sizeof buf, value).ptr);
}

int terminal_width() {
  if (!::isatty(STDOUT_FILENO)) return 100;
  if (const char* c = std::getenv("COLUMNS")) {
    const int w = std::atoi(c);
    if (w > 40) return w - 12;
  }
  return 100;
}

void check_gantt_width(int width) {
  if (width < 0 || width > 10000)
    throw InputError("--width must be 1 to 10000 columns (0: the terminal's), not " +
                     std::to_string(width));
}

}  // namespace pipetune::cli
