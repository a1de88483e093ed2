// The error the trace analyses throw for bad arguments (an iteration that the trace does not
// have, a window that ends before it starts, options out of range). The profiler library depends
// on nothing else in the project, so it cannot throw pipetune::InputError (engine/errors.hpp);
// front ends map AnalysisError to the same exit code as InputError (2).
#pragma once

#include <stdexcept>
#include <string>

namespace pipetune::profiler::analysis {

class AnalysisError : public std::invalid_argument {
 public:
  explicit AnalysisError(const std::string& what) : std::invalid_argument(what) {}
};

}  // namespace pipetune::profiler::analysis
