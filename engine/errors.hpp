// Typed errors thrown by the pipetune libraries. Front ends map InputError to exit code 2
// (bad input or usage) and everything else to 1 (runtime failure). Libraries never exit().
//
// An InputError may say which input it is about and which rule that input breaks, so that each
// front end words it its own way (the CLI names its flag, the GUI marks its form field, a run
// file names file, line and key) while what() stays a whole sentence for anyone else.
//
// Field keys: the key as a pipetune TOML file spells it, prefixed by the spec it belongs to,
// which is how a run file spells it too: "plan.tp", "plan.microbatches", "model.heads",
// "cluster.devices", "hardware.peak_flops", "cluster.node_groups[1].nodes". An input that is
// not part of a spec has a plain name of its own: "fault" (an injected fault), "db" (the
// workspace database). Libraries name no CLI flag; front ends map these keys to theirs.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace pipetune {

// The input is wrong: a bad preset, spec, plan, schedule or option. The message names the rule.
class InputError : public std::runtime_error {
 public:
  // A message only: field() is empty and rule() is the message.
  explicit InputError(const std::string& what) : std::runtime_error(what), rule_(what) {}

  // About the input fields[0], and the others its rule joins (fields[1...]). `rule` is the rule
  // broken with the values involved, whole on its own ("tp=3 does not divide heads=16"): it is
  // also what().
  InputError(std::vector<std::string> fields, const std::string& rule)
      : std::runtime_error(rule), fields_(std::move(fields)), rule_(rule) {}

  // The same, where the rule reads after a name for the input ("rank must be a whole number"):
  // what() is "<label>: <rule>", the library's own wording ("injected fault: rank must be ...");
  // a front end puts its own name for the field in front of rule() instead.
  InputError(std::vector<std::string> fields, const std::string& label, const std::string& rule)
      : std::runtime_error(label + ": " + rule), fields_(std::move(fields)), rule_(rule) {}

  // Another message with `structure`'s fields and rule, for a caller that adds context to
  // what() ("model.toml: " + e.what()) and keeps what the error is about.
  InputError(const std::string& what, const InputError& structure)
      : std::runtime_error(what), fields_(structure.fields_), rule_(structure.rule_) {}

  // The key of the input the error is about (see the convention above); empty when unknown.
  const std::string& field() const {
    static const std::string none;
    return fields_.empty() ? none : fields_.front();
  }
  // field() first, then every other input the broken rule joins ("plan.tp", "model.heads").
  const std::vector<std::string>& fields() const { return fields_; }
  // The rule broken, without the library's name for the input: what() when there is none.
  const std::string& rule() const { return rule_; }

 private:
  std::vector<std::string> fields_;
  std::string rule_;
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
