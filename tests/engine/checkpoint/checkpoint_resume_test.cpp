// Checkpoints through the trainer: a resumed run repeats the uninterrupted run's losses bit for
// bit (tensor, pipeline, data and expert parallel, ZeRO 1-3); periodic checkpoints replace the old
// one atomically; a damaged checkpoint, or a whole one that does not fit the run, is an InputError
// naming what is wrong; a failed write leaves nothing behind.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/checkpoint/checkpoint.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"
#include "tests/engine/checkpoint/checkpoint_test_support.hpp"

namespace pipetune::checkpoint {
namespace {

using runtime::check_train_options;
using runtime::train;
using runtime::TrainOptions;
using runtime::TrainResult;
using test_support::expect_input_error;
using test_support::read_file;
using test_support::ScratchTest;
using test_support::write_file;

namespace fs = std::filesystem;

class CheckpointTest : public ScratchTest {
 protected:
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
};

TEST_F(CheckpointTest, ResumeRepeatsLossesBitForBit_Tp2Pp2Dp2Zero1) {
  expect_resume_repeats(options("tiny", 2, 2, 2, 1, 1));
}

// ZeRO-2 and 3: each rank's checkpoint holds the moments (and under ZeRO-3 the values) of its
// shards of every unit.
TEST_F(CheckpointTest, ResumeRepeatsLossesBitForBit_Pp2Dp2Zero2) {
  expect_resume_repeats(options("tiny", 1, 2, 2, 1, 2));
}

TEST_F(CheckpointTest, ResumeRepeatsLossesBitForBit_MoeEp2Dp4Zero3) {
  expect_resume_repeats(options("tiny-moe", 1, 1, 4, 2, 3));
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
  EXPECT_EQ(entries(), std::vector<std::string>{"ck"}) << "temporary or old directories left";
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

void expect_train_input_error(const TrainOptions& o, const std::string& fragment) {
  expect_input_error([&] { (void)train(o); }, {fragment});
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
    expect_train_input_error(resume_options(copy), "rank-00001.bin");
  }
}

TEST_F(CheckpointTest, FlippedByteIsAnInputError) {
  const fs::path ck = make_checkpoint(dir_);
  const fs::path f = ck / "rank-00000.bin";
  std::vector<char> b = read_file(f);
  b[b.size() / 2] = static_cast<char>(b[b.size() / 2] ^ 0x10);
  write_file(f, b);
  expect_train_input_error(resume_options(ck), "checksum");
}

TEST_F(CheckpointTest, MissingRankFileAndBadMagic) {
  const fs::path ck = make_checkpoint(dir_);
  {
    std::fstream io(ck / "rank-00000.bin", std::ios::in | std::ios::out | std::ios::binary);
    io.write("XXXX", 4);
  }
  expect_train_input_error(resume_options(ck), "bad magic");
  fs::remove(ck / "rank-00001.bin");
  fs::remove(ck / "rank-00000.bin");
  expect_train_input_error(resume_options(ck), "rank-0000");
}

TEST_F(CheckpointTest, DifferentPlanOrModelIsRefused) {
  const fs::path ck = make_checkpoint(dir_);
  TrainOptions o = resume_options(ck);
  o.plan.microbatches = 4;
  expect_train_input_error(o, "was written by plan");
  TrainOptions m = resume_options(ck);
  m.model = spec::load_model("tiny-moe");
  expect_train_input_error(m, "model");
  TrainOptions done = resume_options(ck);
  done.steps = 1;
  expect_train_input_error(done, "leaves nothing to train");
  expect_train_input_error(resume_options(dir_ / "nope"), "does not exist");
}

// A checkpoint whose files are whole (checksums right, as the writer made them) but whose content
// does not fit the run: a buffer of the wrong size, or a data position past what the synthetic
// stream addresses (sample 2^62 times B*T*dp tokens used to overflow the token offset and train
// from a wrapped position).
TEST_F(CheckpointTest, ConsistentButUnfittingContentIsAnInputError) {
  const fs::path ck = make_checkpoint(dir_);
  const LoadedCheckpoint good = read_checkpoint(ck);
  auto rewrite = [&](const std::string& name, auto edit) {
    LoadedCheckpoint c = good;
    edit(c);
    write_checkpoint(dir_ / name, c.manifest, c.ranks);
    return resume_options(dir_ / name);
  };
  expect_train_input_error(rewrite("short",
                                   [](LoadedCheckpoint& c) {
                                     NamedTensor& m = c.ranks[1].buffers.at(1);
                                     m.values.pop_back();
                                     m.shape.clear();
                                   }),
                           "wrong size");
  for (const std::int64_t sample : {std::int64_t{1} << 62, std::int64_t{-1}}) {
    const std::string name = "far" + std::to_string(sample);
    const TrainOptions o = rewrite(name, [&](LoadedCheckpoint& c) {
      for (RankCheckpoint& r : c.ranks) r.loader.sample = sample;
    });
    expect_input_error([&] { (void)train(o); },
                       {"checkpoint '" + (dir_ / name).string() + "' rank ",
                        "cannot restore position", "sample " + std::to_string(sample)});
  }
}

// A destination that cannot take a checkpoint is the input's error, found before the first step
// (check_train_options says so before a run is even started).
TEST_F(CheckpointTest, FailedWriteLeavesNothingBehind) {
  // A regular file where the directory should go.
  { std::ofstream(dir_ / "file") << "x"; }
  TrainOptions o = resume_options({});
  o.resume_dir.clear();
  o.steps = 1;
  o.checkpoint_dir = (dir_ / "file").string();
  EXPECT_THROW(check_train_options(o), InputError);
  EXPECT_THROW((void)train(o), InputError);
  // A parent that does not exist.
  o.checkpoint_dir = (dir_ / "missing" / "ck").string();
  EXPECT_THROW(check_train_options(o), InputError);
  EXPECT_THROW((void)train(o), InputError);
  EXPECT_EQ(entries(), std::vector<std::string>{"file"}) << "temporary directories left behind";
}

}  // namespace
}  // namespace pipetune::checkpoint
