#include "profiler/gpu/kernel_record_codec.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "profiler/byte_codec.hpp"

namespace pipetune::profiler {

namespace {
constexpr std::uint32_t kMagic = 0x4b524e4c;  // "KRNL"
constexpr std::uint32_t kNoPhase = 0xffffffffu;
}  // namespace

std::string encode_kernels(const std::vector<KernelRecord>& kernels) {
  ByteWriter w;
  w.value(kMagic);
  w.value(static_cast<std::uint64_t>(kernels.size()));
  for (const KernelRecord& k : kernels) {
    w.value(k.rank);
    w.value(k.device);
    w.value(k.stream);
    w.value(k.correlation);
    w.value(k.start_ns);
    w.value(k.end_ns);
    w.text(k.name);
    w.value(k.grid);
    w.value(k.block);
    w.value(k.bytes);
    w.text(k.op);
    w.value(k.phase ? static_cast<std::uint32_t>(*k.phase) : kNoPhase);
    w.value(k.microbatch);
    w.value(k.chunk);
  }
  return w.take();
}

std::vector<KernelRecord> decode_kernels(const std::string& bytes) {
  ByteReader r(bytes, "decode_kernels");
  if (r.value<std::uint32_t>() != kMagic)
    throw std::runtime_error("decode_kernels: not kernel records");
  // Each record takes at least its fixed fields.
  std::vector<KernelRecord> out(r.count(64));
  for (KernelRecord& k : out) {
    k.rank = r.value<std::int32_t>();
    k.device = r.value<std::int32_t>();
    k.stream = r.value<std::int32_t>();
    k.correlation = r.value<std::int64_t>();
    k.start_ns = r.value<std::int64_t>();
    k.end_ns = r.value<std::int64_t>();
    k.name = r.text();
    k.grid = r.value<std::array<std::int32_t, 3>>();
    k.block = r.value<std::array<std::int32_t, 3>>();
    k.bytes = r.value<std::int64_t>();
    k.op = r.text();
    const auto phase = r.value<std::uint32_t>();
    if (phase != kNoPhase) {
      if (phase > 255) throw std::runtime_error("decode_kernels: phase " + std::to_string(phase));
      k.phase = static_cast<SpanKind>(phase);
    }
    k.microbatch = r.value<std::int32_t>();
    k.chunk = r.value<std::int16_t>();
  }
  r.expect_end();
  return out;
}

}  // namespace pipetune::profiler
