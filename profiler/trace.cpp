#include "profiler/trace.hpp"

namespace pipetune::profiler {

std::string_view stream_name(Stream s) {
  switch (s) {
    case Stream::Compute:
      return "compute";
    case Stream::Comm:
      return "comm";
    case Stream::P2P:
      return "p2p";
    case Stream::Gpu:
      return "gpu";
    case Stream::Host:
      return "host";
    case Stream::Offload:
      return "offload";
  }
  return "?";
}

bool parse_stream(std::string_view name, Stream& out) {
  for (int i = 0; i < kStreamCount; ++i) {
    if (stream_name(static_cast<Stream>(i)) == name) {
      out = static_cast<Stream>(i);
      return true;
    }
  }
  return false;
}

std::string_view span_kind_name(SpanKind k) {
  switch (k) {
    case SpanKind::F:
      return "F";
    case SpanKind::B:
      return "B";
    case SpanKind::W:
      return "W";
    case SpanKind::BW:
      return "BW";
    case SpanKind::S:
      return "S";
    case SpanKind::T:
      return "T";
    case SpanKind::IF:
      return "IF";
    case SpanKind::IB:
      return "IB";
    case SpanKind::Send:
      return "send";
    case SpanKind::AllReduce:
      return "all-reduce";
    case SpanKind::Broadcast:
      return "broadcast";
    case SpanKind::Recv:
      return "recv";
    case SpanKind::AllGather:
      return "all-gather";
    case SpanKind::ReduceScatter:
      return "reduce-scatter";
    case SpanKind::AllToAll:
      return "all-to-all";
    case SpanKind::Barrier:
      return "barrier";
    case SpanKind::Offload:
      return "offload";
    case SpanKind::Reload:
      return "reload";
    case SpanKind::Kernel:
      return "kernel";
    case SpanKind::Memcpy:
      return "memcpy";
    case SpanKind::Memset:
      return "memset";
    case SpanKind::Runtime:
      return "runtime";
    case SpanKind::Range:
      return "range";
    case SpanKind::Other:
      return "other";
  }
  return "?";
}

bool parse_span_kind(std::string_view name, SpanKind& out) {
  for (int i = 0; i < kSpanKindCount; ++i) {
    if (span_kind_name(static_cast<SpanKind>(i)) == name) {
      out = static_cast<SpanKind>(i);
      return true;
    }
  }
  return false;
}

bool is_compute(SpanKind k) {
  return static_cast<int>(k) <= static_cast<int>(SpanKind::IB);
}

bool is_communication(SpanKind k) {
  switch (k) {
    case SpanKind::Send:
    case SpanKind::Recv:
    case SpanKind::AllReduce:
    case SpanKind::Broadcast:
    case SpanKind::AllGather:
    case SpanKind::ReduceScatter:
    case SpanKind::AllToAll:
    case SpanKind::Barrier:
      return true;
    default:
      return false;
  }
}

std::string_view memory_category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::Parameters:
      return "parameters";
    case MemoryCategory::Gradients:
      return "gradients";
    case MemoryCategory::OptimizerState:
      return "optimizer_state";
    case MemoryCategory::Activations:
      return "activations";
    case MemoryCategory::Temporaries:
      return "temporaries";
    case MemoryCategory::VocabularyLayers:
      return "vocabulary_layers";
    case MemoryCategory::Unattributed:
      return "unattributed";
  }
  return "?";
}

bool parse_memory_category(std::string_view name, MemoryCategory& out) {
  for (int i = 0; i < kMemoryCategoryCount; ++i) {
    if (memory_category_name(static_cast<MemoryCategory>(i)) == name) {
      out = static_cast<MemoryCategory>(i);
      return true;
    }
  }
  return false;
}

std::int32_t Trace::lane(std::int32_t rank, Stream stream, std::int32_t index) {
  for (std::size_t i = 0; i < lanes.size(); ++i) {
    if (lanes[i].rank == rank && lanes[i].stream == stream && lanes[i].index == index)
      return static_cast<std::int32_t>(i);
  }
  std::string name = "rank " + std::to_string(rank) + " " + std::string(stream_name(stream));
  if (index != 0) name += " " + std::to_string(index);
  lanes.push_back(Lane{rank, stream, std::move(name), index});
  return static_cast<std::int32_t>(lanes.size() - 1);
}

std::uint32_t Trace::intern(std::string name) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<std::uint32_t>(i);
  }
  names.push_back(std::move(name));
  return static_cast<std::uint32_t>(names.size() - 1);
}

bool Trace::has_gpu_lanes() const {
  for (const Lane& l : lanes)
    if (l.stream == Stream::Gpu) return true;
  return false;
}

std::string Trace::span_label(const Span& s) const {
  if (s.name != 0 && s.name < names.size()) return names[s.name];
  std::string label(span_kind_name(s.kind));
  if (s.microbatch >= 0) label += std::to_string(s.microbatch);
  if (s.chunk >= 0 && is_compute(s.kind) && s.kind != SpanKind::S && s.kind != SpanKind::T &&
      s.kind != SpanKind::IF && s.kind != SpanKind::IB) {
    label += '.';
    label += std::to_string(s.chunk);
  }
  if (s.kind == SpanKind::Send && s.peer >= 0) label += "->" + std::to_string(s.peer);
  return label;
}

}  // namespace pipetune::profiler
