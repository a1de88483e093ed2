// Faults injected on purpose (`train --fault rank=R,step=S,kind=throw|hang|slow`), for people
// checking that their setup ends a broken run cleanly, and for the tests that check it: rank R
// throws, stops communicating, or stalls before the first op of step S. Never set in a real run.
#pragma once

#include <stdexcept>
#include <string>

namespace pipetune::runtime {

struct InjectedFault {
  enum class Kind { Throw, Hang, Slow };
  int rank = 0;
  int step = 1;
  Kind kind = Kind::Throw;
  double slow_seconds = 1.0;  // Slow: how long the op is delayed
};

// "rank=3,step=2,kind=throw" (and ",seconds=0.5" with kind=slow). InputError about the field
// "fault" (engine/errors.hpp), "injected fault: <rule>", whose rule names the part that is wrong
// or a key given twice. Whether the rank and step are the run's is check_train_options's to say.
InjectedFault parse_injected_fault(const std::string& text);
std::string describe(const InjectedFault& fault);  // "rank 3 throws at step 2"

// What an injected Throw raises: the run's failure names it as injected, "injected fault: " and
// where() ("rank 3, step 2, before F of micro-batch 0").
class InjectedFaultError : public std::runtime_error {
 public:
  explicit InjectedFaultError(const std::string& where)
      : std::runtime_error("injected fault: " + where), where_(where) {}
  const std::string& where() const { return where_; }

 private:
  std::string where_;
};

}  // namespace pipetune::runtime
