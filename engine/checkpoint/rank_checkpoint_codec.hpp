// A RankCheckpoint as bytes and back, for moving a rank's state between processes of one run
// (ranks as processes hand theirs to rank 0's process, which writes the checkpoint directory).
// Host byte order, length-prefixed, behind a magic: a message between processes of one build,
// not the on-disk format (checkpoint.hpp has that).
#pragma once

#include <string>

#include "engine/checkpoint/checkpoint.hpp"

namespace pipetune::checkpoint {

std::string encode_rank_checkpoint(const RankCheckpoint& rank);
// Throws std::runtime_error for bytes that are not an encode_rank_checkpoint() result.
RankCheckpoint decode_rank_checkpoint(const std::string& bytes);

}  // namespace pipetune::checkpoint
