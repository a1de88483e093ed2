#include "engine/schedule/group_holds.hpp"

#include <algorithm>

namespace pipetune::schedule {

bool uses_layer_values(OpKind kind) {
  return kind == OpKind::F || kind == OpKind::B || kind == OpKind::BW;
}

GroupHolds group_holds(const std::vector<Op>& ops, int chunks) {
  GroupHolds h;
  h.gather_before.assign(ops.size(), 0);
  h.release_after.assign(ops.size(), 0);
  const auto paired = [&](std::size_t i) {
    return ops[i].overlaps_previous || (i + 1 < ops.size() && ops[i + 1].overlaps_previous);
  };
  // Parameter runs: `open` is the op index that holds its chunk's values, -1 when none does.
  std::ptrdiff_t open = -1;
  for (std::size_t i = 0; i < ops.size(); ++i) {
    if (!uses_layer_values(ops[i].kind)) continue;  // W, R, vocabulary ops: transparent
    const bool joins =
        open >= 0 && !paired(i) && ops[i].chunk == ops[static_cast<std::size_t>(open)].chunk;
    if (joins) {
      h.release_after[static_cast<std::size_t>(open)] = 0;
    } else if (!paired(i)) {
      h.gather_before[i] = 1;
      ++h.runs;
    }
    if (paired(i)) {
      open = -1;
      continue;
    }
    h.release_after[i] = 1;
    open = static_cast<std::ptrdiff_t>(i);
  }
  // Held gradients: open from a group's first weight-gradient op; at its R, reducing; freed at the
  // next R or the iteration's end.
  const auto n = static_cast<std::size_t>(std::max(chunks, 0));
  std::vector<char> accumulating(n, 0);
  int reducing = 0;  // groups whose reduction the next R waits for
  int held = 0;
  for (const Op& op : ops) {
    const auto c = static_cast<std::size_t>(op.chunk);
    if (op.kind == OpKind::R) {
      held -= reducing;  // the earlier reductions end before this one starts
      reducing = 0;
      if (c < n && accumulating[c]) {
        accumulating[c] = 0;
        reducing = 1;
      }
    } else if ((op.kind == OpKind::W || op.kind == OpKind::BW) && c < n && !accumulating[c]) {
      accumulating[c] = 1;
      ++held;
    }
    h.peak_gradient_groups = std::max(h.peak_gradient_groups, held);
  }
  return h;
}

}  // namespace pipetune::schedule
