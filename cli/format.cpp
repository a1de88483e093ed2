#include "cli/format.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace pipetune::cli {

std::string human_time(double t, const std::string& unit) {
  char buf[64];
  if (unit != "s") {
    std::snprintf(buf, sizeof buf, "%.4g", t);
    return buf;
  }
  if (t >= 1.0)
    std::snprintf(buf, sizeof buf, "%.3f s", t);
  else if (t >= 1e-3)
    std::snprintf(buf, sizeof buf, "%.3f ms", t * 1e3);
  else
    std::snprintf(buf, sizeof buf, "%.3f us", t * 1e6);
  return buf;
}

std::string human_bytes(double b) {
  char buf[64];
  if (b >= 1024.0 * 1024 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1024.0 * 1024 * 1024));
  else if (b >= 1024.0 * 1024)
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1024.0 * 1024));
  else
    std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

int terminal_width() {
  if (!::isatty(STDOUT_FILENO)) return 100;
  if (const char* c = std::getenv("COLUMNS")) {
    const int w = std::atoi(c);
    if (w > 40) return w - 12;
  }
  return 100;
}

}  // namespace pipetune::cli
