// profiler/units: the one rounding rule for durations and sizes, unit boundaries included.
#include "profiler/units.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

namespace pipetune::profiler {
namespace {

TEST(Units, SecondsUseAtMostThreeDecimalsInTheLargestUnitAboveOne) {
  EXPECT_EQ(format_seconds(0.0), "0");
  EXPECT_EQ(format_seconds(1.0), "1 s");
  EXPECT_EQ(format_seconds(12.3456), "12.346 s");
  EXPECT_EQ(format_seconds(0.999), "999 ms");
  EXPECT_EQ(format_seconds(0.0123456), "12.346 ms");
  EXPECT_EQ(format_seconds(0.0123), "12.3 ms");
  EXPECT_EQ(format_seconds(1e-3), "1 ms");
  EXPECT_EQ(format_seconds(3e-6), "3 us");
  EXPECT_EQ(format_seconds(8.5e-7), "850 ns");
  EXPECT_EQ(format_seconds(-0.015), "-15 ms");
  EXPECT_EQ(format_ns(15e6), "15 ms");
  EXPECT_EQ(format_ns(850.0), "850 ns");
}

// "949.000 us" showed three zero decimals of nanoseconds.
TEST(Units, NoFigureShowsZeroDecimalsOfASmallerUnit) {
  EXPECT_EQ(format_ns(949'000.0), "949 us");
  EXPECT_EQ(format_ns(949'500.0), "949.5 us");
  EXPECT_EQ(format_ns(1'500'000'000.0), "1.5 s");
  EXPECT_EQ(format_ns(12'345'000.0), "12.345 ms");
  for (double ns = 1.0; ns < 1e13; ns *= 1.37) {
    const std::string text = format_ns(std::round(ns));
    EXPECT_EQ(text.find(".000"), std::string::npos) << text;
    EXPECT_NE(text.back(), '.') << text;
    const std::size_t point = text.find('.');
    if (point != std::string::npos) EXPECT_NE(text[text.find(' ') - 1], '0') << text;
  }
}

// A value that rounds to 1000 of a unit is one of the next: "1 ms", never "1000 us".
TEST(Units, RoundingUpToAThousandTakesTheLargerUnit) {
  EXPECT_EQ(format_seconds(999.9996e-6), "1 ms");
  EXPECT_EQ(format_seconds(0.9999996), "1 s");
  EXPECT_EQ(format_ns(999.6), "1 us");
  EXPECT_EQ(format_ns(999.4), "999 ns");
  EXPECT_EQ(format_seconds(-999.9996e-6), "-1 ms");
}

TEST(Units, NonFiniteValuesHaveNoUnit) {
  EXPECT_EQ(format_seconds(std::numeric_limits<double>::infinity()), "inf");
  EXPECT_EQ(format_seconds(std::numeric_limits<double>::quiet_NaN()).find(" s"), std::string::npos);
}

TEST(Units, BytesUseTwoDecimalsInBinaryUnits) {
  EXPECT_EQ(format_bytes(0.0), "0");
  EXPECT_EQ(format_bytes(512.0), "512 B");
  EXPECT_EQ(format_bytes(1024.0), "1.00 KiB");
  EXPECT_EQ(format_bytes(3.25 * 1024.0), "3.25 KiB");
  EXPECT_EQ(format_bytes(12.0 * 1024 * 1024), "12.00 MiB");
  EXPECT_EQ(format_bytes(1.5 * 1024 * 1024 * 1024), "1.50 GiB");
  EXPECT_EQ(format_bytes(2.0 * 1024 * 1024 * 1024 * 1024), "2.00 TiB");
  EXPECT_EQ(format_bytes(-2048.0), "-2.00 KiB");
}

}  // namespace
}  // namespace pipetune::profiler
