#include "profiler/recorder/span_message.hpp"

#include <algorithm>
#include <charconv>

namespace pipetune::profiler {

namespace {

// Appends to a fixed buffer, keeping one char for the terminating NUL.
class FixedWriter {
 public:
  explicit FixedWriter(std::span<char> out) : out_(out) {}
  void text(std::string_view s) {
    const std::size_t n = std::min(s.size(), room());
    std::copy_n(s.data(), n, out_.data() + used_);
    used_ += n;
  }
  void number(std::int32_t value) {
    char digits[16];
    const auto result = std::to_chars(digits, digits + sizeof digits, value);
    text(std::string_view(digits, static_cast<std::size_t>(result.ptr - digits)));
  }
  std::size_t finish() {
    out_[used_] = '\0';
    return used_;
  }

 private:
  std::size_t room() const { return out_.size() - 1 - used_; }
  std::span<char> out_;
  std::size_t used_ = 0;
};

}  // namespace

std::size_t format_span_message(std::span<char> out, SpanKind kind, std::int32_t microbatch,
                                std::int32_t chunk, std::int32_t peer, std::string_view name) {
  if (out.empty()) return 0;
  FixedWriter w(out);
  w.text(name.empty() ? span_kind_name(kind) : name);
  if (microbatch >= 0) {
    w.text(" mb=");
    w.number(microbatch);
  }
  if (chunk >= 0) {
    w.text(" c=");
    w.number(chunk);
  }
  if (peer >= 0) {
    w.text(" -> ");
    w.number(peer);
  }
  return w.finish();
}

std::uint32_t span_color(SpanKind kind) {
  switch (kind) {
    case SpanKind::F:
      return 0xFF4C72B0u;
    case SpanKind::B:
      return 0xFF55A868u;
    case SpanKind::W:
      return 0xFF2A9D8Fu;
    case SpanKind::BW:
      return 0xFF3D8C40u;
    case SpanKind::S:
    case SpanKind::T:
    case SpanKind::IF:
    case SpanKind::IB:
      return 0xFF8172B2u;
    case SpanKind::Send:
      return 0xFFDD8452u;
    case SpanKind::Recv:
      return 0xFFE6A46Eu;
    case SpanKind::AllReduce:
    case SpanKind::Broadcast:
    case SpanKind::AllGather:
    case SpanKind::ReduceScatter:
    case SpanKind::AllToAll:
    case SpanKind::Barrier:
      return 0xFFC44E52u;
    case SpanKind::Offload:
    case SpanKind::Reload:
      return 0xFF64AFBEu;
    case SpanKind::Kernel:
    case SpanKind::Memcpy:
    case SpanKind::Memset:
    case SpanKind::Runtime:
    case SpanKind::Range:
    case SpanKind::Other:
      return 0xFF8C8C8Cu;
  }
  return 0xFF8C8C8Cu;
}

}  // namespace pipetune::profiler
