// Tutel's 2DH all-to-all as two all-to-alls and two block reorders (two_phase_all_to_all.hpp).
#include "engine/comm/two_phase_all_to_all.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pipetune::comm {

void transpose_blocks(std::span<const float> from, std::span<float> to, int rows, int cols,
                      std::size_t block, const BlockCopy& copy) {
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      copy(from.subspan((static_cast<std::size_t>(r) * cols + c) * block, block),
           to.subspan((static_cast<std::size_t>(c) * rows + r) * block, block));
}

void two_phase_all_to_all(Communicator& via, const ProcessGroup& node, const ProcessGroup& cross,
                          std::span<const float> input, std::span<float> output,
                          std::span<float> staged, std::span<float> arrived,
                          const BlockCopy& copy) {
  const int g = node.size(), nodes = cross.size();
  const std::size_t ranks = static_cast<std::size_t>(g) * nodes;
  if (g < 1 || nodes < 1 || input.size() % ranks != 0 || output.size() != input.size() ||
      staged.size() != input.size() || arrived.size() != input.size())
    throw std::invalid_argument("two_phase_all_to_all: " + std::to_string(input.size()) +
                                " floats in, " + std::to_string(output.size()) + " out, over " +
                                std::to_string(g) + " ranks a node and " + std::to_string(nodes) +
                                " nodes");
  const std::size_t block = input.size() / ranks;
  // (node, place) -> (place, node): phase 1's member p gets the blocks for place p.
  transpose_blocks(input, staged, nodes, g, block, copy);
  via.all_to_all(node, staged, arrived);
  // (source place, node) -> (node, source place): phase 2's member m gets node m's blocks.
  transpose_blocks(arrived, staged, g, nodes, block, copy);
  via.all_to_all(cross, staged, output);
}

void host_block_copy(std::span<const float> from, std::span<float> to) {
  std::copy(from.begin(), from.end(), to.begin());
}

}  // namespace pipetune::comm
