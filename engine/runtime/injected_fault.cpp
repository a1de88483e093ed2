#include "engine/runtime/injected_fault.hpp"

#include <charconv>
#include <cmath>
#include <sstream>

#include "engine/errors.hpp"

namespace pipetune::runtime {

namespace {

// An error in the fault's text: about the field "fault", worded "injected fault: <rule>".
[[noreturn]] void refuse(const std::string& rule) {
  throw InputError({"fault"}, "injected fault", rule);
}

int parse_int(const std::string& key, const std::string& value) {
  int v = 0;
  const auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size())
    refuse(key + " must be a whole number, not '" + value + "'");
  return v;
}

}  // namespace

InjectedFault parse_injected_fault(const std::string& text) {
  InjectedFault f;
  bool rank = false, step = false, kind = false, seconds = false;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, ',')) {
    const auto eq = part.find('=');
    if (eq == std::string::npos) refuse("'" + part + "' is not key=value (rank=R,step=S,kind=K)");
    const std::string key = part.substr(0, eq), value = part.substr(eq + 1);
    // A key given twice is a typo, not a choice of the last: refused whatever the values.
    const bool repeated = (key == "rank" && rank) || (key == "step" && step) ||
                          (key == "kind" && kind) || (key == "seconds" && seconds);
    if (repeated) refuse(key + " is given twice in '" + text + "'");
    if (key == "rank") {
      f.rank = parse_int(key, value);
      rank = true;
    } else if (key == "step") {
      f.step = parse_int(key, value);
      step = true;
    } else if (key == "kind") {
      if (value == "throw")
        f.kind = InjectedFault::Kind::Throw;
      else if (value == "hang")
        f.kind = InjectedFault::Kind::Hang;
      else if (value == "slow")
        f.kind = InjectedFault::Kind::Slow;
      else
        refuse("kind '" + value + "' is none of throw, hang, slow");
      kind = true;
    } else if (key == "seconds") {
      char* end = nullptr;
      f.slow_seconds = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || !(f.slow_seconds >= 0.0) ||
          !std::isfinite(f.slow_seconds) || f.slow_seconds > 3600.0)
        refuse("seconds must be 0 to 3600, not '" + value + "'");
      seconds = true;
    } else {
      refuse("unknown key '" + key + "' (valid: rank, step, kind, seconds)");
    }
  }
  if (!rank || !step || !kind) refuse("needs rank=R,step=S,kind=throw|hang|slow");
  if (f.rank < 0) refuse("rank must not be negative");
  if (f.step < 1) refuse("step must be at least 1");
  if (seconds && f.kind != InjectedFault::Kind::Slow) refuse("seconds applies to kind=slow only");
  return f;
}

std::string describe(const InjectedFault& f) {
  const char* what = f.kind == InjectedFault::Kind::Throw  ? "throws"
                     : f.kind == InjectedFault::Kind::Hang ? "hangs"
                                                           : "stalls";
  return "rank " + std::to_string(f.rank) + " " + what + " at step " + std::to_string(f.step);
}

}  // namespace pipetune::runtime
