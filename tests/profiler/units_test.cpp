// profiler/units: the one rounding rule for durations and sizes, unit boundaries included.
#include "profiler/units.hpp"

#include <gtest/gtest.h>

namespace pipetune::profiler {
namespace {

TEST(Units, SecondsUseThreeDecimalsInTheLargestUnitAboveOne) {
  EXPECT_EQ(format_seconds(0.0), "0");
  EXPECT_EQ(format_seconds(1.0), "1.000 s");
  EXPECT_EQ(format_seconds(12.3456), "12.346 s");
  EXPECT_EQ(format_seconds(0.999), "999.000 ms");
  EXPECT_EQ(format_seconds(0.0123456), "12.346 ms");
  EXPECT_EQ(format_seconds(1e-3), "1.000 ms");
  EXPECT_EQ(format_seconds(3e-6), "3.000 us");
  EXPECT_EQ(format_seconds(8.5e-7), "850 ns");
  EXPECT_EQ(format_seconds(-0.015), "-15.000 ms");
  EXPECT_EQ(format_ns(15e6), "15.000 ms");
  EXPECT_EQ(format_ns(850.0), "850 ns");
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
