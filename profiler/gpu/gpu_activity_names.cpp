#include "profiler/gpu/gpu_activity_names.hpp"

#include <array>
#include <cctype>

namespace pipetune::profiler {

namespace {

bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Codes 0..13 of CUpti_ActivityMemcpyKind as nsys names them (schema reference, event values).
constexpr std::array<std::string_view, 14> kMemcpyLabels = {
    "unknown", "HtoD", "DtoH", "HtoA", "AtoH",     "AtoA",     "AtoD",
    "DtoA",    "DtoD", "HtoH", "PtoP", "UVM HtoD", "UVM DtoH", "UVM DtoD"};

}  // namespace

std::optional<NcclKernel> classify_nccl_kernel(std::string_view name) {
  if (starts_with(name, "void ")) name.remove_prefix(5);
  if (starts_with(name, "ncclDevKernel_")) {
    name.remove_prefix(14);
  } else if (starts_with(name, "ncclKernel_")) {
    name.remove_prefix(11);
  } else {
    return std::nullopt;
  }
  // Longest names first: "ReduceScatter" before "Reduce", "SendRecv" before "Send".
  static constexpr std::array<std::pair<std::string_view, NcclKernel>, 10> kPrefixes = {{
      {"AllReduce", NcclKernel::AllReduce},
      {"AllGather", NcclKernel::AllGather},
      {"ReduceScatter", NcclKernel::ReduceScatter},
      {"Broadcast", NcclKernel::Broadcast},
      {"AllToAll", NcclKernel::AllToAll},
      {"AlltoAll", NcclKernel::AllToAll},
      {"SendRecv", NcclKernel::SendRecv},
      {"Send", NcclKernel::Send},
      {"Recv", NcclKernel::Recv},
      {"Reduce", NcclKernel::Reduce},
  }};
  for (const auto& [prefix, kind] : kPrefixes) {
    if (!starts_with(name, prefix)) continue;
    // The collective is a whole word: followed by '_', '(' or the end.
    const std::string_view rest = name.substr(prefix.size());
    if (rest.empty() || rest[0] == '_' || rest[0] == '(') return kind;
  }
  return NcclKernel::Unknown;
}

std::string_view memcpy_kind_label(std::int64_t code) {
  if (code < 0 || code >= static_cast<std::int64_t>(kMemcpyLabels.size())) return kMemcpyLabels[0];
  return kMemcpyLabels[static_cast<std::size_t>(code)];
}

std::string memcpy_kind_label_from_enum_name(std::string_view enum_name) {
  constexpr std::string_view kPrefix = "CUDA_MEMCPY_KIND_";
  if (!starts_with(enum_name, kPrefix)) return {};
  enum_name.remove_prefix(kPrefix.size());
  for (std::string_view label : kMemcpyLabels) {
    // "UVM HtoD" is written UVM_HTOD in the enum.
    if (label.size() != enum_name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < label.size() && same; ++i) {
      const char a = label[i] == ' ' ? '_' : label[i];
      same = std::toupper(static_cast<unsigned char>(a)) ==
             std::toupper(static_cast<unsigned char>(enum_name[i]));
    }
    if (same) return std::string(label);
  }
  return {};
}

SpanKind span_kind_of(NcclKernel k) {
  switch (k) {
    case NcclKernel::AllReduce:
      return SpanKind::AllReduce;
    case NcclKernel::AllGather:
      return SpanKind::AllGather;
    case NcclKernel::ReduceScatter:
      return SpanKind::ReduceScatter;
    case NcclKernel::Broadcast:
      return SpanKind::Broadcast;
    case NcclKernel::AllToAll:
      return SpanKind::AllToAll;
    case NcclKernel::Send:
    case NcclKernel::SendRecv:
      return SpanKind::Send;
    case NcclKernel::Recv:
      return SpanKind::Recv;
    case NcclKernel::Reduce:
    case NcclKernel::Unknown:
      return SpanKind::Kernel;
  }
  return SpanKind::Kernel;
}

}  // namespace pipetune::profiler
