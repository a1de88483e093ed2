// A run exported with `export-trace` and imported again with `import-trace` is the same run
// through the binary: the Chrome file carries the step boundaries, so the
// re-imported run has the trained run's iterations (count and durations to the microsecond) and
// `diff` pairs its ops op for op. It had become one iteration as long as all three steps. The
// file also says that the run's ops waited in the communication nested in them, so the
// re-import's compute and bubbles are the run's (they had been read as overlap: compute 4x).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

json run_json(const std::vector<std::string>& args) {
  const ProcessResult r = run_pipetune(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(r.out, nullptr, false);
}

TEST(TraceRoundTrip, ExportedStepsComeBackAsIterations) {
  ScratchWorkspace w;
  const ProcessResult trained = run_pipetune({"train", "--steps", "3", "--db", w.db});
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const std::string file = (w.dir / "run1.json").string();
  const ProcessResult exported = run_pipetune({"export-trace", "1", "-o", file, "--db", w.db});
  ASSERT_EQ(exported.exit_code, 0) << exported.err;

  // The steps are global instant events (Chrome trace format: ph "i", scope "g"), in time order.
  std::ifstream in(file);
  const json trace = json::parse(in);
  std::vector<double> marks;
  for (const json& e : trace["traceEvents"]) {
    if (e.value("cat", "") != "pipetune.step") continue;
    EXPECT_EQ(e["ph"], "i") << e.dump();
    EXPECT_EQ(e["s"], "g") << e.dump();
    EXPECT_TRUE(e["ts"].is_number()) << e.dump();
    EXPECT_TRUE(e["args"]["step"].is_number_integer()) << e.dump();
    marks.push_back(e["ts"].get<double>());
  }
  ASSERT_EQ(marks.size(), 3u);
  EXPECT_LT(marks[0], marks[1]);
  EXPECT_LT(marks[1], marks[2]);

  const ProcessResult imported =
      run_pipetune({"import-trace", file, "--name", "again", "--db", w.db});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;

  for (int iteration = 1; iteration <= 3; ++iteration) {
    const std::string k = std::to_string(iteration);
    const json a = run_json({"report", "1", "--iteration", k, "--json", "--db", w.db});
    const json b = run_json({"report", "again", "--iteration", k, "--json", "--db", w.db});
    ASSERT_TRUE(a.is_object() && b.is_object());
    EXPECT_EQ(a["iterations"], 3);
    EXPECT_EQ(b["iterations"], 3) << "the re-imported run lost its steps";
    const double ta = a["iteration_time"], tb = b["iteration_time"];
    EXPECT_GT(ta, 0.0);
    EXPECT_NEAR(ta, tb, 1e-6) << "iteration " << k;
  }

  // Iteration by iteration, the same ops in the same order on every rank, with the same times.
  for (const std::string k : {"1", "3"}) {
    const json d = run_json(
        {"diff", "1", "again", "--iteration-a", k, "--iteration-b", k, "--json", "--db", w.db});
    ASSERT_TRUE(d.is_object());
    const json& p = d["op_pairing"];
    EXPECT_GT(p["paired"].get<long long>(), 0) << p.dump(2);
    EXPECT_EQ(p["only_a"], 0) << p.dump(2);
    EXPECT_EQ(p["only_b"], 0) << p.dump(2);
    EXPECT_TRUE(p["identical"].get<bool>()) << p.dump(2);
    for (const json& op : p["largest_differences"])
      EXPECT_NEAR(op["a"].get<double>(), op["b"].get<double>(), 1e-9) << op.dump();
    EXPECT_NEAR(d["iteration_time"]["delta"].get<double>(), 0.0, 1e-6) << d.dump(2);
    // The run's ops called their communication themselves: the file says so, and the re-import
    // takes the time they waited in it out of compute as the run does (compute had been 4x).
    EXPECT_NEAR(d["compute"]["delta"].get<double>(), 0.0, 1e-6) << d["compute"].dump();
    EXPECT_NEAR(d["bubble_ratio"]["delta"].get<double>(), 0.0, 1e-6) << d["bubble_ratio"].dump();
    for (const json& r : d["ranks"]) {
      EXPECT_NEAR(r["compute"]["delta"].get<double>(), 0.0, 1e-6) << r.dump();
      EXPECT_NEAR(r["bubble"]["delta"].get<double>(), 0.0, 1e-6) << r.dump();
    }
  }
  EXPECT_EQ(trace["otherData"]["pipetune.nested_communication"], "wait");

  // With its steps known, the profile's micro-batches per step are checked against the plan it
  // is imported with: the run's own (tiny-train: 8) is accepted, 16 refused naming both.
  const ProcessResult same =
      run_pipetune({"import-trace", file, "--config", "tiny-train", "--db", w.db});
  EXPECT_EQ(same.exit_code, 0) << same.err;
  const ProcessResult other = run_pipetune(
      {"import-trace", file, "--model", "tiny", "--hardware", "a100-80gb", "--tp", "2", "--pp", "2",
       "--dp", "2", "--micro-batch-size", "4", "--microbatches", "16", "--db", w.db});
  EXPECT_EQ(other.exit_code, 2) << other.err;
  EXPECT_NE(other.err.find("the profile's step 1 of 3 shows 8 micro-batch(es) on rank 0, the "
                           "plan's micro-batches per step = 16"),
            std::string::npos)
      << other.err;
  EXPECT_EQ(count_lines(other.err), 1) << other.err;
}

}  // namespace
}  // namespace pipetune::testing
