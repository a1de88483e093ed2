// Tutel's two-dimensional hierarchical (2DH) all-to-all: the all-to-all of an EP group whose
// ranks sit on nodes of g consecutive ranks (ParallelPlan::moe_a2a_node_ranks), run as two
// all-to-alls, first among the g ranks of a node (the expert-node group), then among the
// ep / g ranks at the same place of every node (the expert-cross group). Each inter-node message
// then carries what g ranks of a node send one remote rank, and a rank has ep / g - 1 remote
// peers instead of ep - g. The result is the flat all-to-all's, element for element:
//
//   input (ep blocks, block j for EP rank j = m * g + p: node m, place p) is reordered to
//   (place, node) order, so phase 1 sends each rank of the node the blocks for its place on
//   every node; what arrives, (source place, node), is reordered to (node, source place), so
//   phase 2 sends each node's rank at this place the blocks of every rank of this node; what
//   arrives is (source node, source place), the flat order of source EP ranks.
//
// The two reorders are block copies through `copy` (host memory, or a rank's device storage).
#pragma once

#include <cstddef>
#include <functional>
#include <span>

#include "engine/comm/communicator.hpp"
#include "engine/comm/process_group.hpp"

namespace pipetune::comm {

// to <- from, spans of the same length.
using BlockCopy = std::function<void(std::span<const float> from, std::span<float> to)>;

// to (cols x rows blocks) <- from (rows x cols blocks), each block `block` floats:
// block c * rows + r of `to` is block r * cols + c of `from`.
void transpose_blocks(std::span<const float> from, std::span<float> to, int rows, int cols,
                      std::size_t block, const BlockCopy& copy);

// output <- the EP group's all-to-all of input, in two phases over `node` (g members, this
// rank's node) and `cross` (ep / g members, this rank's place on every node, in node order).
// `staged` and `arrived` are scratch of input's size. Input, output and the scratch must not
// overlap.
void two_phase_all_to_all(Communicator& via, const ProcessGroup& node, const ProcessGroup& cross,
                          std::span<const float> input, std::span<float> output,
                          std::span<float> staged, std::span<float> arrived, const BlockCopy& copy);

// The host's block copy (std::copy).
void host_block_copy(std::span<const float> from, std::span<float> to);

}  // namespace pipetune::comm
