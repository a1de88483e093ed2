#include "engine/schedule/dependencies.hpp"

namespace pipetune::schedule {

bool is_barrier(EventKind k) {
  return k == EventKind::InputReduce || k == EventKind::OutputBarrier1 ||
         k == EventKind::OutputBarrier2;
}

std::string event_label(const Event& e) {
  const std::string mb = "mb" + std::to_string(e.microbatch);
  switch (e.kind) {
    case EventKind::Forward:
      return "F(g" + std::to_string(e.group) + ", " + mb + ")";
    case EventKind::Backward:
      return "B(g" + std::to_string(e.group) + ", " + mb + ")";
    case EventKind::InputReduce:
      return "IF-reduce(" + mb + ")";
    case EventKind::OutputBarrier1:
      return "C1(" + mb + ")";
    case EventKind::OutputBarrier2:
      return "C2(" + mb + ")";
  }
  return "?";
}

}  // namespace pipetune::schedule
