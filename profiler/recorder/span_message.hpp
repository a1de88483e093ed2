// The text of a span as NVTX shows it: "F mb=3 c=0", "send mb=3 -> 5", "embed mb=1 c=0".
// Formatted into a caller's stack buffer (no allocation); only called when NVTX is compiled in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "profiler/trace.hpp"

namespace pipetune::profiler {

// Room for any kind name, three 32-bit numbers and the separators; longer names are truncated.
inline constexpr std::size_t kSpanMessageCapacity = 96;

// Writes label (name when not empty, else the kind), then " mb=N" when microbatch >= 0, " c=N"
// when chunk >= 0 and " -> P" when peer >= 0, NUL-terminated and truncated to out. Returns the
// length written without the NUL. out must hold at least one char.
std::size_t format_span_message(std::span<char> out, SpanKind kind, std::int32_t microbatch,
                                std::int32_t chunk, std::int32_t peer, std::string_view name);

// An ARGB colour per span kind (forward blue, backward green, weight-backward teal, vocabulary
// passes purple, communication orange/grey) for the NVTX range.
std::uint32_t span_color(SpanKind kind);

}  // namespace pipetune::profiler
