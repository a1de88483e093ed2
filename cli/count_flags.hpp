// The rule every command applies to the counts of a plan given as flags (--tp, --pp, --dp, --ep,
// --chunks, --microbatches, --micro-batch-size, --stages...): a count given is at least 1, never
// silently replaced by a default; a count not given is the caller's default.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include "engine/errors.hpp"

namespace pipetune::cli {

// InputError "FLAG must be at least 1, not N" for the first count given below 1.
inline void require_counts_at_least_one(
    std::initializer_list<std::pair<std::optional<int>, const char*>> counts) {
  for (const auto& [value, flag] : counts)
    if (value && *value < 1)
      throw InputError(std::string(flag) + " must be at least 1, not " + std::to_string(*value));
}

// The count given (at least 1, as above), or 0 when it was not given.
inline int count_or_zero(const std::optional<int>& value, const char* flag) {
  require_counts_at_least_one({{value, flag}});
  return value.value_or(0);
}

}  // namespace pipetune::cli
