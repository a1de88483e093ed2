#include "profiler/trace_codec.hpp"

#include <cstdint>
#include <stdexcept>

#include "profiler/byte_codec.hpp"

namespace pipetune::profiler {

namespace {

constexpr std::uint32_t kMagic = 0x50545443;  // "PTTC"
constexpr std::uint32_t kVersion = 1;

}  // namespace

std::string encode_trace(const Trace& t) {
  ByteWriter w;
  w.value(kMagic);
  w.value(kVersion);
  w.value(t.kind);
  w.value(static_cast<std::uint64_t>(t.lanes.size()));
  for (const Lane& l : t.lanes) {
    w.value(l.rank);
    w.value(l.stream);
    w.value(l.index);
    w.text(l.name);
  }
  w.values(t.spans);
  w.values(t.memory);
  w.values(t.counters);
  w.values(t.steps);
  w.value(static_cast<std::uint64_t>(t.names.size()));
  for (const std::string& n : t.names) w.text(n);
  return w.take();
}

Trace decode_trace(const std::string& bytes) {
  ByteReader r(bytes, "decode_trace");
  if (r.value<std::uint32_t>() != kMagic) throw std::runtime_error("decode_trace: not a trace");
  const auto version = r.value<std::uint32_t>();
  if (version != kVersion)
    throw std::runtime_error("decode_trace: version " + std::to_string(version) +
                             ", this build reads " + std::to_string(kVersion));
  Trace t;
  t.kind = r.value<TraceKind>();
  t.lanes.resize(r.count(sizeof(std::int32_t) * 2));
  for (Lane& l : t.lanes) {
    l.rank = r.value<std::int32_t>();
    l.stream = r.value<Stream>();
    l.index = r.value<std::int32_t>();
    l.name = r.text();
  }
  t.spans = r.values<Span>();
  t.memory = r.values<MemorySample>();
  t.counters = r.values<CounterSample>();
  t.steps = r.values<StepMetric>();
  const std::size_t names = r.count(sizeof(std::uint64_t));
  t.names.clear();
  for (std::size_t i = 0; i < names; ++i) t.names.push_back(r.text());
  r.expect_end();
  return t;
}

}  // namespace pipetune::profiler
