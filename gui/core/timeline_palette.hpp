// The timeline's one palette: span kinds (F blue, B green, W orange as in the zero-bubble
// papers' figures), folds, bubbles, memory categories and the chrome around them.
#pragma once

#include <cstdint>

#include "profiler/trace.hpp"

namespace pipetune::gui {

struct Rgba {
  std::uint8_t r = 0, g = 0, b = 0, a = 255;
  friend bool operator==(const Rgba&, const Rgba&) = default;
};

Rgba kind_color(profiler::SpanKind kind);
Rgba memory_color(profiler::MemoryCategory category);
// A block's and a fold's outline and zig-zag: its colour at three fifths.
Rgba darker(Rgba c);

namespace palette {
inline constexpr Rgba kBackground{30, 30, 34};
inline constexpr Rgba kRowEven{40, 40, 46};
inline constexpr Rgba kRowOdd{35, 35, 41};
inline constexpr Rgba kMemoryRow{28, 32, 36};
inline constexpr Rgba kHeader{48, 48, 56};
inline constexpr Rgba kTitle{58, 52, 70};
inline constexpr Rgba kText{225, 225, 225};
inline constexpr Rgba kTextDim{165, 165, 170};
inline constexpr Rgba kBlockText{15, 15, 15};
inline constexpr Rgba kFold{120, 120, 128};
inline constexpr Rgba kBubbleTint{64, 44, 44};
inline constexpr Rgba kHatch{176, 112, 112};
inline constexpr Rgba kAxis{22, 22, 26};
inline constexpr Rgba kTick{90, 90, 100};
inline constexpr Rgba kRange{255, 220, 90, 50};
inline constexpr Rgba kRangeEdge{255, 220, 90};
inline constexpr Rgba kSelection{255, 255, 255};
inline constexpr Rgba kMemoryTotal{235, 235, 235};
inline constexpr Rgba kPeak{255, 80, 80};
}  // namespace palette

}  // namespace pipetune::gui
