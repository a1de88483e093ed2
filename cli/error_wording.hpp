// How the CLI words the libraries' errors. A library error says which input it is about
// (engine/errors.hpp: "fault", "db", "plan.tp"...) and names no flag; where that input is given
// by a flag only, the CLI's message names the flag. Errors about spec and plan fields are
// printed as the libraries word them ("tp=3 does not divide heads=16"): those fields come from
// flags and run files alike.
#pragma once

#include <exception>
#include <string>

namespace pipetune {
class InputError;
}

namespace pipetune::cli {

// The line the CLI prints for `e`: what(), or for an input given by a flag:
//   fault  "--fault: <rule>"      ("--fault: kind 'x' is none of throw, hang, slow")
//   steps  "--steps: <rule>"
//   db     "<what>; store the run elsewhere (--db) or --no-db"
std::string worded(const InputError& e);

// The line for a run's failure: what(), and an injected fault named by its flag
// ("injected fault (--fault): rank 3, step 2, before F of micro-batch 0").
std::string worded_failure(const std::exception& e);

}  // namespace pipetune::cli
