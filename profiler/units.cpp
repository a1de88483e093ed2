#include "profiler/units.hpp"

#include <cmath>
#include <cstdio>

namespace pipetune::profiler {

namespace {

std::string printed(const char* format, double value, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value, unit);
  return buf;
}

}  // namespace

std::string format_seconds(double s) {
  const double a = std::abs(s);
  if (a == 0.0) return "0";
  if (a >= 1.0) return printed("%.3f %s", s, "s");
  if (a >= 1e-3) return printed("%.3f %s", s * 1e3, "ms");
  if (a >= 1e-6) return printed("%.3f %s", s * 1e6, "us");
  return printed("%.0f %s", s * 1e9, "ns");
}

std::string format_ns(double ns) {
  return format_seconds(ns * 1e-9);
}

std::string format_bytes(double b) {
  const double a = std::abs(b);
  if (a == 0.0) return "0";
  constexpr double kKiB = 1024.0, kMiB = kKiB * 1024.0, kGiB = kMiB * 1024.0, kTiB = kGiB * 1024.0;
  if (a >= kTiB) return printed("%.2f %s", b / kTiB, "TiB");
  if (a >= kGiB) return printed("%.2f %s", b / kGiB, "GiB");
  if (a >= kMiB) return printed("%.2f %s", b / kMiB, "MiB");
  if (a >= kKiB) return printed("%.2f %s", b / kKiB, "KiB");
  return printed("%.0f %s", b, "B");
}

}  // namespace pipetune::profiler
