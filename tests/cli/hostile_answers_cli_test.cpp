// Wrong answers and silently ignored options, through the
// binary: comparisons of unlike runs are refused naming both, durations never show zero
// decimals of a smaller unit, simulated times are bounded with or without a workspace, every
// option is applied or refused, and run names are text that every output can carry.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

ProcessResult expect_ok(const std::vector<std::string>& args) {
  const ProcessResult r = run_pipetune(args);
  EXPECT_EQ(r.exit_code, 0) << command_line(args) << "\n" << r.err;
  return r;
}

std::string write_file(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
  return path.string();
}

// The tiny model on this machine's CPU engine (the cpu-dev-2core hardware): what `train` runs is
// what the run file predicts, so predict --against may compare them. `plan` adds [plan] keys.
std::string cpu_run_file(const fs::path& dir, const std::string& name, const std::string& plan) {
  return write_file(dir / name,
                    "model = \"tiny\"\n[cluster]\nhardware = \"cpu-dev-2core\"\ndevices = 2\n"
                    "[plan]\ntp = 1\npp = 2\ndp = 1\nmicro_batch_size = 1\nmicrobatches = 4\n"
                    "schedule = \"1f1b\"\n" +
                        plan);
}

// ---- 6. predict --against: only a run of the run file's model, plan and hardware --------------

TEST(HostileAnswers, PredictAgainstARunOfTheSameRunFileCompares) {
  ScratchWorkspace s;
  const std::string run = cpu_run_file(s.dir, "cpu.toml", "");
  expect_ok({"train", "--config", run, "--steps", "2", "--db", s.db});
  const ProcessResult r =
      expect_ok({"predict", "--config", run, "--against", "1", "--db", s.db, "--json"});
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("stages").size(), 2u);
  EXPECT_GT(j.at("measured_iteration").get<double>(), 0.0);
}

TEST(HostileAnswers, PredictAgainstAnotherModelPlanOrHardwareIsRefusedNamingBoth) {
  ScratchWorkspace s;
  const std::string run = cpu_run_file(s.dir, "cpu.toml", "");
  expect_ok({"train", "--config", run, "--steps", "1", "--db", s.db});
  // Another model: a llama3-8b prediction against the tiny run (once reported as -98.9%).
  const std::string llama = write_file(
      s.dir / "llama.toml",
      "model = \"llama3-8b\"\n[cluster]\nhardware = \"cpu-dev-2core\"\ndevices = 2\n[plan]\n"
      "tp = 1\npp = 2\ndp = 1\nmicro_batch_size = 1\nmicrobatches = 4\n");
  expect_refused({"predict", "--config", llama, "--against", "1", "--db", s.db},
                 "model: tiny vs llama3-8b");
  // Another plan.
  const std::string zb = cpu_run_file(s.dir, "zb.toml", "");
  {
    std::string text;
    std::getline(std::ifstream(zb), text, '\0');
    text.replace(text.find("\"1f1b\""), 6, "\"zb-h1\"");
    write_file(zb, text);
  }
  expect_refused({"predict", "--config", zb, "--against", "1", "--db", s.db},
                 "schedule: 1f1b vs zb-h1");
  const std::string more = cpu_run_file(s.dir, "more.toml", "recompute = \"full\"\n");
  expect_refused({"predict", "--config", more, "--against", "1", "--db", s.db},
                 "recompute: none vs full");
  // Another hardware: the GPU the tiny-train preset is priced on, against the CPU engine's run.
  ProcessResult r = run_pipetune({"train", "--config", "tiny-train", "--steps", "1", "--db", s.db});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_refused({"predict", "--config", "tiny-train", "--against", "2", "--db", s.db},
                 "hardware: the cpu engine vs a100-80gb, a GPU");
  // A simulation is no measurement.
  expect_ok({"simulate", "--config", run, "--db", s.db, "--no-gantt"});
  expect_refused({"predict", "--config", run, "--against", "3", "--db", s.db},
                 "run 3 is a simulation");
}

// A run that failed before any span was stored: predict --against, report and diff say so
// (it gave "measured -" and -100%, and report "iteration 1 of 1: 0").
TEST(HostileAnswers, ARunWithNoSpansIsNoIteration) {
  ScratchWorkspace s;
  const std::string run = cpu_run_file(s.dir, "cpu.toml", "");
  const ProcessResult failed = run_pipetune({"train", "--config", run, "--steps", "1", "--fault",
                                             "rank=0,step=1,kind=throw", "--db", s.db});
  ASSERT_EQ(failed.exit_code, 1) << failed.err;
  const auto runs = nlohmann::json::parse(expect_ok({"runs", "--json", "--db", s.db}).out);
  ASSERT_EQ(runs.size(), 1u);
  ASSERT_EQ(runs[0].at("spans"), 0) << runs.dump();
  expect_refused({"predict", "--config", run, "--against", "1", "--db", s.db},
                 "run 1 (tiny tp=1 pp=2 dp=1 1f1b, failed) has no spans");
  expect_refused({"report", "1", "--db", s.db}, "has no spans: no iteration to analyse");
  expect_refused({"report", "1", "--json", "--db", s.db}, "has no spans");
  expect_refused({"timeline", "1", "--db", s.db}, "has no spans");
  expect_ok({"train", "--config", run, "--steps", "1", "--db", s.db});
  expect_refused({"diff", "2", "1", "--db", s.db}, "run 1 (");
}

// ---- 7. diff: unlike units, plan-less imports, durations -----------------------------------

TEST(HostileAnswers, DiffOfCostUnitsAndSecondsIsRefused) {
  ScratchWorkspace s;
  expect_ok({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4", "--db", s.db,
             "--no-gantt"});
  expect_ok(
      {"train", "--config", cpu_run_file(s.dir, "cpu.toml", ""), "--steps", "1", "--db", s.db});
  expect_refused({"diff", "1", "2", "--db", s.db},
                 "run 1 counts time in cost units, run 2 in s: unlike units do not compare");
  expect_refused({"diff", "2", "1", "--json", "--db", s.db}, "unlike units do not compare");
  // Two cost-unit simulations do compare, in cost units.
  expect_ok({"simulate", "--schedule", "zb-h1", "--stages", "2", "--microbatches", "4", "--db",
             s.db, "--no-gantt"});
  const auto j = nlohmann::json::parse(expect_ok({"diff", "1", "3", "--json", "--db", s.db}).out);
  EXPECT_EQ(j.at("time_unit"), "cost units");
}

// A Chrome trace of one process and its two GPU kernels: no plan, no pipeline phase names.
std::string kernel_trace(const fs::path& path, int pid, int dur_us) {
  return write_file(
      path,
      "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"pid\": " + std::to_string(pid) +
          ", \"tid\": 1, \"ts\": 0, \"dur\": " + std::to_string(dur_us) +
          ", \"name\": \"matmul_kernel\"}, {\"ph\": \"X\", \"cat\": "
          "\"kernel\", \"pid\": " +
          std::to_string(pid) + ", \"tid\": 1, \"ts\": " + std::to_string(dur_us + 51) +
          ", \"dur\": 100, \"name\": \"add_kernel\"}]}");
}

TEST(HostileAnswers, DiffOfPlanlessImportsSpeaksOfIdleTimeAndNothingPaired) {
  ScratchWorkspace s;
  expect_ok({"import-trace", kernel_trace(s.dir / "a.json", 7, 949), "--db", s.db});
  expect_ok({"import-trace", kernel_trace(s.dir / "b.json", 7, 1200), "--db", s.db});
  const ProcessResult d = expect_ok({"diff", "1", "2", "--db", s.db});
  EXPECT_EQ(d.out.find("bubble"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("rank 0 idle"), std::string::npos) << d.out;
  EXPECT_EQ(d.out.find("same order on every rank"), std::string::npos) << d.out;
  EXPECT_EQ(d.out.find("paired op for op: 0"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("no compute op of A pairs with one of B"), std::string::npos) << d.out;
  const auto j = nlohmann::json::parse(expect_ok({"diff", "1", "2", "--json", "--db", s.db}).out);
  EXPECT_FALSE(j.at("pipeline").get<bool>());
  EXPECT_TRUE(j.contains("idle_ratio"));
  EXPECT_FALSE(j.at("op_pairing").at("identical").get<bool>());
}

// The import's iteration lasts 949 + 51 + 100 us: "1.1 ms" (it printed "1.100 ms"), its busy
// time 949 + 100 us, its idle time "51 us" (it printed "51.000 us").
TEST(HostileAnswers, DurationsShowNoZeroDecimalsOfASmallerUnit) {
  ScratchWorkspace s;
  expect_ok({"import-trace", kernel_trace(s.dir / "a.json", 3, 949), "--db", s.db});
  const ProcessResult report = expect_ok({"report", "1", "--db", s.db});
  EXPECT_EQ(report.out.find(".000 "), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("1.1 ms"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find("1.049 ms"), std::string::npos) << report.out;
  EXPECT_NE(report.out.find(" 51 us"), std::string::npos) << report.out;
  const ProcessResult timeline = expect_ok({"timeline", "1", "--db", s.db, "--width", "20"});
  EXPECT_NE(timeline.out.find("iteration 1 of 1 (1.1 ms)"), std::string::npos) << timeline.out;
  EXPECT_EQ(timeline.out.find(".000 "), std::string::npos) << timeline.out;
  const ProcessResult sim = expect_ok({"simulate", "--config", "tiny", "--no-db", "--no-gantt"});
  EXPECT_EQ(sim.out.find(".000 "), std::string::npos) << sim.out;
}

// ---- 8. simulated times are bounded, with or without a workspace ------------------------------

TEST(HostileAnswers, CostsPastWhatATraceHoldsAreRefusedEverywhere) {
  ScratchWorkspace s;
  const std::vector<std::string> base = {"simulate", "--schedule",     "1f1b", "--stages",
                                         "4",        "--microbatches", "8"};
  for (const std::vector<std::string>& costs : std::vector<std::vector<std::string>>{
           {"--cost-f", "1e308"},
           {"--cost-b", "1e308"},
           {"--cost-w", "1e308"},
           {"--cost-f", "1e9"},  // each op fits; the iteration does not
           {"--comm", "1e308"}}) {
    for (const std::vector<std::string>& where :
         std::vector<std::vector<std::string>>{{"--no-db", "--json"},
                                               {"--no-db", "--no-gantt"},
                                               {"--no-db"},
                                               {"--db", s.db, "--no-gantt"},
                                               {"--db", s.db, "--json"}}) {
      std::vector<std::string> args = base;
      args.insert(args.end(), costs.begin(), costs.end());
      args.insert(args.end(), where.begin(), where.end());
      expect_refused(args, "is beyond what a trace holds");
    }
  }
  expect_refused({"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8",
                  "--vocab", "vocab-1", "--cost-s", "1e308", "--no-db", "--json"},
                 "is beyond what a trace holds");
  expect_refused({"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8",
                  "--vocab", "vocab-1", "--cost-barrier", "inf", "--no-db", "--json"},
                 "--cost-barrier must be a finite number >= 0, got inf");
  // Nothing was stored by any of them.
  EXPECT_FALSE(fs::exists(s.db) &&
               nlohmann::json::parse(expect_ok({"runs", "--json", "--db", s.db}).out).size() > 0);
  // Just within the bound: printed, never inf.
  const ProcessResult fits =
      expect_ok({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2",
                 "--cost-f", "1e8", "--no-db", "--json"});
  EXPECT_EQ(fits.out.find("inf"), std::string::npos) << fits.out;
}

// ---- 13. options are applied or refused, never ignored ----------------------------------------

TEST(HostileAnswers, ARunFilesGlobalBatchIsKeptAgainstFlagsThatChangeIt) {
  ScratchWorkspace s;
  // 8 sequences a step: 1 x 8 micro-batches x dp 1. --microbatches 4 would train 4 (or, with
  // the batch silently dropped, 128 tokens a step): refused as predict refuses the file.
  const std::string run =
      write_file(s.dir / "gb.toml",
                 "model = \"tiny\"\n[cluster]\nhardware = \"cpu-dev-2core\"\ndevices = 2\n[plan]\n"
                 "tp = 1\npp = 2\ndp = 1\nmicro_batch_size = 1\nglobal_batch = 8\n");
  expect_refused({"train", "--config", run, "--microbatches", "4", "--steps", "1", "--no-db"},
                 "global_batch=8 does not equal micro_batch_size*microbatches*dp = 1*4*1 = 4");
  expect_refused({"train", "--config", run, "--micro-batch-size", "2", "--steps", "1", "--no-db"},
                 "global_batch=8 does not equal");
  // Flags that keep the batch are applied.
  const auto j = nlohmann::json::parse(
      expect_ok({"train", "--config", run, "--microbatches", "4", "--micro-batch-size", "2",
                 "--steps", "1", "--no-db", "--json"})
          .out);
  EXPECT_EQ(j.at("plan").at("microbatches"), 4);
  // Without global_batch in the file, the flags decide the batch as before.
  const std::string free = cpu_run_file(s.dir, "free.toml", "");
  expect_ok({"train", "--config", free, "--microbatches", "2", "--steps", "1", "--no-db"});
}

TEST(HostileAnswers, FaultsThatWouldNeverFireAreRefused) {
  expect_refused({"train", "--steps", "2", "--no-db", "--fault", "rank=0,step=99,kind=throw"},
                 "--fault: step 99 is beyond the run's --steps 2");
  expect_refused({"train", "--steps", "2", "--no-db", "--fault", "rank=0,rank=1,step=1,kind=throw"},
                 "rank is given twice");
  expect_refused(
      {"train", "--steps", "2", "--no-db", "--fault", "rank=0,step=1,kind=slow,kind=throw"},
      "kind is given twice");
}

TEST(HostileAnswers, ACheckpointCadenceWithoutACheckpointIsRefused) {
  expect_refused({"train", "--steps", "1", "--no-db", "--checkpoint-every", "1"},
                 "--checkpoint-every needs --checkpoint DIR");
}

TEST(HostileAnswers, NonFiniteOrNonPositiveLearningRatesAreRefused) {
  for (const char* lr : {"inf", "-inf", "nan", "0", "-1", "1e39"})
    expect_refused({"train", "--steps", "1", "--no-db", "--lr", lr},
                   "--lr must be a finite positive number");
}

TEST(HostileAnswers, ScheduleOptionsASheduleDoesNotReadAreRefused) {
  // --memory-limit bounds zb-h2, zb-v and skippipe-ca only; 1f1b ignored it.
  for (const char* schedule : {"1f1b", "gpipe", "interleaved-1f1b", "zb-h1", "v-half"})
    expect_refused({"simulate", "--schedule", schedule, "--stages", "4", "--microbatches", "8",
                    "--memory-limit", "3", "--no-db", "--no-gantt"},
                   std::string("applies to the memory-bounded schedules zb-h2, zb-v and "
                               "skippipe-ca only, not ") +
                       schedule);
  expect_ok({"simulate", "--schedule", "zb-h2", "--stages", "4", "--microbatches", "8",
             "--memory-limit", "6", "--no-db", "--no-gantt"});
  expect_ok({"simulate", "--schedule", "skippipe-ca", "--stages", "4", "--microbatches", "8",
             "--memory-limit", "2", "--no-db", "--no-gantt"});
  // group_size: interleaved-1f1b's only, from the command line and from a run file alike.
  expect_refused({"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8",
                  "--group-size", "2", "--no-db"},
                 "a micro-batch group size (2) applies to interleaved-1f1b only, not 1f1b");
  ScratchWorkspace s;
  const std::string run = cpu_run_file(s.dir, "group.toml", "group_size = 2\n");
  expect_refused({"simulate", "--config", run, "--no-db"},
                 "a micro-batch group size (2) applies to interleaved-1f1b only, not 1f1b");
  expect_refused({"predict", "--config", run},
                 "a micro-batch group size (2) applies to interleaved-1f1b only, not 1f1b");
  expect_refused({"train", "--config", run, "--steps", "1", "--no-db"},
                 "a micro-batch group size (2) applies to interleaved-1f1b only, not 1f1b");
}

// Each chart row between the bars: `timeline --width 1` drew 10 columns.
TEST(HostileAnswers, TimelineDrawsTheWidthAsked) {
  ScratchWorkspace s;
  expect_ok({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4", "--db", s.db,
             "--no-gantt"});
  for (int width : {1, 2, 9, 10, 37}) {
    const ProcessResult r =
        expect_ok({"timeline", "1", "--db", s.db, "--width", std::to_string(width)});
    int rows = 0;
    std::size_t at = 0;
    while ((at = r.out.find(" |", at)) != std::string::npos) {
      const std::size_t end = r.out.find("|\n", at + 2);
      ASSERT_NE(end, std::string::npos) << r.out;
      EXPECT_EQ(static_cast<int>(end - at - 2), width) << r.out;
      at = end + 2;
      ++rows;
    }
    EXPECT_EQ(rows, 2) << r.out;
  }
}

// ---- 16. names -------------------------------------------------------------------------------

TEST(HostileAnswers, NamesThatAreNotTextAreRefusedByEveryCommandThatStores) {
  ScratchWorkspace s;
  const std::string trace = kernel_trace(s.dir / "k.json", 1, 10);
  for (const auto& [name, message] : std::vector<std::pair<std::string, std::string>>{
           {"ab\xff", "run name: byte 2 (0xff) is not valid UTF-8"},
           {"\xc0\xaf", "run name: byte 0 (0xc0) is not valid UTF-8"},  // overlong "/"
           {"a\x07"
            "b",
            "run name: byte 1 is a control character (U+0007)"},
           {"line\nbreak", "run name: byte 4 is a control character (U+000A)"},
           {"esc\x1b[2J", "run name: byte 3 is a control character (U+001B)"},
           {"c1 \xc2\x9b", "run name: byte 3 is a control character (U+009B)"}}) {
    expect_refused({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2",
                    "--db", s.db, "--no-gantt", "--name", name},
                   message);
    expect_refused({"import-trace", trace, "--db", s.db, "--name", name}, message);
    expect_refused({"train", "--steps", "1", "--db", s.db, "--name", name}, message);
  }
  // Nothing was stored; text outside ASCII is a name like any other.
  expect_ok({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--db", s.db,
             "--no-gantt", "--name", "Überlauf \xe2\x9c\x93"});
  const auto runs = nlohmann::json::parse(expect_ok({"runs", "--json", "--db", s.db}).out);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].at("name"), "Überlauf \xe2\x9c\x93");
}

// --no-db stores nothing, so a name there would name nothing: refused, not taken and dropped.
TEST(HostileAnswers, ANameWithoutAWorkspaceIsRefused) {
  expect_refused({"train", "--steps", "1", "--no-db", "--name", "kept?"}, {"--name", "--no-db"});
  expect_refused({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2",
                  "--no-db", "--no-gantt", "--name", "kept?"},
                 {"--name", "--no-db"});
}

// A name a default is made from (a file's path) is made printable, not refused.
TEST(HostileAnswers, DefaultNamesFromPathsAreStoredPrintable) {
  ScratchWorkspace s;
  const std::string trace = kernel_trace(s.dir / "k\x01\xff.json", 1, 10);
  expect_ok({"import-trace", trace, "--db", s.db});
  const auto runs = nlohmann::json::parse(expect_ok({"runs", "--json", "--db", s.db}).out);
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_NE(runs[0].at("name").get<std::string>().find("k\\x01\\xff.json"), std::string::npos);
}

// A workspace written before names were checked: its bad names never break an output.
TEST(HostileAnswers, OldWorkspacesWithBadNamesPrintAndDumpCleanly) {
  ScratchWorkspace s;
  for (int i = 0; i < 2; ++i)
    expect_ok({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--db",
               s.db, "--no-gantt"});
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(s.db.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "UPDATE runs SET name = CAST(X'41FF1B5B324A07' AS TEXT)", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  // Interned names (the activation counter's here; an imported profile's span names) too.
  ASSERT_EQ(sqlite3_exec(db, "UPDATE names SET text = CAST(X'6E616DFE65' AS TEXT)", nullptr,
                         nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  const ProcessResult runs_json = expect_ok({"runs", "--json", "--db", s.db});
  const auto runs = nlohmann::json::parse(runs_json.out);  // valid JSON: U+FFFD for the 0xff
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0].at("name"), "A\xef\xbf\xbd\x1b[2J\x07");
  const ProcessResult diff_json = expect_ok({"diff", "1", "2", "--json", "--db", s.db});
  EXPECT_NO_THROW((void)nlohmann::json::parse(diff_json.out));
  expect_ok({"report", "1", "--json", "--db", s.db});
  const std::string exported = (s.dir / "run1.json").string();
  expect_ok({"export-trace", "1", "-o", exported, "--db", s.db});
  std::string text;
  std::getline(std::ifstream(exported), text, '\0');
  EXPECT_NE(text.find("nam\xef\xbf\xbd"
                      "e"),
            std::string::npos);  // U+FFFD for the 0xfe
  EXPECT_NO_THROW((void)nlohmann::json::parse(text));
  // Human output escapes the control characters and the bad byte.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"runs", "--db", s.db},
                                             {"report", "1", "--db", s.db},
                                             {"timeline", "1", "--db", s.db},
                                             {"diff", "1", "2", "--db", s.db}}) {
    const ProcessResult r = expect_ok(args);
    EXPECT_NE(r.out.find("A\\xff\\x1b[2J\\x07"), std::string::npos) << command_line(args) << r.out;
    EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << command_line(args);
    EXPECT_EQ(r.out.find('\x07'), std::string::npos) << command_line(args);
  }
}

}  // namespace
}  // namespace pipetune::testing
