// What a test needs from outside the repository: the shared data beside it (../shared: real
// traces, reference tables) and system tools (Xvfb for the GUI widget tests, gzip).
//
//   PIPETUNE_REQUIRE_SHARED(path);               // skip here, fail under CI=true
//   if (!ok) PIPETUNE_SKIP_OR_FAIL("why");       // same rule for any other requirement
//
// On a developer's machine a missing requirement skips the test with a message. Under CI=true
// (how .ci/run is started) it fails the test: CI must not pass while the real-data and GUI tests
// quietly do nothing. GPU tests are not routed through here; CI has no GPU.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>

namespace pipetune::test {

// The shared folder is a sibling of the repository.
inline std::filesystem::path shared_path(const std::string& relative) {
  return std::filesystem::path(PIPETUNE_SOURCE_DIR).parent_path() / "shared" / relative;
}

inline bool ci_requires_everything() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

}  // namespace pipetune::test

// A fatal failure in SetUp() also keeps the test body from running, as a skip does.
#define PIPETUNE_SKIP_OR_FAIL(message)                                                   \
  do {                                                                                   \
    std::ostringstream pipetune_why_;                                                    \
    pipetune_why_ << message;                                                            \
    if (::pipetune::test::ci_requires_everything())                                      \
      GTEST_FAIL() << pipetune_why_.str() << " (CI=true: this test must run, not skip)"; \
    else                                                                                 \
      GTEST_SKIP() << pipetune_why_.str();                                               \
  } while (0)

#define PIPETUNE_REQUIRE_SHARED(path)                                                       \
  do {                                                                                      \
    if (!std::filesystem::exists(path))                                                     \
      PIPETUNE_SKIP_OR_FAIL("shared data " << (path) << " is absent (../shared not here)"); \
  } while (0)
