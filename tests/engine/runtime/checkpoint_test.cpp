// Checkpoint and resume: a resumed run repeats the uninterrupted run's losses bit for bit; a
// corrupted, truncated or mismatched checkpoint is an InputError naming what is wrong; a failed
// write leaves no half-written directory.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "engine/errors.hpp"
#include "engine/runtime/checkpoint.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::runtime {
namespace {

namespace fs = std::filesystem;

class CheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pipetune_ckpt_" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::permissions(dir_, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }
  static TrainOptions options(const std::string& model, int tp, int pp, int dp, int ep, int zero) {
    TrainOptions o;
    o.model = spec::load_model(model);
    o.plan.tp = tp;
    o.plan.pp = pp;
    o.plan.dp = dp;
    o.plan.ep = ep;
    o.plan.zero_stage = zero;
    o.plan.micro_batch_size = 2;
    o.plan.microbatches = 4;
    o.threads_per_rank = 1;
    o.steps = 6;
    return o;
  }
  void expect_resume_repeats(TrainOptions o) {
    const TrainResult whole = train(o);
    TrainOptions first = o;
    first.steps = 3;
    first.checkpoint_dir = (dir_ / "ck").string();
    (void)train(first);
    TrainOptions rest = o;
    rest.resume_dir = (dir_ / "ck").string();
    const TrainResult resumed = train(rest);
    ASSERT_EQ(resumed.first_step, 4);
    ASSERT_EQ(resumed.steps.size(), 3u);
    for (int i = 0; i < 3; ++i) {
      EXPECT_EQ(resumed.steps[static_cast<std::size_t>(i)].loss,
                whole.steps[static_cast<std::size_t>(i + 3)].loss)
          << "step " << i + 4;  // bit for bit
      EXPECT_EQ(resumed.steps[static_cast<std::size_t>(i)].grad_norm,
                whole.steps[static_cast<std::size_t>(i + 3)].grad_norm);
    }
  }
  fs::path dir_;
};

TEST_F(CheckpointTest, ResumeRepeatsLossesBitForBit_Tp2Pp2Dp2Zero1) {
  expect_resume_repeats(options("tiny", 2, 2, 2, 1, 1));
}

TEST_F(CheckpointTest, ResumeRepeatsLossesBitForBit_MoeEp2) {
  expect_resume_repeats(options("tiny-moe", 1, 1, 2, 2, 0));
}

TEST_F(CheckpointTest, PeriodicCheckpointsReplaceTheOldOneAtomically) {
  TrainOptions o = options("tiny", 1, 2, 1, 1, 0);
  o.checkpoint_dir = (dir_ / "ck").string();
  o.checkpoint_every = 2;
  o.steps = 5;
  (void)train(o);
  EXPECT_EQ(read_checkpoint_manifest(dir_ / "ck").step, 5);
  int entries = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++entries;
  }
  EXPECT_EQ(entries, 1) << "temporary or old directories left behind";
}

// Writes a 1-step checkpoint of a 2-rank plan and returns its directory.
fs::path make_checkpoint(const fs::path& dir) {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.pp = 2;
  o.plan.microbatches = 2;
  o.steps = 1;
  o.threads_per_rank = 1;
  o.checkpoint_dir = (dir / "ck").string();
  (void)train(o);
  return dir / "ck";
}

TrainOptions resume_options(const fs::path& ck) {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.pp = 2;
  o.plan.microbatches = 2;
  o.steps = 2;
  o.threads_per_rank = 1;
  o.resume_dir = ck.string();
  return o;
}

void expect_input_error(const TrainOptions& o, const std::string& fragment) {
  try {
    (void)train(o);
    ADD_FAILURE() << "expected InputError containing '" << fragment << "'";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
}

TEST_F(CheckpointTest, TruncatedRankFileIsAnInputError) {
  const fs::path ck = make_checkpoint(dir_);
  const fs::path f = ck / "rank-00001.bin";
  const auto size = fs::file_size(f);
  for (std::uintmax_t cut : {std::uintmax_t{3}, std::uintmax_t{30}, size / 2, size - 1}) {
    const fs::path copy = dir_ / "copy";
    fs::remove_all(copy);
    fs::copy(ck, copy);
    fs::resize_file(copy / "rank-00001.bin", cut);
    expect_input_error(resume_options(copy), "rank-00001.bin");
  }
}

TEST_F(CheckpointTest, FlippedByteIsAnInputError) {
  const fs::path ck = make_checkpoint(dir_);
  const fs::path f = ck / "rank-00000.bin";
  std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
  io.seekg(static_cast<std::streamoff>(fs::file_size(f) / 2));
  char c = 0;
  io.read(&c, 1);
  io.seekp(static_cast<std::streamoff>(fs::file_size(f) / 2));
  c = static_cast<char>(c ^ 0x10);
  io.write(&c, 1);
  io.close();
  expect_input_error(resume_options(ck), "checksum");
}

TEST_F(CheckpointTest, MissingRankFileAndBadMagic) {
  const fs::path ck = make_checkpoint(dir_);
  {
    std::fstream io(ck / "rank-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    io.write("XXXX", 4);
  }
  expect_input_error(resume_options(ck), "bad magic");
  fs::remove(ck / "rank-00001.bin");
  fs::remove(ck / "rank-00000.bin");
  expect_input_error(resume_options(ck), "rank-0000");
}

TEST_F(CheckpointTest, DifferentPlanOrModelIsRefused) {
  const fs::path ck = make_checkpoint(dir_);
  TrainOptions o = resume_options(ck);
  o.plan.microbatches = 4;
  expect_input_error(o, "was written by plan");
  TrainOptions m = resume_options(ck);
  m.model = spec::load_model("tiny-moe");
  expect_input_error(m, "model");
  TrainOptions done = resume_options(ck);
  done.steps = 1;
  expect_input_error(done, "leaves nothing to train");
  expect_input_error(resume_options(dir_ / "nope"), "not a directory");
}

TEST_F(CheckpointTest, FailedWriteLeavesNothingBehind) {
  // A regular file where the directory should go.
  { std::ofstream(dir_ / "file") << "x"; }
  TrainOptions o = resume_options({});
  o.resume_dir.clear();
  o.steps = 1;
  o.checkpoint_dir = (dir_ / "file").string();
  EXPECT_THROW((void)train(o), std::runtime_error);
  // A parent that does not exist.
  o.checkpoint_dir = (dir_ / "missing" / "ck").string();
  EXPECT_THROW((void)train(o), std::runtime_error);
  // An unwritable parent (skipped as root, which may write anywhere).
  if (::geteuid() != 0) {
    fs::create_directory(dir_ / "ro");
    fs::permissions(dir_ / "ro", fs::perms::owner_read | fs::perms::owner_exec);
    o.checkpoint_dir = (dir_ / "ro" / "ck").string();
    EXPECT_THROW((void)train(o), std::runtime_error);
    fs::permissions(dir_ / "ro", fs::perms::owner_all);
  }
  int entries = 0;
  for (const auto& e : fs::recursive_directory_iterator(dir_)) {
    (void)e;
    ++entries;
  }
  EXPECT_LE(entries, 2) << "temporary directories left behind";
}

}  // namespace
}  // namespace pipetune::runtime
