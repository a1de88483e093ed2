#include "profiler/units.hpp"

#include <cmath>
#include <cstdio>
#include <iterator>

namespace pipetune::profiler {

namespace {

std::string printed(const char* format, double value, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value, unit);
  return buf;
}

}  // namespace

std::string format_seconds(double s) {
  if (!std::isfinite(s)) return printed("%f%s", s, "");  // "inf", "-inf", "nan": never a unit
  const double a = std::abs(s);
  if (a == 0.0) return "0";
  struct Unit {
    double seconds;
    const char* name;
    int decimals;
  };
  static constexpr Unit kUnits[] = {
      {1.0, "s", 3}, {1e-3, "ms", 3}, {1e-6, "us", 3}, {1e-9, "ns", 0}};
  constexpr std::size_t kLast = std::size(kUnits) - 1;
  std::size_t u = 0;
  while (u < kLast && a < kUnits[u].seconds) ++u;
  // 999.9996 us rounds to 1000.000 us: that is 1 ms.
  const double scale = std::pow(10.0, kUnits[u].decimals);
  if (u > 0 && std::round(a / kUnits[u].seconds * scale) / scale >= 1000.0) --u;
  char digits[64];
  std::snprintf(digits, sizeof digits, "%.*f", kUnits[u].decimals, s / kUnits[u].seconds);
  std::string text = digits;
  // Trailing zero decimals say nothing: "949.000 us" is "949 us", "1.500 s" is "1.5 s".
  if (text.find('.') != std::string::npos) {
    text.erase(text.find_last_not_of('0') + 1);
    if (text.back() == '.') text.pop_back();
  }
  return text + " " + kUnits[u].name;
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
