// Typed errors thrown by the pipetune libraries. Front ends map InputError to exit code 2
// (bad input or usage) and everything else to 1 (runtime failure). Libraries never exit().
#pragma once

#include <stdexcept>
#include <string>

namespace pipetune {

// The input is wrong: a bad preset, spec, plan, schedule or option. The message names the rule.
class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& what) : std::runtime_error(what) {}
};

// A spec or plan breaks a validation rule ("tp=3 does not divide heads=16").
class SpecError : public InputError {
 public:
  using InputError::InputError;
};

// A schedule cannot be generated for these parameters, or a schedule is malformed.
class ScheduleError : public InputError {
 public:
  using InputError::InputError;
};

// A schedule whose ops can never all run; the message lists the stuck ops and what each waits for.
class DeadlockError : public ScheduleError {
 public:
  using ScheduleError::ScheduleError;
};

}  // namespace pipetune
