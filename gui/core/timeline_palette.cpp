#include "gui/core/timeline_palette.hpp"

namespace pipetune::gui {

Rgba kind_color(profiler::SpanKind kind) {
  using K = profiler::SpanKind;
  switch (kind) {
    case K::F:
      return {72, 132, 214};
    case K::B:
      return {86, 178, 110};
    case K::W:
      return {236, 160, 64};
    case K::BW:
      return {44, 150, 140};  // fused B + W
    case K::S:
      return {206, 96, 166};
    case K::T:
      return {150, 110, 206};
    case K::IF:
      return {130, 176, 236};
    case K::IB:
      return {146, 208, 160};
    case K::Send:
      return {168, 168, 168};
    case K::Recv:
      return {140, 140, 150};
    case K::AllReduce:
      return {214, 86, 86};
    case K::Broadcast:
      return {196, 122, 92};
    case K::AllGather:
      return {204, 142, 60};
    case K::ReduceScatter:
      return {182, 100, 62};
    case K::AllToAll:
      return {164, 84, 146};
    case K::Barrier:
      return {122, 122, 122};
    case K::Offload:
      return {120, 190, 200};  // device -> host
    case K::Reload:
      return {96, 160, 176};  // host -> device
    case K::Kernel:
      return {92, 162, 204};
    case K::Memcpy:
      return {230, 202, 84};
    case K::Memset:
      return {204, 184, 124};
    case K::Runtime:
      return {152, 152, 194};
    case K::Range:
      return {182, 182, 142};
    case K::Other:
      break;
  }
  return {140, 140, 140};
}

Rgba memory_color(profiler::MemoryCategory category) {
  using C = profiler::MemoryCategory;
  switch (category) {
    case C::Parameters:
      return {100, 149, 237};
    case C::Gradients:
      return {255, 165, 0};
    case C::OptimizerState:
      return {186, 85, 211};
    case C::Activations:
      return {60, 179, 113};
    case C::Temporaries:
      return {240, 128, 128};
    case C::VocabularyLayers:
      return {218, 165, 32};
    case C::Unattributed:
      return {150, 150, 150};
  }
  return {200, 200, 200};
}

Rgba darker(Rgba c) {
  return {static_cast<std::uint8_t>(c.r * 3 / 5), static_cast<std::uint8_t>(c.g * 3 / 5),
          static_cast<std::uint8_t>(c.b * 3 / 5), c.a};
}

}  // namespace pipetune::gui
