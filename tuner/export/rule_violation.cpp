#include "tuner/export/rule_violation.hpp"

namespace pipetune::tuner {

std::string format_violations(const RuleViolations& violations) {
  std::string out;
  for (const RuleViolation& v : violations)
    out += v.rule + ": " + v.detail + " [" + v.source + "]\n";
  return out;
}

}  // namespace pipetune::tuner
