// encode_trace / decode_trace: every field of every record comes back, and bytes that are not an
// encoded trace are refused with a message rather than read past their end.
#include "profiler/trace_codec.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

namespace pipetune::profiler {
namespace {

Trace sample() {
  Trace t;
  t.kind = TraceKind::Measured;
  const std::int32_t compute = t.lane(3, Stream::Compute);
  const std::int32_t p2p = t.lane(3, Stream::P2P, 7);
  t.spans.push_back({compute, SpanKind::F, 1, 4, -1, 100, 250, 0});
  t.spans.push_back({p2p, SpanKind::Recv, -1, 4, 2, 90, 99, t.intern("recv")});
  t.memory.push_back({3, MemoryCategory::Activations, 120, 4096});
  t.counters.push_back({3, t.intern("in flight"), 130, 2.5});
  t.steps.push_back({2, 300, 6.25, 1234.5});
  return t;
}

TEST(TraceCodec, RoundTripKeepsEveryField) {
  const Trace t = sample();
  const Trace back = decode_trace(encode_trace(t));
  EXPECT_EQ(back.kind, t.kind);
  ASSERT_EQ(back.lanes.size(), t.lanes.size());
  for (std::size_t i = 0; i < t.lanes.size(); ++i) {
    EXPECT_EQ(back.lanes[i].rank, t.lanes[i].rank);
    EXPECT_EQ(back.lanes[i].stream, t.lanes[i].stream);
    EXPECT_EQ(back.lanes[i].index, t.lanes[i].index);
    EXPECT_EQ(back.lanes[i].name, t.lanes[i].name);
  }
  ASSERT_EQ(back.spans.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const Span &a = t.spans[i], &b = back.spans[i];
    EXPECT_EQ(
        std::tie(a.lane, a.kind, a.chunk, a.microbatch, a.peer, a.start_ns, a.end_ns, a.name),
        std::tie(b.lane, b.kind, b.chunk, b.microbatch, b.peer, b.start_ns, b.end_ns, b.name));
  }
  ASSERT_EQ(back.memory.size(), 1u);
  EXPECT_EQ(back.memory[0].bytes, 4096);
  EXPECT_EQ(back.memory[0].category, MemoryCategory::Activations);
  ASSERT_EQ(back.counters.size(), 1u);
  EXPECT_EQ(back.counters[0].value, 2.5);
  EXPECT_EQ(back.names[back.counters[0].name], "in flight");
  ASSERT_EQ(back.steps.size(), 1u);
  EXPECT_EQ(back.steps[0].loss, 6.25);
  EXPECT_EQ(back.names, t.names);
  EXPECT_EQ(back.span_label(back.spans[1]), "recv");
  // An empty trace too.
  EXPECT_TRUE(decode_trace(encode_trace(Trace{})).spans.empty());
}

TEST(TraceCodec, RefusesWhatIsNotAnEncodedTrace) {
  const std::string bytes = encode_trace(sample());
  const auto error = [](const std::string& b) {
    try {
      decode_trace(b);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(error("garbage!").find("not a trace"), std::string::npos);
  EXPECT_NE(error(bytes.substr(0, bytes.size() - 3)).find("decode_trace"), std::string::npos);
  EXPECT_NE(error(bytes + "x").find("bytes after"), std::string::npos);
  for (std::size_t cut = 0; cut < bytes.size(); ++cut)  // never reads past the end
    EXPECT_NE(error(bytes.substr(0, cut)), "(accepted)") << cut;
}

}  // namespace
}  // namespace pipetune::profiler
