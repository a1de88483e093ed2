// The text Gantt draws exactly the columns it is asked for (a width of 1 once drew 10).
#include "profiler/text_gantt.hpp"

#include <gtest/gtest.h>

#include <sstream>
#include <string>

namespace pipetune::profiler {
namespace {

Trace two_ops() {
  Trace t;
  const std::int32_t lane = t.lane(0, Stream::Compute);
  Span f;
  f.lane = lane;
  f.kind = SpanKind::F;
  f.microbatch = 0;
  f.start_ns = 0;
  f.end_ns = 1000;
  Span b = f;
  b.kind = SpanKind::B;
  b.start_ns = 3000;
  b.end_ns = 5000;
  t.spans = {f, b};
  return t;
}

TEST(TextGantt, EveryRowIsAsWideAsAsked) {
  for (int width : {1, 2, 5, 9, 10, 11, 100}) {
    TextGanttOptions o;
    o.width = width;
    std::istringstream text(render_text_gantt(two_ops(), o));
    std::string first;
    std::getline(text, first);
    const std::size_t open = first.find('|'), close = first.rfind('|');
    ASSERT_NE(open, close) << first;
    EXPECT_EQ(static_cast<int>(close - open - 1), width) << first;
  }
}

}  // namespace
}  // namespace pipetune::profiler
