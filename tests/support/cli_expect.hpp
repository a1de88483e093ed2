// What a refused command looks like to a user, checked one way by every CLI test: exit 2, one
// line on stderr holding each expected part, nothing on stdout. Failures print the command and
// what was wanted against what came.
#pragma once

#include <gtest/gtest.h>

#include <concepts>
#include <string>
#include <vector>

#include "support/run_process.hpp"

namespace pipetune::testing {

inline std::string command_line(const std::vector<std::string>& args) {
  std::string s = "pipetune";
  for (const auto& a : args) s += " " + a;
  return s;
}

inline std::vector<std::string> with(std::vector<std::string> base,
                                     const std::vector<std::string>& more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

// `context`: what ran, printed when a check fails (the command line, a case name).
inline void expect_input_error(const ProcessResult& r, const std::vector<std::string>& parts,
                               const std::string& context = "") {
  EXPECT_EQ(r.exit_code, 2) << context << "\n" << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << context << "\n" << r.err;
  for (const std::string& part : parts)
    EXPECT_NE(r.err.find(part), std::string::npos)
        << context << "\nwanted: " << part << "\ngot:    " << r.err;
  EXPECT_TRUE(r.out.empty()) << context << "\nstdout of a refused command: " << r.out;
}

// One part. A template, so that a braced list ({"a", "b"}) always means the parts above.
template <class Text>
requires std::convertible_to<const Text&, std::string>
void expect_input_error(const ProcessResult& r, const Text& part, const std::string& context = "") {
  expect_input_error(r, std::vector<std::string>{std::string(part)}, context);
}

// Runs `args` and expects them refused.
inline ProcessResult expect_refused(const std::vector<std::string>& args,
                                    const std::vector<std::string>& parts) {
  ProcessResult r = run_pipetune(args);
  expect_input_error(r, parts, command_line(args));
  return r;
}

template <class Text>
requires std::convertible_to<const Text&, std::string> ProcessResult
expect_refused(const std::vector<std::string>& args, const Text& part) {
  return expect_refused(args, std::vector<std::string>{std::string(part)});
}

}  // namespace pipetune::testing
