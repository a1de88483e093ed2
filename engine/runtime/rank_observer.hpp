// Hooks through which the runtime reports what it does (the trainer turns them into spans, NVTX
// ranges and memory samples). Called on the rank's own thread.
#pragma once

#include <cstddef>

#include "engine/schedule/op.hpp"

namespace pipetune::runtime {

class RankObserver {
 public:
  virtual ~RankObserver() = default;
  virtual void op_begin(const schedule::Op& op) = 0;
  // activation_bytes: activations (and kept gradients) held after the op.
  virtual void op_end(const schedule::Op& op, std::size_t activation_bytes) = 0;
};

}  // namespace pipetune::runtime
