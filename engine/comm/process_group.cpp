#include "engine/comm/process_group.hpp"

#include <numeric>

namespace pipetune::comm {

int ProcessGroup::index_of(int global_rank) const {
  for (std::size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i] == global_rank) return static_cast<int>(i);
  return -1;
}

std::string ProcessGroup::describe() const {
  std::string s = name + " group [";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(ranks[i]);
  }
  return s + "]";
}

ProcessGroup make_world_group(int world) {
  ProcessGroup g{"world", std::vector<int>(static_cast<std::size_t>(world > 0 ? world : 0))};
  std::iota(g.ranks.begin(), g.ranks.end(), 0);
  return g;
}

}  // namespace pipetune::comm
