// What a framework rule checker reports: each rule an exported file breaks, with where the
// framework states that rule (file at the commit it was read at), so a failure points at the
// framework's own check rather than at pipetune's reading of it.
#pragma once

#include <string>
#include <vector>

namespace pipetune::tuner {

struct RuleViolation {
  std::string rule;    // the rule, in words ("global batch divisible by micro-batch x DP")
  std::string source;  // "NVIDIA/Megatron-LM megatron/training/arguments.py@000c4ac validate_args"
  std::string detail;  // the values that break it ("global batch 18, micro-batch 1, DP 4")
};

using RuleViolations = std::vector<RuleViolation>;

// One line per violation: "rule: detail [source]".
std::string format_violations(const RuleViolations& violations);

}  // namespace pipetune::tuner
