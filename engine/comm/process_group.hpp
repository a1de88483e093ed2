// A process group: the ordered list of global ranks that take part in one collective. A rank's
// position in the list is its group rank; reductions combine contributions in that order.
#pragma once

#include <string>
#include <tuple>
#include <vector>

namespace pipetune::comm {

struct ProcessGroup {
  std::string name;        // "tp", "pp", "dp", "ep", "expert-dp", "vocab", "world"
  std::vector<int> ranks;  // global ranks, in group-rank order

  int size() const { return static_cast<int>(ranks.size()); }
  // Group rank of a global rank, or -1 when it is not a member.
  int index_of(int global_rank) const;
  bool contains(int global_rank) const { return index_of(global_rank) >= 0; }
  // "dp group [0, 2, 4]"
  std::string describe() const;

  friend bool operator==(const ProcessGroup&, const ProcessGroup&) = default;
};

// Orders groups by (name, ranks) so that maps keyed by group need no copy to look one up.
struct ProcessGroupLess {
  using is_transparent = void;
  bool operator()(const ProcessGroup& a, const ProcessGroup& b) const {
    return std::tie(a.name, a.ranks) < std::tie(b.name, b.ranks);
  }
};

ProcessGroup make_world_group(int world);

}  // namespace pipetune::comm
