// Checked-call macros for the tensor ops (llm.c style: the message names file and line).
#pragma once

#include <string>

namespace pipetune::tensor::detail {

// Throws InputError("<op>: <what> [<file>:<line>]").
[[noreturn]] void throw_shape_error(const char* op, const std::string& what, const char* file,
                                    int line);

}  // namespace pipetune::tensor::detail

// PIPETUNE_TENSOR_CHECK(cond, "linear_forward", "x " + x.shape.str() + " ...");
// `what` is only evaluated when the check fails.
#define PIPETUNE_TENSOR_CHECK(cond, op, what)                                                 \
  do {                                                                                        \
    if (!(cond)) ::pipetune::tensor::detail::throw_shape_error(op, what, __FILE__, __LINE__); \
  } while (0)
