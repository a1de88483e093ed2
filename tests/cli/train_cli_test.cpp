// `pipetune train` as a user runs it: JSON output, overrides, traces, and bad input (one line on
// stderr, exit 2 for input, 1 for a runtime failure, no output file left behind).
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include <unistd.h>

#include "support/run_process.hpp"

namespace pipetune {
namespace {

using testing::run_pipetune;

int line_count(const std::string& s) {
  return static_cast<int>(std::count(s.begin(), s.end(), '\n'));
}

// A run file of the tiny model on tp=2 pp=2 dp=2 (4 micro-batches of 2) with `plan_lines` added
// to its [plan], in the child's working directory; its path.
std::string tiny_run_file(const std::string& file, const std::string& plan_lines) {
  const std::string path = testing::default_child_cwd() + "/" + file;
  std::ofstream f(path);
  f << "model = \"tiny\"\n[cluster]\nhardware = \"a100-80gb\"\ndevices = 8\n"
    << "[plan]\ntp = 2\npp = 2\ndp = 2\nmicro_batch_size = 2\nmicrobatches = 4\n"
    << plan_lines << "\n";
  return path;
}

TEST(TrainCli, JsonHasLossesThroughputPlanAndRanks) {
  const auto r = run_pipetune({"train", "--steps", "3", "--microbatches", "4", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["losses"].size(), 3u);
  EXPECT_NEAR(j["losses"][0].get<double>(), std::log(512.0), 0.2);  // uniform at initialisation
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["plan"]["tp"], 2);
  EXPECT_EQ(j["plan"]["pp"], 2);
  EXPECT_EQ(j["plan"]["dp"], 2);
  EXPECT_EQ(j["plan"]["world"], 8);
  EXPECT_EQ(j["plan"]["schedule"], "1f1b");
  EXPECT_EQ(j["plan"]["vocab_rows"], 512);                  // tiny's vocabulary, unpadded
  EXPECT_EQ(j["plan"]["tokens_per_step"], 4 * 4 * 32 * 2);  // m * B * T * dp
  EXPECT_EQ(j["plan"]["recompute"], "none");
  EXPECT_EQ(j["plan"]["sequence_parallel"], false);
  ASSERT_EQ(j["ranks"].size(), 8u);
  for (const auto& k : j["ranks"]) {
    EXPECT_GT(k["peak_activation_bytes"].get<std::int64_t>(), 0);
    EXPECT_GE(k["bubble_ratio"].get<double>(), 0.0);
    EXPECT_LE(k["bubble_ratio"].get<double>(), 1.0);
  }
  // The first stage holds more micro-batches of activations than the last under 1F1B.
  EXPECT_GT(j["ranks"][0]["peak_activation_bytes"].get<std::int64_t>(),
            j["ranks"][4]["peak_activation_bytes"].get<std::int64_t>());
}

TEST(TrainCli, HumanOutputPrintsEveryStepAndEveryRank) {
  const auto r = run_pipetune({"train", "--steps", "2", "--microbatches", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("step    1  loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("step    2  loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bubble%"), std::string::npos) << r.out;
  EXPECT_GE(line_count(r.out), 2 + 1 + 2 + 8);
}

TEST(TrainCli, APaddedVocabularySaysItsRowsAndStillPredictsOverTheRealOnes) {
  // tiny (vocabulary 512) padded by 48 x tp 2 = 96: 576 rows. At initialisation the loss is
  // log(512), the uniform over the real tokens: the 64 padding rows take no probability.
  const std::filesystem::path model = std::filesystem::temp_directory_path() /
                                      ("pipetune-padded-" + std::to_string(::getpid()) + ".toml");
  std::ofstream(model) << "preset = \"tiny\"\nname = \"tiny-padded\"\nvocab_divisible_by = 48\n";
  const auto r =
      run_pipetune({"train", "--model", model.string(), "--steps", "1", "--microbatches", "2"});
  const auto j = run_pipetune(
      {"train", "--model", model.string(), "--steps", "1", "--microbatches", "2", "--json"});
  std::filesystem::remove(model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(j.out)["plan"]["vocab_rows"], 576);
  EXPECT_NE(r.out.find("vocabulary 512 padded to 576 rows (a multiple of 48 x 2 shards)"),
            std::string::npos)
      << r.out;
  const std::size_t at = r.out.find("step    1  loss ");
  ASSERT_NE(at, std::string::npos) << r.out;
  EXPECT_NEAR(std::stod(r.out.substr(at + 16)), std::log(512.0), 0.05) << r.out;  // log 576: +0.12
  // And the loss the unpadded model prints.
  const auto plain = run_pipetune({"train", "--steps", "1", "--microbatches", "2"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  const std::size_t p = plain.out.find("step    1  loss ");
  ASSERT_NE(p, std::string::npos) << plain.out;
  EXPECT_EQ(r.out.substr(at, 23), plain.out.substr(p, 23));
}

TEST(TrainCli, OverridesAndMoeConfig) {
  const auto r = run_pipetune({"train", "--model", "tiny-moe", "--tp", "1", "--pp", "1", "--dp",
                               "2", "--ep", "2", "--steps", "2", "--microbatches", "2", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["plan"]["model"], "tiny-moe");
  EXPECT_EQ(j["plan"]["ep"], 2);
  EXPECT_GT(j["steps"][0]["aux_loss"].get<double>(), 0.0);
}

TEST(TrainCli, TraceHasASpanPerOp) {
  const std::string path = ::testing::TempDir() + "train_trace.json";
  std::filesystem::remove(path);
  const auto r = run_pipetune({"train", "--tp", "1", "--dp", "1", "--steps", "1", "--microbatches",
                               "4", "--trace", path, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(testing::slurp(path));
  int f = 0, b = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("ph", "") != "X") continue;
    const std::string name = e.value("name", "");
    if (name.rfind("F", 0) == 0) ++f;
    if (name.rfind("B", 0) == 0) ++b;
  }
  EXPECT_EQ(f, 2 * 4);  // 2 stages x 4 micro-batches
  EXPECT_EQ(b, 2 * 4);
  std::filesystem::remove(path);
}

struct BadInput {
  std::vector<std::string> args;
  std::string message;
  int exit_code = 2;
};

// ctest lists the case by its arguments, not by a dump of the struct's bytes.
void PrintTo(const BadInput& c, std::ostream* os) {
  for (const auto& a : c.args) *os << a << ' ';
}

class TrainCliBadInput : public ::testing::TestWithParam<BadInput> {};

TEST_P(TrainCliBadInput, OneLineErrorAndExitCode) {
  const BadInput& c = GetParam();
  std::vector<std::string> args = {"train"};
  args.insert(args.end(), c.args.begin(), c.args.end());
  const auto r = run_pipetune(args);
  EXPECT_EQ(r.exit_code, c.exit_code) << r.err;
  EXPECT_NE(r.err.find(c.message), std::string::npos) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_TRUE(r.out.empty() || r.exit_code == 1) << r.out;
}

INSTANTIATE_TEST_SUITE_P(
    Cases, TrainCliBadInput,
    ::testing::Values(
        BadInput{{"--tp", "3"}, "tp=3 does not divide heads=4"},
        BadInput{{"--tp", "1", "--pp", "9", "--dp", "1"}, "pp=9 exceeds layers=8"},
        BadInput{{"--model", "tiny-moe", "--tp", "1", "--pp", "1", "--dp", "2", "--ep", "3"},
                 "ep=3"},
        BadInput{{"--model", "tiny-moe", "--tp", "1", "--pp", "1", "--dp", "3", "--ep", "2"},
                 "ep=2 does not divide dp=3"},
        BadInput{{"--ep", "2"}, "needs an MoE model"},
        BadInput{{"--tp", "1", "--pp", "1", "--dp", "300"}, "rank threads"},
        BadInput{{"--schedule", "nope"}, "nope"},
        BadInput{{"--vocab", "vocab-1", "--schedule", "gpipe"}, "vocab"},
        BadInput{{"--steps", "0"}, "--steps"}, BadInput{{"--model", "llama3-8b"}, "activation"},
        BadInput{{"--data", "/nonexistent/shard_*.bin"}, "shard"},
        BadInput{{"--zero", "4"}, "zero_stage=4 must be 0..3"},
        BadInput{{"--device-cache-mib", "-1"}, "--device-cache-mib must be 0 to 16777216, not -1"},
        BadInput{{"--device-cache-mib", "64"},
                 "--device-cache-mib is for --backend cuda (it caps a GPU rank's cache)"},
        BadInput{{"--gemm-inputs", "fast"}, "--gemm-inputs must be copies or in-gemm, not 'fast'"},
        BadInput{{"--gemm-inputs", "in-gemm"},
                 "--gemm-inputs is for --backend cuda --precision bf16"},
        BadInput{{"--backend", "cuda", "--gemm-inputs", "in-gemm"},
                 "--gemm-inputs is for --backend cuda --precision bf16"},
        BadInput{{"--gelu-epilogue"}, "--gelu-epilogue is for --backend cuda"},
        BadInput{{"--gpu-capture-every", "2"}, "--gpu-capture-every is for --backend cuda"},
        BadInput{{"--backend", "cuda", "--gpu-capture-every", "0"},
                 "--gpu-capture-every must be auto or a number of steps, at least 1, not '0'"},
        BadInput{{"--backend", "cuda", "--gpu-capture-every", "often"},
                 "--gpu-capture-every must be auto or a number of steps, at least 1, not 'often'"},
        BadInput{{"--backend", "cuda", "--gpu-capture-every", "3x"},
                 "--gpu-capture-every must be auto or a number of steps, at least 1, not '3x'"},
        BadInput{{"--gpu-capture-every", "auto"}, "--gpu-capture-every is for --backend cuda"},
        BadInput{{"--backend", "cuda", "--no-gpu-capture", "--gpu-capture-every", "2"},
                 "--gpu-capture-every and --no-gpu-capture: choose one"},
        BadInput{{"--serial-pairs", "--schedule", "dualpipe-v", "--pp", "2"},
                 "--serial-pairs is for --backend cuda"},
        // A learning rate that blows the weights up: the loss turns non-finite, the run stops and
        // names the step and the rank, exit 1, no hang.
        BadInput{{"--lr", "1e30", "--steps", "5", "--microbatches", "2"}, "loss is", 1}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

// ZeRO-2, from a run file or --zero: the losses of ZeRO-1 (the same sums in another order, so
// within float rounding), each rank keeping half the gradients over dp=2, and the plan says so;
// ZeRO-3 from the flag.
TEST(TrainCliZeroSharding, RunFileAndFlagShardGradientsAndValues) {
  const std::string path = tiny_run_file("zero2.toml", "zero_stage = 2");
  const auto run = [](const std::vector<std::string>& args) {
    const auto r = run_pipetune(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out.empty() ? "{}" : r.out);
  };
  const nlohmann::json zero1 =
      run({"train", "--config", path, "--zero", "1", "--steps", "3", "--no-db", "--json"});
  const nlohmann::json zero2 =
      run({"train", "--config", path, "--steps", "3", "--no-db", "--json"});
  ASSERT_EQ(zero1.value("losses", nlohmann::json()).size(), 3u);
  ASSERT_EQ(zero2.value("losses", nlohmann::json()).size(), 3u);
  EXPECT_EQ(zero2["plan"]["zero_stage"], 2);
  EXPECT_EQ(zero2["plan"]["dp"], 2);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(zero2["losses"][i].get<double>(), zero1["losses"][i].get<double>(),
                1e-5 * zero1["losses"][i].get<double>())
        << "step " << i + 1;
  ASSERT_EQ(zero2["ranks"].size(), zero1["ranks"].size());
  for (std::size_t r = 0; r < zero1["ranks"].size(); ++r) {
    EXPECT_EQ(2 * zero2["ranks"][r]["gradient_bytes"].get<std::int64_t>(),
              zero1["ranks"][r]["gradient_bytes"].get<std::int64_t>())
        << "rank " << r;
    EXPECT_EQ(zero2["ranks"][r]["optimizer_bytes"], zero1["ranks"][r]["optimizer_bytes"]);
  }
  const nlohmann::json flag =
      run({"train", "--config", path, "--zero", "0", "--steps", "1", "--no-db", "--json"});
  EXPECT_EQ(flag["plan"]["zero_stage"], 0);
  // ZeRO-3: the losses of ZeRO-2 bit for bit (the same sums; values gathered from the updated
  // shards), half the values kept.
  const nlohmann::json zero3 =
      run({"train", "--config", path, "--zero", "3", "--steps", "3", "--no-db", "--json"});
  EXPECT_EQ(zero3["plan"]["zero_stage"], 3);
  EXPECT_EQ(zero3["losses"], zero2["losses"]);
  ASSERT_EQ(zero3["ranks"].size(), zero2["ranks"].size());
  for (std::size_t r = 0; r < zero2["ranks"].size(); ++r)
    EXPECT_EQ(2 * zero3["ranks"][r]["parameter_bytes"].get<std::int64_t>(),
              zero2["ranks"][r]["parameter_bytes"].get<std::int64_t>())
        << "rank " << r;
}

// Activation recomputation, from a run file or --recompute: the same losses as without, to every
// printed digit (B recomputes with the same ops on the same inputs), and the header says it.
TEST(TrainCliRecompute, RunFileAndFlagTrainTheSameLossesAsWithout) {
  const std::string path = tiny_run_file("recompute.toml", "recompute = \"full\"");
  const auto losses = [](const std::vector<std::string>& args) {
    const auto r = run_pipetune(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out.empty() ? "{}" : r.out).value("losses", nlohmann::json());
  };
  const nlohmann::json without = losses(
      {"train", "--config", path, "--recompute", "none", "--steps", "3", "--no-db", "--json"});
  ASSERT_EQ(without.size(), 3u);
  EXPECT_EQ(losses({"train", "--config", path, "--steps", "3", "--no-db", "--json"}), without);
  EXPECT_EQ(losses({"train", "--config", path, "--recompute", "selective", "--steps", "3",
                    "--no-db", "--json"}),
            without);
  const auto r = run_pipetune({"train", "--config", path, "--steps", "1", "--no-db"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("vocab none, recompute full, 1 steps"), std::string::npos) << r.out;
  const auto j = run_pipetune({"train", "--config", path, "--steps", "1", "--no-db", "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  EXPECT_EQ(nlohmann::json::parse(j.out)["plan"]["recompute"], "full");
}

// Sequence parallelism, from the run file or --sequence-parallel: the same training as without
// to the parallel-equivalence tolerance (the sums are taken in another order), and the header
// says it; --no-sequence-parallel turns the run file's off.
TEST(TrainCliSequenceParallel, RunFileAndFlagTrainAsWithout) {
  const std::string path = tiny_run_file("sequence-parallel.toml", "sequence_parallel = true");
  const auto run = [](const std::vector<std::string>& args) {
    const auto r = run_pipetune(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return r;
  };
  const auto losses = [&](const std::vector<std::string>& args) {
    const auto r = run(args);
    return nlohmann::json::parse(r.out.empty() ? "{}" : r.out).value("losses", nlohmann::json());
  };
  const nlohmann::json with =
      losses({"train", "--config", path, "--steps", "3", "--no-db", "--json"});
  const nlohmann::json without = losses(
      {"train", "--config", path, "--no-sequence-parallel", "--steps", "3", "--no-db", "--json"});
  ASSERT_EQ(with.size(), 3u);
  ASSERT_EQ(without.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i)
    EXPECT_NEAR(with[i].get<double>(), without[i].get<double>(),
                1e-5 * std::fabs(without[i].get<double>()))
        << "step " << i + 1;
  const std::string header = "vocab none, sequence parallel, 1 steps";
  EXPECT_NE(run({"train", "--config", path, "--steps", "1", "--no-db"}).out.find(header),
            std::string::npos);
  // tiny-train (the default run) has tp=2: the flag turns it on.
  EXPECT_NE(run({"train", "--steps", "1", "--no-db", "--sequence-parallel"}).out.find(header),
            std::string::npos);
  const auto j = run({"train", "--config", path, "--steps", "1", "--no-db", "--json"});
  EXPECT_EQ(nlohmann::json::parse(j.out.empty() ? "{}" : j.out)["plan"]["sequence_parallel"], true);
}

TEST(TrainCliRecompute, AnUnknownModeIsRefusedWithTheValidOnes) {
  const auto r = run_pipetune({"train", "--recompute", "some", "--steps", "1", "--no-db"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("unknown recompute mode 'some'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("selective"), std::string::npos) << r.err;
  EXPECT_EQ(line_count(r.err), 1) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

}  // namespace
}  // namespace pipetune

namespace pipetune {
namespace {

// Started by an MPI launcher (its environment, as mpirun sets it) with a plan of another world
// size, or asked for what ranks as processes do not do yet: every process refuses before
// writing anything. (The runs themselves: tests/mpi/train_processes_test.sh.)
TEST(TrainCli, UnderAnMpiLauncherEveryProcessRefusesAndWritesNothing) {
  const std::filesystem::path dir = testing::default_child_cwd();
  const std::string db = (dir / "launched.db").string();
  struct LauncherEnvironment {
    explicit LauncherEnvironment(const char* size) { ::setenv("OMPI_COMM_WORLD_SIZE", size, 1); }
    ~LauncherEnvironment() { ::unsetenv("OMPI_COMM_WORLD_SIZE"); }
  };
  {
    LauncherEnvironment env("4");
    const testing::ProcessResult r =
        testing::run_pipetune({"train", "--steps", "1", "--db", db});  // tiny-train: 8 ranks
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("4 processes, but the plan has tp*pp*dp = 8 ranks"), std::string::npos)
        << r.err;
    // Matching sizes with what ranks as processes cannot do (a trace file without the
    // workspace it is written from), or a build without MPI: refused before MPI starts.
    const testing::ProcessResult same =
        testing::run_pipetune({"train", "--steps", "1", "--tp", "2", "--pp", "2", "--dp", "1",
                               "--no-db", "--trace", (dir / "t.json").string()});
    EXPECT_EQ(same.exit_code, 2) << same.err;
    EXPECT_TRUE(same.err.find("--trace with ranks as processes is written from the workspace "
                              "run: drop --no-db") != std::string::npos ||
                same.err.find("built without MPI") != std::string::npos)
        << same.err;
  }
  EXPECT_FALSE(std::filesystem::exists(db));
  {
    LauncherEnvironment env("1");  // one process: the ordinary threads run
    EXPECT_EQ(testing::run_pipetune({"train", "--steps", "1", "--no-db"}).exit_code, 0);
  }
}

// Without a usable GPU (CI, this machine) or without the toolkit: one line saying why, exit 2,
// nothing written. A bad name is refused like any bad setting.
TEST(TrainCli, CudaBackendWithoutAUsableDeviceSaysWhy) {
  const std::filesystem::path dir = testing::default_child_cwd();
  const std::string db = (dir / "cuda.db").string();
  const testing::ProcessResult r =
      testing::run_pipetune({"train", "--steps", "1", "--backend", "cuda", "--db", db});
  if (r.exit_code == 0) {
    // A machine with a usable GPU trains on it (tests/gpu check the results); nothing to refuse.
    EXPECT_TRUE(std::filesystem::exists(db));
  } else {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_TRUE(r.err.find("backend cuda: no CUDA device is usable (cudaGetDeviceCount: ") !=
                    std::string::npos ||
                r.err.find("backend cuda: this pipetune was built without the CUDA toolkit") !=
                    std::string::npos)
        << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(std::filesystem::exists(db));
  }
  const testing::ProcessResult bad =
      testing::run_pipetune({"train", "--steps", "1", "--backend", "tpu", "--no-db"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("unknown backend 'tpu' (valid: cpu, cuda)"), std::string::npos) << bad.err;
  EXPECT_EQ(
      testing::run_pipetune({"train", "--steps", "1", "--backend", "cpu", "--no-db"}).exit_code, 0);
}

// bf16 GEMM inputs are a CUDA backend mode: the cpu backend refuses them in one line (exit 2,
// nothing written), as it refuses a precision that is neither fp32 nor bf16.
TEST(TrainCli, PrecisionBf16IsForTheCudaBackend) {
  const std::filesystem::path dir = testing::default_child_cwd();
  const std::string db = (dir / "bf16.db").string();
  const testing::ProcessResult r =
      testing::run_pipetune({"train", "--steps", "1", "--precision", "bf16", "--db", db});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("--precision bf16 is for --backend cuda (the cpu backend computes in fp32 "
                       "only)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_FALSE(std::filesystem::exists(db));
  const testing::ProcessResult bad = testing::run_pipetune(
      {"train", "--steps", "1", "--backend", "cuda", "--precision", "fp16", "--no-db"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(bad.err.find("--precision must be fp32 or bf16, not 'fp16'"), std::string::npos)
      << bad.err;
  const testing::ProcessResult fp32 =
      testing::run_pipetune({"train", "--steps", "1", "--precision", "fp32", "--no-db", "--json"});
  ASSERT_EQ(fp32.exit_code, 0) << fp32.err;
  EXPECT_EQ(nlohmann::json::parse(fp32.out)["precision"], "fp32");
}

// The attention kernel: stored on the cpu backend unless --attention flash says otherwise (the
// JSON says which ran, and the stored run's plan keeps its engine); a third name is refused.
TEST(TrainCli, AttentionKernelIsChosenAndReported) {
  const testing::ProcessResult stored =
      testing::run_pipetune({"train", "--steps", "1", "--no-db", "--json"});
  ASSERT_EQ(stored.exit_code, 0) << stored.err;
  EXPECT_EQ(nlohmann::json::parse(stored.out)["attention"], "stored");
  const testing::ProcessResult flash =
      testing::run_pipetune({"train", "--steps", "1", "--no-db", "--json", "--attention", "flash"});
  ASSERT_EQ(flash.exit_code, 0) << flash.err;
  const auto s = nlohmann::json::parse(stored.out), f = nlohmann::json::parse(flash.out);
  EXPECT_EQ(f["attention"], "flash");
  // The same training to rounding, with less activation memory on every rank.
  EXPECT_NEAR(f["losses"][0].get<double>(), s["losses"][0].get<double>(),
              1e-5 * s["losses"][0].get<double>());
  for (std::size_t r = 0; r < s["ranks"].size(); ++r)
    EXPECT_LT(f["ranks"][r]["peak_activation_bytes"].get<double>(),
              s["ranks"][r]["peak_activation_bytes"].get<double>())
        << "rank " << r;
  const testing::ProcessResult bad =
      testing::run_pipetune({"train", "--steps", "1", "--no-db", "--attention", "sdpa"});
  EXPECT_EQ(bad.exit_code, 2) << bad.err;
  EXPECT_NE(
      bad.err.find("--attention must be one of stored, flash, flash-tc, flash-mma, not 'sdpa'"),
      std::string::npos)
      << bad.err;
  // Tensor-core attention is for bf16 runs on a GPU: refused on the cpu backend, saying why.
  const testing::ProcessResult tc =
      testing::run_pipetune({"train", "--steps", "1", "--no-db", "--attention", "flash-tc"});
  EXPECT_EQ(tc.exit_code, 2) << tc.err;
  EXPECT_NE(tc.err.find("--attention flash-tc needs backend cuda and precision bf16 (bf16 "
                        "products on tensor cores), not cpu fp32"),
            std::string::npos)
      << tc.err;
  EXPECT_EQ(tc.out, "");
  const testing::ProcessResult mma =
      testing::run_pipetune({"train", "--steps", "1", "--no-db", "--attention", "flash-mma"});
  EXPECT_EQ(mma.exit_code, 2) << mma.err;
  EXPECT_NE(mma.err.find("--attention flash-mma needs backend cuda and precision bf16"),
            std::string::npos)
      << mma.err;
}

// A run file's attention: kept in the workspace run (calibrate costs the run by it); flash-tc
// outside cuda bf16 is refused where the file says it.
TEST(TrainCli, RunFileAttentionIsKeptAndCheckedWhereTheFileSaysIt) {
  const std::filesystem::path dir = testing::default_child_cwd();
  const std::filesystem::path run = dir / "attention-flash.toml";
  const char* body =
      "model = \"tiny\"\n[cluster]\nhardware = \"h100-sxm\"\ndevices = 2\n[plan]\npp = 2\n";
  {
    std::ofstream f(run);
    f << "attention = \"flash\"\n" << body;
  }
  const std::filesystem::path db = dir / "attention.db";
  std::filesystem::remove(db);
  const testing::ProcessResult r = testing::run_pipetune(
      {"train", "--config", run.string(), "--steps", "1", "--db", db.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["attention"], "flash");
  // The workspace run's plan (runs.plan_json), as calibrate reads it.
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.string().c_str(), &handle, SQLITE_OPEN_READONLY, nullptr),
            SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle, "SELECT plan_json FROM runs", -1, &stmt, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  const std::string plan = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  EXPECT_EQ(nlohmann::json::parse(plan)["attention"], "flash") << plan;

  const std::filesystem::path bad = dir / "attention-tc-cpu.toml";
  {
    std::ofstream f(bad);
    f << "attention = \"flash-tc\"\n" << body;
  }
  const testing::ProcessResult tc =
      testing::run_pipetune({"train", "--config", bad.string(), "--steps", "1", "--no-db"});
  EXPECT_EQ(tc.exit_code, 2) << tc.err;
  EXPECT_NE(tc.err.find("key 'attention': flash-tc needs backend cuda and precision bf16"),
            std::string::npos)
      << tc.err;
}

// A run file's precision: bf16 with the cpu backend is refused where the file says it.
TEST(TrainCli, RunFilePrecisionBf16NeedsTheCudaBackend) {
  const std::filesystem::path dir = testing::default_child_cwd();
  const std::filesystem::path run = dir / "bf16-cpu.toml";
  {
    std::ofstream f(run);
    f << "model = \"tiny\"\nprecision = \"bf16\"\n[cluster]\nhardware = \"h100-sxm\"\n"
         "devices = 8\n[plan]\ntp = 2\npp = 2\ndp = 2\n";
  }
  const testing::ProcessResult r =
      testing::run_pipetune({"train", "--config", run.string(), "--steps", "1", "--no-db"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("key 'precision': bf16 is for backend = \"cuda\""), std::string::npos)
      << r.err;
}

TEST(TrainCli, RanksPerProcessWithoutALauncherNamesTheProcessesNeeded) {
  const testing::ProcessResult r =
      testing::run_pipetune({"train", "--steps", "1", "--no-db", "--ranks-per-process", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("the plan's 8 ranks need 4 processes); this is one process"),
            std::string::npos)
      << r.err;
  const testing::ProcessResult zero =
      testing::run_pipetune({"train", "--steps", "1", "--no-db", "--ranks-per-process", "0"});
  EXPECT_EQ(zero.exit_code, 2) << zero.err;
  EXPECT_NE(zero.err.find("--ranks-per-process must be at least 1, not 0"), std::string::npos)
      << zero.err;
  // All of the plan's ranks in this one process is the ordinary threads run.
  EXPECT_EQ(testing::run_pipetune({"train", "--steps", "1", "--no-db", "--ranks-per-process", "8"})
                .exit_code,
            0);
}

}  // namespace
}  // namespace pipetune
