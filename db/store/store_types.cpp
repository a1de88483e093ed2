#include "db/store/store_types.hpp"

#include <array>

namespace pipetune::db {

namespace {

constexpr std::array<std::string_view, 4> kRunStatusNames{"running", "complete", "failed",
                                                          "interrupted"};
constexpr std::array<std::string_view, 3> kTraceKindNames{"simulated", "measured", "imported"};

}  // namespace

std::string_view run_status_name(RunStatus s) {
  const auto i = static_cast<std::size_t>(s);
  return i < kRunStatusNames.size() ? kRunStatusNames[i] : "?";
}

bool parse_run_status(std::string_view name, RunStatus& out) {
  for (std::size_t i = 0; i < kRunStatusNames.size(); ++i) {
    if (kRunStatusNames[i] == name) {
      out = static_cast<RunStatus>(i);
      return true;
    }
  }
  return false;
}

std::string_view trace_kind_name(profiler::TraceKind k) {
  const auto i = static_cast<std::size_t>(k);
  return i < kTraceKindNames.size() ? kTraceKindNames[i] : "?";
}

bool parse_trace_kind(std::string_view name, profiler::TraceKind& out) {
  for (std::size_t i = 0; i < kTraceKindNames.size(); ++i) {
    if (kTraceKindNames[i] == name) {
      out = static_cast<profiler::TraceKind>(i);
      return true;
    }
  }
  return false;
}

}  // namespace pipetune::db
