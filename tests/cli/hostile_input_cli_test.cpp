// Inputs a hostile or careless user gives (issue 17's list), through the binary: each is refused
// with one line naming what is wrong and exit 2, before any allocation, search or training, and
// a setting is never silently replaced by a default.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

struct Case {
  std::vector<std::string> args;
  std::string message;
};

void expect_refused(const Case& c) {
  testing::expect_refused(c.args, c.message);
}

const std::vector<std::string> kPredict = {
    "predict",        "--model", "tiny", "--hardware", "h100-sxm", "--gpus", "8",
    "--global-batch", "64",      "--tp", "1",          "--pp",     "1"};

TEST(HostileInput, CountsOfZeroAreRefusedNotReplaced) {
  for (const Case& c : std::vector<Case>{
           {{"train", "--microbatches", "0", "--steps", "1", "--no-db"},
            "--microbatches must be at least 1, not 0"},
           {{"train", "--micro-batch-size", "0", "--steps", "1", "--no-db"},
            "--micro-batch-size must be at least 1, not 0"},
           {{"simulate", "--schedule", "1f1b", "--stages", "0", "--microbatches", "8", "--no-db"},
            "--stages must be at least 1, not 0"},
           {{"simulate", "--schedule", "interleaved-1f1b", "--stages", "4", "--microbatches", "8",
             "--chunks", "0", "--no-db"},
            "--chunks must be at least 1, not 0"},
           {{"simulate", "--schedule", "interleaved-1f1b", "--stages", "4", "--microbatches", "8",
             "--group-size", "0", "--no-db"},
            "--group-size must be at least 1, not 0"},
           {{"simulate", "--schedule", "zb-h2", "--stages", "4", "--microbatches", "8",
             "--memory-limit", "0", "--no-db"},
            "--memory-limit must be a positive number of micro-batches"},
           {{"simulate", "--schedule", "zb-h2", "--stages", "4", "--microbatches", "8",
             "--memory-limit", "nan", "--no-db"},
            "--memory-limit must be a positive number of micro-batches, not nan"},
           // The number as given, not std::to_string's six decimals ("-1.500000").
           {{"simulate", "--schedule", "zb-h2", "--stages", "4", "--microbatches", "8",
             "--memory-limit", "-1.5", "--no-db"},
            "--memory-limit must be a positive number of micro-batches, not -1.5"},
           {{"simulate", "--schedule", "skippipe", "--stages", "4", "--microbatches", "8",
             "--skip-ratio", "1.25", "--no-db"},
            "at least 0 and below 1, not 1.25"},
           {with(kPredict, {"--seq", "0"}), "--seq: must be at least 1, not 0"},
           {with(kPredict, {"--nodes-of", "0"}), "--nodes-of: must be at least 1, not 0"},
           // A given 0 or negative was taken as "derive it" (dp = gpus / (tp*pp)).
           {with(kPredict, {"--dp", "0"}), "--dp must be at least 1, not 0"},
           {with(kPredict, {"--dp", "-1"}), "--dp must be at least 1, not -1"},
           {with(kPredict, {"--chunks", "0"}), "--chunks must be at least 1, not 0"},
       })
    expect_refused(c);
}

TEST(HostileInput, AbsurdSizesAreRefusedBeforeAnyWork) {
  for (const Case& c : std::vector<Case>{
           {{"simulate", "--schedule", "1f1b", "--stages", "100000", "--microbatches", "1000000000",
             "--no-db"},
            "= 100000000000000 forward passes; at most 16777216 are generated"},
           {{"predict", "--model", "tiny", "--hardware", "a100-80gb", "--gpus", "8",
             "--global-batch", "2000000000", "--tp", "1", "--pp", "2"},
            "global_batch 2000000000 is beyond what pipetune plans (at most 16777216 sequences)"},
           {{"predict", "--model", "tiny", "--hardware", "a100-80gb", "--gpus", "8",
             "--global-batch", "16000000", "--tp", "1", "--pp", "4"},
            "at most 16777216 are generated"},
           {{"simulate", "--schedule", "1f1b", "--stages", "4", "--microbatches", "8", "--width",
             "100000000", "--no-db"},
            "--width must be 1 to 10000 columns (0: the terminal's), not 100000000"},
           {{"train", "--threads", "100000", "--steps", "1", "--no-db"},
            "--threads must be 0 (cores / ranks) to 1024 per rank, not 100000"},
           {{"train", "--seed", "99999999999999999999999", "--steps", "1", "--no-db"},
            "--seed must be an integer from 0 to 18446744073709551615, not "
            "'99999999999999999999999'"},
       })
    expect_refused(c);
}

TEST(HostileInput, ADirectoryOrADeviceIsNoModelFile) {
  expect_refused({{"predict", "--model", "/tmp", "--hardware", "h100-sxm", "--gpus", "8",
                   "--global-batch", "64", "--tp", "1", "--pp", "1"},
                  "model file '/tmp' is a directory, not a TOML file"});
  expect_refused({{"train", "--model", "/dev/zero", "--steps", "1", "--no-db"},
                  "model file '/dev/zero' is not a regular file (a device, pipe or socket)"});
}

TEST(HostileInput, TuneListsEveryVocabularyOptionItSearches) {
  expect_refused(
      {{"tune", "--model", "tiny", "--hardware", "h100-sxm", "--gpus", "8", "--global-batch", "64",
        "--vocab-modes", "zzz", "--no-db"},
       "--vocab-modes names an unknown mode 'zzz' (valid: none, redis, auto, vocab-1, vocab-2, "
       "interlaced)"});
}

// One validation for every command: a one-token vocabulary, and a vocabulary smaller than its
// shards, are refused alike by predict, simulate, tune and train.
TEST(HostileInput, AModelEveryCommandRefusesAlike) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipetune_hostile_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string model = (dir / "one-token.toml").string();
  std::ofstream(model) << "layers = 2\nhidden = 64\nheads = 4\nvocab = 1\nseq_len = 32\n";
  const std::string msg = "vocab=1: a vocabulary of one token leaves nothing to predict";
  expect_refused({{"predict", "--model", model, "--hardware", "h100-sxm", "--gpus", "8",
                   "--global-batch", "64", "--tp", "1", "--pp", "1"},
                  msg});
  expect_refused({{"tune", "--model", model, "--hardware", "h100-sxm", "--gpus", "8",
                   "--global-batch", "64", "--no-db"},
                  msg});
  expect_refused({{"train", "--model", model, "--steps", "1", "--no-db"}, msg});
  const std::string run = (dir / "run.toml").string();
  std::ofstream(run) << "model = \"" << model
                     << "\"\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 2\n[plan]\npp = 2\n";
  expect_refused({{"simulate", "--config", run, "--no-db"}, msg});

  const std::string narrow = (dir / "narrow.toml").string();
  std::ofstream(narrow) << "layers = 2\nhidden = 64\nheads = 4\nvocab = 3\nseq_len = 32\n";
  const std::string shards = "vocab=3 is smaller than its 4 shards (tp)";
  expect_refused({{"predict", "--model", narrow, "--hardware", "h100-sxm", "--gpus", "4",
                   "--global-batch", "64", "--tp", "4", "--pp", "1"},
                  shards});
  expect_refused({{"train", "--model", narrow, "--tp", "4", "--pp", "1", "--dp", "1", "--steps",
                   "1", "--no-db"},
                  shards});
  fs::remove_all(dir);
}

// Absurd model sizes: refused by the shared validation with the limit, by every command (they
// hung tune, printed a 686920959.7 % MFU, or overflowed into a 48.7 us iteration).
TEST(HostileInput, AbsurdModelSizesAreRefusedWithTheLimit) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipetune_absurd_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  for (const std::string layers : {"99999999999", "9223372036854775807"}) {
    const std::string model = (dir / ("m" + layers + ".toml")).string();
    std::ofstream(model) << "layers = " << layers
                         << "\nhidden = 64\nheads = 4\nvocab = 512\nseq_len = 32\n";
    const std::string msg = "layers=" + layers + " is beyond what pipetune models (at most 10000)";
    expect_refused({{"predict", "--model", model, "--hardware", "h100-sxm", "--gpus", "8",
                     "--global-batch", "64", "--tp", "1", "--pp", "2"},
                    msg});
    expect_refused({{"tune", "--model", model, "--hardware", "h100-sxm", "--gpus", "8",
                     "--global-batch", "64", "--no-db"},
                    msg});
    expect_refused({{"train", "--model", model, "--steps", "1", "--no-db"}, msg});
    const std::string run = (dir / ("r" + layers + ".toml")).string();
    std::ofstream(run) << "model = \"" << model
                       << "\"\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 2\n[plan]\npp = 2\n";
    expect_refused({{"simulate", "--config", run, "--no-db"}, msg});
  }
  fs::remove_all(dir);
}

// An empty trace is refused, not stored as a complete run of nothing; a model too large for this
// machine is refused before any allocation (it ended in std::bad_alloc or the OOM killer).
TEST(HostileInput, NothingToImportAndNoRoomToTrain) {
  const fs::path dir =
      fs::temp_directory_path() / ("pipetune_nothing_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string empty = (dir / "empty.json").string(), db = (dir / "w.db").string();
  std::ofstream(empty) << "[]";
  expect_refused({{"import-trace", empty, "--db", db}, "empty.json: no spans to import"});
  EXPECT_FALSE(fs::exists(db));
  const std::string huge = (dir / "huge.toml").string();
  std::ofstream(huge) << "layers = 2\nhidden = 131072\nheads = 4\nvocab = 512\nseq_len = 32\n";
  expect_refused({{"train", "--model", huge, "--steps", "1", "--no-db"},
                  "GiB for weights, gradients and Adam state (4 + 4 + 8 bytes x 412451733504 "
                  "parameters, over dp=2 replicas with zero_stage=0), more than this machine's"});
  fs::remove_all(dir);
}

// With --cost-* flags times are in cost units, not seconds: the Gantt axis says so (it printed
// "65s" for 65 units).
TEST(HostileInput, CostUnitsAreNotSecondsOnTheGanttAxis) {
  const ProcessResult r =
      run_pipetune({"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "4",
                    "--cost-f", "11", "--no-db", "--width", "60"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // 1F1B, p = 2, m = 4, F = 11, B = W = 1 (fused backward 2): F0 reaches the last stage at 11,
  // which runs 4 x (11 + 2), and the first stage's last backward adds 2: 11 + 52 + 2 = 65.
  EXPECT_NE(r.out.find(" 0 cost units"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("65 cost units"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("65s"), std::string::npos) << r.out;
}

// Sizes that ran for minutes or ended in std::bad_alloc: a run file with 10^9 micro-batches, a
// tune over a global batch of 2 x 10^9, and a train of hidden 2^20 or sequence 2^31.
TEST(HostileInput, HugeRunFilesBatchesAndShapesFailFast) {
  const fs::path dir = fs::temp_directory_path() / ("pipetune_huge_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string run = (dir / "mb.toml").string();
  std::ofstream(run) << "model = \"tiny\"\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 2\n"
                        "[plan]\npp = 2\nmicrobatches = 1000000000\n";
  expect_refused(
      {{"simulate", "--config", run, "--no-db"}, "2 stages x 1000000000 micro-batches x 1 chunks"});
  const ProcessResult tune =
      run_pipetune({"tune", "--model", "tiny", "--hardware", "a100-80gb", "--gpus", "8",
                    "--global-batch", "2000000000", "--no-db"});
  EXPECT_EQ(tune.exit_code, 2) << tune.err;
  EXPECT_NE(tune.err.find("global_batch 2000000000 is beyond what pipetune plans (at most "
                          "16777216 sequences)"),
            std::string::npos)
      << tune.err;
  const std::string hidden = (dir / "hidden.toml").string(), seq = (dir / "seq.toml").string();
  std::ofstream(hidden) << "layers = 2\nhidden = 1048576\nheads = 4\nvocab = 512\nseq_len = 32\n";
  std::ofstream(seq) << "layers = 2\nhidden = 64\nheads = 4\nvocab = 512\nseq_len = 2147483648\n";
  expect_refused({{"train", "--model", hidden, "--steps", "1", "--no-db"},
                  "hidden=1048576 is beyond what pipetune models (at most 131072)"});
  expect_refused({{"train", "--model", seq, "--steps", "1", "--no-db"},
                  "seq_len=2147483648 is beyond what pipetune models (at most 16777216)"});
  fs::remove_all(dir);
}

// A FIFO as token data blocked train forever (the open waits for a writer).
TEST(HostileInput, AFifoIsNoTokenShard) {
  ScratchWorkspace w;
  const std::string fifo = (w.dir / "train_000.bin").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_refused(
      {{"train", "--steps", "1", "--no-db", "--data", fifo},
       "data: token shard '" + fifo + "' is not a regular file (a device, pipe or socket)"});
}

// An empty value names nothing: "--tp ''" ran with the default tp, "--config ''" with the
// default run file, "calibrate -o ''" wrote nothing and "--name ''" took the default name (44 of
// the sweep's 767 cases). Every option that takes a value refuses an empty one, by name.
TEST(HostileInput, EmptyValuesAreRefusedNamingTheOption) {
  const std::vector<std::string> simulate = {
      "simulate",       "--schedule", "interleaved-1f1b", "--stages", "4",
      "--microbatches", "8",          "--chunks",         "2",        "--no-db"};
  const std::vector<std::string> train = {"train", "--steps", "1", "--no-db"};
  const std::vector<std::string> tune = {"tune",     "--model", "tiny", "--hardware",
                                         "h100-sxm", "--gpus",  "8",    "--global-batch",
                                         "64",       "--no-db"};
  using Option = std::pair<std::vector<std::string>, std::string>;
  const std::vector<Option> options = {
      {simulate, "--group-size"}, {simulate, "--cost-b"}, {simulate, "--memory-limit"},
      {simulate, "--width"},      {train, "--tp"},        {train, "--microbatches"},
      {train, "--zero"},          {train, "--config"},    {train, "--model"},
      {train, "--data"},          {train, "--fault"},     {train, "--threads"},
      {tune, "--max-candidates"}, {tune, "--schedules"},  {tune, "--vocab-modes"}};
  for (const auto& [base, option] : options)
    testing::expect_refused(with(base, {option, ""}), option + ": the value is empty");
  testing::expect_refused(
      {"simulate", "--schedule", "1f1b", "--stages", "2", "--microbatches", "2", "--name", ""},
      "--name: the value is empty");
  testing::expect_refused({"calibrate", "--hardware", "h100-sxm", "-o", ""},
                          "--output: the value is empty");
  testing::expect_refused({"report", "1", "--iteration", ""}, "--iteration: the value is empty");
}

}  // namespace
}  // namespace pipetune::testing
