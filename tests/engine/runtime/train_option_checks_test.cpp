// What check_train_options refuses before anything runs: numbers that would
// train nan weights, a checkpoint cadence with nowhere to write, and an injected fault the run
// would never reach; the fault parser refuses a repeated key.
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "engine/errors.hpp"
#include "engine/runtime/injected_fault.hpp"
#include "engine/runtime/trainer.hpp"
#include "engine/spec/load.hpp"

namespace pipetune::runtime {
namespace {

TrainOptions two_ranks() {
  TrainOptions o;
  o.model = spec::load_model("tiny");
  o.plan.pp = 2;
  o.plan.microbatches = 2;
  o.steps = 3;
  return o;
}

std::string refusal(const TrainOptions& o) {
  try {
    check_train_options(o);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TrainOptionChecks, NonFiniteOptimizerNumbersAreRefused) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  constexpr float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(refusal(two_ranks()), "");
  TrainOptions o = two_ranks();
  o.adamw.lr = inf;
  EXPECT_EQ(refusal(o), "the learning rate must be a finite number >= 0, not inf");
  o = two_ranks();
  o.adamw.lr = 0.0f;  // parameters unchanged: tests differentiate the initial model so
  EXPECT_EQ(refusal(o), "");
  o = two_ranks();
  o.adamw.weight_decay = nan;
  EXPECT_NE(refusal(o).find("the weight decay must be a finite number >= 0"), std::string::npos);
  o = two_ranks();
  o.adamw.beta2 = 1.0f;
  EXPECT_NE(refusal(o).find("AdamW's beta2 must be in [0, 1)"), std::string::npos);
  o = two_ranks();
  o.adamw.eps = 0.0f;
  EXPECT_NE(refusal(o).find("AdamW's epsilon"), std::string::npos);
  o = two_ranks();
  o.grad_clip = inf;
  EXPECT_NE(refusal(o).find("the gradient clipping norm"), std::string::npos);
  o = two_ranks();
  o.watchdog_seconds = std::numeric_limits<double>::infinity();
  EXPECT_NE(refusal(o).find("the communication watchdog"), std::string::npos);
}

TEST(TrainOptionChecks, ACheckpointCadenceNeedsADirectory) {
  TrainOptions o = two_ranks();
  o.checkpoint_every = 2;
  EXPECT_EQ(refusal(o), "checkpoints every 2 steps need a checkpoint directory to be written to");
  o.checkpoint_dir = "/tmp/somewhere";
  EXPECT_EQ(refusal(o), "");
}

TEST(TrainOptionChecks, AFaultTheRunNeverReachesIsRefused) {
  TrainOptions o = two_ranks();
  o.fault = InjectedFault{};
  o.fault->rank = 1;
  o.fault->step = 3;
  EXPECT_EQ(refusal(o), "");
  o.fault->step = 4;
  EXPECT_EQ(refusal(o), "injected fault: step 4 is not a step this run trains (1 to 3)");
  o.fault->step = 1;
  o.fault->rank = 2;
  EXPECT_EQ(refusal(o), "injected fault: rank 2 is not a rank of the 2-rank plan");
}

TEST(TrainOptionChecks, AFaultKeyGivenTwiceIsRefused) {
  for (const char* text :
       {"rank=0,rank=1,step=1,kind=throw", "rank=0,step=1,step=2,kind=throw",
        "rank=0,step=1,kind=slow,kind=throw", "rank=0,step=1,kind=slow,seconds=1,seconds=2"})
    EXPECT_THROW(parse_injected_fault(text), InputError) << text;
  EXPECT_EQ(parse_injected_fault("kind=hang,step=2,rank=3").rank, 3);
}

// A malformed fault is about the field "fault" (engine/errors.hpp) and names no CLI flag: each
// front end words it (the CLI as "--fault: <rule>").
TEST(TrainOptionChecks, AMalformedFaultIsAboutTheFaultField) {
  for (const auto& [text, rule] : std::vector<std::pair<std::string, std::string>>{
           {"rank=x,step=1,kind=throw", "rank must be a whole number, not 'x'"},
           {"rank=1,step=1", "needs rank=R,step=S,kind=throw|hang|slow"},
           {"rank=1,step=1,kind=boom", "kind 'boom' is none of throw, hang, slow"},
           {"rank=1,rank=2,step=1,kind=throw",
            "rank is given twice in 'rank=1,rank=2,step=1,kind=throw'"}}) {
    try {
      (void)parse_injected_fault(text);
      ADD_FAILURE() << text << ": accepted";
    } catch (const InputError& e) {
      EXPECT_EQ(e.field(), "fault") << text;
      EXPECT_EQ(e.rule(), rule) << text;
      EXPECT_EQ(std::string(e.what()), "injected fault: " + rule) << text;
    }
  }
}

}  // namespace
}  // namespace pipetune::runtime
