// Commands start at once (issue 49): a command that does not train loads neither OpenBLAS (which
// starts its threads as it loads) nor any CUDA library; training on the CPU loads OpenBLAS when
// it first multiplies. Checked with the dynamic loader's own log (LD_DEBUG=files: one line per
// library it opens, at start-up or through dlopen).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

// pipetune with `args` under LD_DEBUG=files; the loader's log is on stderr.
ProcessResult run_logging_loads(const std::vector<std::string>& args) {
  ::setenv("LD_DEBUG", "files", 1);
  ProcessResult r = run_pipetune(args);
  ::unsetenv("LD_DEBUG");
  return r;
}

// The libraries the log says were opened whose names contain one of `names`.
std::vector<std::string> loaded(const std::string& log, const std::vector<std::string>& names) {
  std::vector<std::string> found;
  std::size_t at = 0;
  while ((at = log.find("file=", at)) != std::string::npos) {
    at += 5;
    const std::string file = log.substr(at, log.find_first_of(" \t\n", at) - at);
    for (const std::string& n : names)
      if (file.find(n) != std::string::npos) found.push_back(file);
  }
  return found;
}

const std::vector<std::string> kHeavy = {"libopenblas", "libcudart", "libcupti",
                                         "libnccl",     "libcublas", "libcuda."};

TEST(StartUp, CommandsThatDoNotTrainLoadNoBlasOrCudaLibrary) {
  ScratchWorkspace w;
  const std::vector<std::vector<std::string>> commands = {
      {"presets"},
      {"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--db", w.db},
      {"tune", "--model", "gpt3-1.7b", "--hardware", "h100-sxm", "--gpus", "8", "--global-batch",
       "64", "--no-db"},
      {"report", "1", "--db", w.db}};
  for (const auto& args : commands) {
    const ProcessResult r = run_logging_loads(args);
    ASSERT_EQ(r.exit_code, 0) << args[0] << ": "
                              << r.err.substr(r.err.size() > 4000 ? r.err.size() - 4000 : 0);
    // The log did list the libraries pipetune links (so an empty list below means something).
    ASSERT_FALSE(loaded(r.err, {"libsqlite3"}).empty()) << args[0] << ": no loader log";
    const std::vector<std::string> heavy = loaded(r.err, kHeavy);
    EXPECT_TRUE(heavy.empty()) << args[0] << " loaded " << heavy.front();
  }
}

TEST(StartUp, TrainingOnTheCpuLoadsOpenBlasWhenItFirstMultiplies) {
  const ProcessResult r =
      run_logging_loads({"train", "--steps", "1", "--microbatches", "2", "--no-db"});
  ASSERT_EQ(r.exit_code, 0) << r.err.substr(r.err.size() > 4000 ? r.err.size() - 4000 : 0);
  EXPECT_FALSE(loaded(r.err, {"libopenblas"}).empty());
  const std::vector<std::string> cuda =
      loaded(r.err, {"libcudart", "libcupti", "libnccl", "libcublas", "libcuda."});
  EXPECT_TRUE(cuda.empty()) << "a CPU run loaded " << cuda.front();
}

}  // namespace
}  // namespace pipetune::testing
