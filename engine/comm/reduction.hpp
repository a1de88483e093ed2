// The element-wise step of every reduction, shared by the communicators so that threads and
// processes fold contributions identically: out = out op in, in group-rank order by the caller.
#pragma once

#include <cmath>
#include <cstddef>

#include "engine/comm/communicator.hpp"

namespace pipetune::comm {

inline void fold_into(ReduceOp op, float* out, const float* in, std::size_t len) {
  if (op == ReduceOp::sum) {
    for (std::size_t k = 0; k < len; ++k) out[k] += in[k];
    return;
  }
  // NaN wins so that a diverged rank is never hidden by a max.
  for (std::size_t k = 0; k < len; ++k)
    if (in[k] > out[k] || std::isnan(in[k])) out[k] = std::isnan(out[k]) ? out[k] : in[k];
}

}  // namespace pipetune::comm
