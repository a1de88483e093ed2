// The workspace commands end to end, through the built binary: simulate and train store their
// runs, and runs / report / timeline / diff / export-trace / import-nsys / import-trace read
// them back. References: the 1F1B closed form for a simulated run, the engine's own per-step
// output for a measured one, the real-trace READMEs for imports; and the bad-input rules (one
// line, exit 2, no overwrite without --force, a killed run shows as interrupted).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "support/cli_expect.hpp"
#include "support/required_data.hpp"
#include "support/run_process.hpp"

namespace pipetune {
namespace {

using testing::expect_input_error;

namespace fs = std::filesystem;
using testing::run_pipetune;
using testing::slurp;

using Workspace = testing::ScratchWorkspace;

nlohmann::json json_of(const testing::ProcessResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

int lines(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

TEST(WorkspaceCli, SimulatedRunReportsTheOneFOneBClosedForm) {
  Workspace w;
  const auto sim = json_of(
      w.run({"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--json"}));
  const std::int64_t id = sim.at("run_id");
  const auto runs = json_of(w.run({"runs", "--json"}));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].at("kind"), "simulated");
  EXPECT_EQ(runs[0].at("status"), "complete");
  EXPECT_EQ(runs[0].at("iteration_time"), 33.0);

  // Equal costs F = 1, B + W = 2, p = 4, m = 8: iteration (m + p - 1) * 3 = 33, every stage
  // busy m * 3 = 24, bubble 9, ratio (p - 1) / (m + p - 1) = 3 / 11.
  const auto rep = json_of(w.run({"report", std::to_string(id), "--json"}));
  EXPECT_EQ(rep.at("run").at("id"), id);
  EXPECT_DOUBLE_EQ(rep.at("iteration_time").get<double>(), 33.0);
  EXPECT_NEAR(rep.at("bubble_ratio").get<double>(), 3.0 / 11.0, 1e-12);
  ASSERT_EQ(rep.at("stages").size(), 4u);
  for (int s = 0; s < 4; ++s) {
    const auto& st = rep.at("stages")[static_cast<std::size_t>(s)];
    EXPECT_EQ(st.at("stage"), s);
    EXPECT_DOUBLE_EQ(st.at("compute").get<double>(), 24.0);
    EXPECT_DOUBLE_EQ(st.at("bubble").get<double>(), 9.0);
    EXPECT_DOUBLE_EQ(st.at("communication").get<double>(), 0.0);
    // Stage s waits s forwards before its first op; the rest of its bubble is in the drain.
    EXPECT_DOUBLE_EQ(st.at("warmup_bubble").get<double>(), s);
    EXPECT_TRUE(st.contains("peak_memory_bytes"));
  }
  EXPECT_DOUBLE_EQ(rep.at("critical_path").at("length").get<double>(), 33.0);

  const auto tl = w.run({"timeline", std::to_string(id), "--width", "66"});
  ASSERT_EQ(tl.exit_code, 0) << tl.err;
  EXPECT_NE(tl.out.find("rank 3 compute |"), std::string::npos) << tl.out;
}

TEST(WorkspaceCli, MeasuredRunIsStoredAsItTrainsAndReports) {
  Workspace w;
  const auto train = json_of(w.run({"train", "--steps", "3", "--json"}));
  const std::int64_t id = train.at("run_id");
  const auto runs = json_of(w.run({"runs", "--json"}));
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].at("kind"), "measured");
  EXPECT_EQ(runs[0].at("status"), "complete");
  EXPECT_GT(runs[0].at("spans").get<std::int64_t>(), 100);
  const auto rep = json_of(w.run({"report", std::to_string(id), "--json"}));
  EXPECT_EQ(rep.at("iterations"), 3);
  EXPECT_EQ(rep.at("iteration"), 3);
  ASSERT_EQ(rep.at("stages").size(), 8u);  // tiny-train: tp=2 pp=2 dp=2
  for (const auto& st : rep.at("stages")) {
    EXPECT_EQ(st.at("stage"), st.at("rank").get<int>() / 4);  // tp * dp ranks per stage
    EXPECT_GT(st.at("compute").get<double>(), 0.0);
    EXPECT_GT(st.at("peak_memory_bytes").get<double>(), 0.0);
    EXPECT_NEAR(st.at("compute").get<double>() + st.at("bubble").get<double>(),
                rep.at("iteration_time").get<double>(), 1e-9);
  }
  // The first iteration is there too, and an iteration past the last is refused.
  EXPECT_EQ(
      json_of(w.run({"report", std::to_string(id), "--json", "--iteration", "1"})).at("iteration"),
      1);
  expect_input_error(w.run({"report", std::to_string(id), "--iteration", "4"}),
                     "has 3 iteration(s)");
}

TEST(WorkspaceCli, ExportTraceNeverOverwritesWithoutForce) {
  Workspace w;
  ASSERT_EQ(w.run({"simulate", "--schedule", "gpipe", "--stages", "2", "--microbatches", "3",
                   "--no-gantt"})
                .exit_code,
            0);
  const std::string out = (w.dir / "t.json").string();
  const auto first = w.run({"export-trace", "1", "-o", out});
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const auto trace = nlohmann::json::parse(slurp(out));
  int spans = 0;
  for (const auto& e : trace.at("traceEvents")) spans += e.at("ph") == "X";
  EXPECT_EQ(spans, 2 * 3 * 2);  // F and BW of 3 micro-batches on 2 stages
  std::ofstream(out) << "keep me";
  expect_input_error(w.run({"export-trace", "1", "-o", out}), "exists (use --force");
  EXPECT_EQ(slurp(out), "keep me");
  EXPECT_EQ(w.run({"export-trace", "1", "-o", out, "--force"}).exit_code, 0);
  EXPECT_NE(slurp(out), "keep me");
  // The same rule for --trace of simulate.
  expect_input_error(w.run({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches",
                            "2", "--trace", out}),
                     "exists");
}

TEST(WorkspaceCli, DiffOfTwoPlansAndOfARunWithItself) {
  Workspace w;
  ASSERT_EQ(w.run({"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "4",
                   "--name", "m4", "--no-gantt"})
                .exit_code,
            0);
  ASSERT_EQ(w.run({"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8",
                   "--name", "m8", "--no-gantt"})
                .exit_code,
            0);
  const auto same = json_of(w.run({"diff", "m4", "m4", "--json"}));
  EXPECT_EQ(same.at("iteration_time").at("delta"), 0.0);
  // 1F1B equal costs: (m + p - 1) * 3 = 21 for m = 4 and 33 for m = 8.
  const auto d = json_of(w.run({"diff", "m4", "m8", "--json"}));
  EXPECT_DOUBLE_EQ(d.at("iteration_time").at("a").get<double>(), 21.0);
  EXPECT_DOUBLE_EQ(d.at("iteration_time").at("b").get<double>(), 33.0);
  EXPECT_NEAR(d.at("iteration_time").at("relative").get<double>(), 12.0 / 21.0, 1e-12);
  ASSERT_EQ(d.at("ranks").size(), 4u);
  const auto human = w.run({"diff", "m4", "m8"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_NE(human.out.find("+57.1%"), std::string::npos) << human.out;
}

fs::path real_trace(const char* relative) {
  return fs::path(PIPETUNE_SOURCE_DIR).parent_path() / "shared/data/real_traces" / relative;
}

TEST(WorkspaceCli, ImportsRealProfilesAndReportsThem) {
  const fs::path nsys = real_trace("nsys-2gpu-torchrun/mfu_2gpu_before.sqlite");
  const fs::path pippy = real_trace("pippy-4stage-toy/pipe_visualized.json");
  PIPETUNE_REQUIRE_SHARED(nsys);
  PIPETUNE_REQUIRE_SHARED(pippy);
  Workspace w;
  const auto in = w.run({"import-nsys", nsys.string(), "--name", "fastvideo"});
  ASSERT_EQ(in.exit_code, 0) << in.err;
  EXPECT_NE(in.out.find("2 ranks"), std::string::npos) << in.out;
  const auto rep = json_of(w.run({"report", "fastvideo", "--json"}));
  EXPECT_EQ(rep.at("run").at("kind"), "imported");
  // Two sequence-parallel ranks, no plan and no pipeline phases: ranks, not stages.
  EXPECT_FALSE(rep.at("pipeline").get<bool>());
  EXPECT_FALSE(rep.contains("stages"));
  EXPECT_FALSE(rep.contains("bubble_ratio"));
  ASSERT_EQ(rep.at("ranks").size(), 2u);
  // README: 1,993 and 2,017 kernels on devices 0 and 1 (ranks 0 and 1), 33 NCCL SendRecv each
  // taking 17,172,652 and 8,229,100 ns; kernels' union busy time 270,863,484 and 264,324,724 ns
  // on one stream each (the summed durations exceed the union only where kernels overlap, by
  // microseconds).
  const std::int64_t kernels_want[] = {1993, 2017};
  const double busy_ns[] = {270863484, 264324724}, nccl_ns[] = {17172652, 8229100};
  for (int r = 0; r < 2; ++r) {
    const auto& kinds = rep.at("ranks")[static_cast<std::size_t>(r)].at("kinds");
    double kernel_time = 0.0, nccl = 0.0;
    std::int64_t count = 0, nccl_count = 0;
    for (const auto& [kind, v] : kinds.items()) {
      const bool is_nccl = kind == "send" || kind == "recv";
      if (kind == "kernel" || is_nccl) {
        kernel_time += v.at("time").get<double>();
        count += v.at("count").get<std::int64_t>();
      }
      if (is_nccl) {
        nccl += v.at("time").get<double>();
        nccl_count += v.at("count").get<std::int64_t>();
      }
    }
    EXPECT_EQ(count, kernels_want[r]) << "rank " << r;
    EXPECT_EQ(nccl_count, 33) << "rank " << r;
    EXPECT_NEAR(nccl, nccl_ns[r] * 1e-9, 1e-9) << "rank " << r;
    EXPECT_GE(kernel_time, busy_ns[r] * 1e-9 - 1e-9) << "rank " << r;
    EXPECT_NEAR(kernel_time, busy_ns[r] * 1e-9, 50e-6) << "rank " << r;
  }

  const auto human = w.run({"report", "fastvideo"});
  ASSERT_EQ(human.exit_code, 0) << human.err;
  EXPECT_EQ(human.out.find("stage"), std::string::npos) << human.out;
  EXPECT_EQ(human.out.find("bubble"), std::string::npos) << human.out;
  EXPECT_NE(human.out.find("GPU idle"), std::string::npos) << human.out;

  // PiPPy, 4 stages x 4 micro-batches, fill-drain: stage busy 8.088 / 8.087 / 8.169 / 8.564 s
  // of a 14.686 s makespan (README). Busy counts every event; stage 3's sync barriers (S, a few
  // tenths of a ms) are communication, so busy = compute + exposed communication.
  ASSERT_EQ(w.run({"import-trace", pippy.string(), "--name", "pippy"}).exit_code, 0);
  const auto p = json_of(w.run({"report", "pippy", "--json"}));
  EXPECT_TRUE(p.at("pipeline").get<bool>());  // inferred from the pipeline phases it names
  EXPECT_NEAR(p.at("iteration_time").get<double>(), 14.6863155, 1e-6);
  const double busy[] = {8.088, 8.087, 8.169, 8.564};
  ASSERT_EQ(p.at("stages").size(), 4u);
  for (int s = 0; s < 4; ++s)
    EXPECT_NEAR(
        p.at("stages")[static_cast<std::size_t>(s)].at("compute").get<double>() +
            p.at("stages")[static_cast<std::size_t>(s)].at("exposed_communication").get<double>(),
        busy[s], 0.0005)
        << "stage " << s;
}

// An imported run told its plan: stored with it, grouped into stages by it; a plan its ranks
// contradict, or a partial description, is refused with nothing stored.
TEST(WorkspaceCli, ImportedRunsKeepThePlanTheyWereGiven) {
  const fs::path nsys = real_trace("nsys-2gpu-torchrun/mfu_2gpu_before.sqlite");
  PIPETUNE_REQUIRE_SHARED(nsys);
  Workspace w;
  expect_input_error(w.run({"import-nsys", nsys.string(), "--model", "tiny", "--hardware",
                            "h100-sxm", "--tp", "2", "--pp", "2", "--dp", "2"}),
                     "starts 2 rank(s), the plan's tp*pp*dp = 2*2*2 = 8 ranks");
  expect_input_error(w.run({"import-nsys", nsys.string(), "--tp", "1", "--pp", "2"}),
                     "the profiled run's description needs --model too");
  expect_input_error(w.run({"import-nsys", nsys.string(), "--config", "tiny-train", "--tp", "1"}),
                     "give either it or --model --hardware --tp --pp --dp, not both");
  EXPECT_FALSE(fs::exists(w.db)) << "a refused import left a workspace";

  // The two ranks as a 2-stage pipeline (as if it were one): stages 0 and 1 by the plan.
  const auto in = w.run({"import-nsys", nsys.string(), "--name", "as-pp2", "--model", "tiny",
                         "--hardware", "h100-sxm", "--tp", "1", "--pp", "2", "--dp", "1"});
  ASSERT_EQ(in.exit_code, 0) << in.err;
  EXPECT_NE(in.out.find("(plan tp=1 pp=2 dp=1"), std::string::npos) << in.out;
  const auto rep = json_of(w.run({"report", "as-pp2", "--json"}));
  EXPECT_TRUE(rep.at("pipeline").get<bool>());
  ASSERT_EQ(rep.at("stages").size(), 2u);
  EXPECT_EQ(rep.at("stages")[1].at("stage"), 1);
  // Data-parallel: one stage of two ranks.
  ASSERT_EQ(w.run({"import-nsys", nsys.string(), "--name", "as-dp2", "--model", "tiny",
                   "--hardware", "h100-sxm", "--tp", "1", "--pp", "1", "--dp", "2"})
                .exit_code,
            0);
  const auto dp = json_of(w.run({"report", "as-dp2", "--json"}));
  ASSERT_EQ(dp.at("stages").size(), 2u);
  EXPECT_EQ(dp.at("stages")[1].at("stage"), 0);
}

// A workspace this process may not write (read-only file in a read-only folder) is read by
// every reading command, and a writing one is refused before it works. As root (CI) the
// commands run as nobody through setpriv, since root may write anything.
TEST(WorkspaceCli, AReadOnlyWorkspaceIsReadAndNeverWritten) {
  Workspace w;
  ASSERT_EQ(
      w.run({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4"}).exit_code,
      0);
  const fs::path bin_dir = w.dir / "bin";
  fs::create_directories(bin_dir);
  const fs::path bin = bin_dir / "pipetune";
  fs::copy_file(PIPETUNE_BIN, bin);
  fs::permissions(w.dir, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                             fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(bin_dir, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(bin, fs::perms::owner_all | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(w.db, fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  fs::permissions(w.dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::others_read |
                             fs::perms::others_exec);
  const bool root = ::geteuid() == 0;
  if (root && !fs::exists("/usr/bin/setpriv")) GTEST_SKIP() << "root without setpriv";
  const auto run_ro = [&](std::vector<std::string> args) {
    args.push_back("--db");
    args.push_back(w.db);
    if (!root) return testing::run_program(bin.string(), args, "/");
    std::vector<std::string> as_nobody = {"--reuid=65534", "--regid=65534", "--clear-groups",
                                          bin.string()};
    as_nobody.insert(as_nobody.end(), args.begin(), args.end());
    return testing::run_program("/usr/bin/setpriv", as_nobody, "/");
  };
  for (const std::vector<std::string>& reading : {std::vector<std::string>{"runs"},
                                                  {"report", "1"},
                                                  {"timeline", "1", "--width", "40"},
                                                  {"diff", "1", "1"}}) {
    const auto r = run_ro(reading);
    EXPECT_EQ(r.exit_code, 0) << reading[0] << ": " << r.err;
  }
  const auto write =
      run_ro({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4"});
  EXPECT_EQ(write.exit_code, 2) << write.err;
  EXPECT_NE(write.err.find("workspace is read-only here (no write permission)"), std::string::npos)
      << write.err;
  fs::permissions(w.dir, fs::perms::owner_all);  // for the clean-up
}

TEST(WorkspaceCli, BadWorkspacesAndRunsAreOneLineErrors) {
  Workspace w;
  const std::string junk = (w.dir / "junk.db").string();
  std::ofstream(junk) << "this is not a database, just text that is long enough to matter....";
  auto r = run_pipetune({"runs", "--db", junk});
  expect_input_error(r, "junk.db");
  expect_input_error(w.run({"report", "1"}), "w.db");  // no workspace there yet
  ASSERT_EQ(w.run({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2",
                   "--no-gantt"})
                .exit_code,
            0);
  expect_input_error(w.run({"report", "nosuchrun"}), "nosuchrun");
  expect_input_error(w.run({"import-nsys", junk}), "junk.db");
}

// Starts `pipetune train` for 100000 steps into `db` in the background, stdout to `out`
// (stderr discarded); returns its pid (the tests kill it), or -1 when fork fails.
pid_t start_long_training(const std::string& db, const std::string& out) {
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  const int null_fd = ::open("/dev/null", O_WRONLY);
  ::dup2(out_fd, 1);
  ::dup2(null_fd, 2);
  std::string bin = PIPETUNE_BIN;
  std::vector<std::string> args = {bin, "train", "--steps", "100000", "--db", db};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(bin.c_str(), argv.data());
  ::_exit(127);
}

// A training run killed with SIGKILL while it writes shows as interrupted, with the spans it
// had committed.
TEST(WorkspaceCli, KilledTrainingRunShowsAsInterrupted) {
  Workspace w;
  const pid_t pid = start_long_training(w.db, "/dev/null");
  ASSERT_GT(pid, 0);
  // Wait until some spans are committed (the writer commits at least every 200 ms).
  std::int64_t spans = 0;
  for (int i = 0; i < 600 && spans == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const auto r = w.run({"runs", "--json"});
    if (r.exit_code != 0) continue;
    const auto j = nlohmann::json::parse(r.out);
    if (!j.empty()) {
      EXPECT_EQ(j[0].at("status"), "running");
      spans = j[0].at("spans");
    }
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_GT(spans, 0) << "the run never committed a span";
  const auto after = json_of(w.run({"runs", "--json"}));
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].at("status"), "interrupted");
  EXPECT_GE(after[0].at("spans").get<std::int64_t>(), spans);
  // The interrupted run still reports.
  EXPECT_EQ(w.run({"report", "1", "--json"}).exit_code, 0);
}

// Every step `train` printed is in the workspace, even when the process is killed right after:
// a step is printed only once its records are committed (it was one step behind).
TEST(WorkspaceCli, EveryPrintedStepSurvivesAKill) {
  Workspace w;
  const std::string out = (w.dir / "train.out").string();
  const pid_t pid = start_long_training(w.db, out);
  ASSERT_GT(pid, 0);
  const auto printed_steps = [&] {
    std::ifstream in(out);
    std::string line;
    int last = 0;
    while (std::getline(in, line))
      if (line.rfind("step ", 0) == 0) last = std::stoi(line.substr(5));
    return last;
  };
  for (int i = 0; i < 600 && printed_steps() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  const int printed = printed_steps();
  ASSERT_GE(printed, 3) << "the run never printed three steps";
  const auto rep = json_of(w.run({"report", "1", "--json"}));
  EXPECT_GE(rep.at("iterations").get<int>(), printed)
      << "printed step " << printed << ", the workspace has " << rep.at("iterations");
}

// A workspace with damaged pages fails `train` before the first step, not after the last one
// (when the run could no longer be stored).
TEST(WorkspaceCli, ACorruptWorkspaceFailsTrainingBeforeItStarts) {
  Workspace w;
  ASSERT_EQ(w.run({"train", "--steps", "3"}).exit_code, 0);
  const auto size = fs::file_size(w.db);
  ASSERT_GT(size, 4u * 4096u);
  {
    std::fstream f(w.db, std::ios::in | std::ios::out | std::ios::binary);
    std::string junk;
    while (junk.size() < 2 * 4096) junk += "\xde\xad\xbe\xef";
    f.seekp(
        static_cast<std::streamoff>((size / 4096 - 3) * 4096));  // two b-tree pages near the end
    f.write(junk.data(), static_cast<std::streamsize>(junk.size()));
  }
  const auto r = w.run({"train", "--steps", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  // SQLite's quick_check finds the damaged pages that opening the workspace does not read ("...
  // workspace is corrupt (On tree page ...): nothing was run"); where the damage lands depends
  // on the run's timings, and a page that opening reads is reported as "database is corrupt".
  EXPECT_NE(r.err.find(" is corrupt ("), std::string::npos) << r.err;
  EXPECT_EQ(lines(r.err), 1) << r.err;
  EXPECT_EQ(r.out.find("step "), std::string::npos) << "it trained:\n" << r.out;
}

}  // namespace
}  // namespace pipetune
