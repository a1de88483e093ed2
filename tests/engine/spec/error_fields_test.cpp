// Errors carry structure (engine/errors.hpp): the field a broken rule is about, the other fields
// it joins, and the rule, so that each front end words them (the CLI names its flag, the GUI
// marks its form field, a run file names its line and key) while what() stays the sentence it
// always was.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/plan_schedule.hpp"
#include "engine/spec/spec.hpp"

namespace pipetune::spec {
namespace {

using Fields = std::vector<std::string>;

// The error `fn` throws, as an InputError (ADD_FAILURE when it throws none).
InputError error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e;
  }
  ADD_FAILURE() << "no InputError";
  return InputError("");
}

TEST(ErrorFields, AMessageAloneIsAboutNoField) {
  const InputError e("something is wrong");
  EXPECT_EQ(e.field(), "");
  EXPECT_TRUE(e.fields().empty());
  EXPECT_EQ(e.rule(), "something is wrong");
  EXPECT_STREQ(e.what(), "something is wrong");
}

TEST(ErrorFields, ARuleThatNamesItsFieldIsTheMessage) {
  const SpecError e({"plan.tp", "model.heads"}, "tp=3 does not divide heads=16");
  EXPECT_EQ(e.field(), "plan.tp");
  EXPECT_EQ(e.fields(), (Fields{"plan.tp", "model.heads"}));
  EXPECT_EQ(e.rule(), "tp=3 does not divide heads=16");
  EXPECT_STREQ(e.what(), "tp=3 does not divide heads=16");
}

TEST(ErrorFields, ALabelledRuleReadsAfterTheLibrarysNameForTheInput) {
  const InputError e({"fault"}, "injected fault", "step must be at least 1");
  EXPECT_EQ(e.field(), "fault");
  EXPECT_EQ(e.rule(), "step must be at least 1");
  EXPECT_STREQ(e.what(), "injected fault: step must be at least 1");
}

TEST(ErrorFields, ContextAddedToTheMessageKeepsFieldsAndRule) {
  const SpecError inner({"plan.tp"}, "tp=0 must be positive");
  const SpecError outer("r.toml: " + std::string(inner.what()), inner);
  EXPECT_STREQ(outer.what(), "r.toml: tp=0 must be positive");
  EXPECT_EQ(outer.fields(), Fields{"plan.tp"});
  EXPECT_EQ(outer.rule(), "tp=0 must be positive");
}

// ---- the validation rules ----------------------------------------------------------------------

ModelSpec model() {
  ModelSpec m;
  m.name = "dense";
  m.layers = 8;
  m.hidden = 256;
  m.heads = 16;
  m.kv_heads = 8;
  m.vocab = 1000;
  m.seq_len = 128;
  apply_defaults(m);
  return m;
}

HardwareSpec hardware() {
  HardwareSpec hw;
  hw.name = "gpu";
  hw.peak_flops = 1e15;
  hw.hbm_bytes = 80LL << 30;
  hw.hbm_bandwidth = 3e12;
  hw.intra_node_bandwidth = 450e9;
  hw.inter_node_bandwidth = 50e9;
  return hw;
}

// tp=2, pp=2, dp=2 with 4 micro-batches: valid for model() on 8 devices.
ParallelPlan good_plan() {
  ParallelPlan p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 2;
  p.microbatches = 4;
  apply_defaults(p);
  return p;
}

struct RuleCase {
  const char* name;
  std::function<void(ModelSpec&, ParallelPlan&)> breaks;
  Fields fields;
  std::string rule;
  int devices = 8;
};

// Each rule's error is about the fields it names, and its rule is the message.
TEST(ErrorFields, EveryPlanRuleNamesItsFields) {
  const std::vector<RuleCase> cases = {
      {"tp divides heads",
       [](ModelSpec&, ParallelPlan& p) {
         p.tp = 3;
         p.dp = 1;
       },
       {"plan.tp", "model.heads"},
       "tp=3 does not divide heads=16",
       6},
      {"tp*pp*dp is the cluster",
       [](ModelSpec&, ParallelPlan& p) { p.dp = 1; },
       {"plan.tp", "plan.pp", "plan.dp", "cluster.devices"},
       "tp*pp*dp = 4 does not match the cluster's 8 devices"},
      {"tp positive",
       [](ModelSpec&, ParallelPlan& p) { p.tp = 0; },
       {"plan.tp"},
       "tp=0 must be positive"},
      {"micro_batch_size positive",
       [](ModelSpec&, ParallelPlan& p) { p.micro_batch_size = 0; },
       {"plan.micro_batch_size"},
       "micro_batch_size=0 must be positive"},
      {"ep divides dp",
       [](ModelSpec&, ParallelPlan& p) { p.ep = 3; },
       {"plan.ep", "plan.dp"},
       "ep=3 does not divide dp=2"},
      {"zero_stage",
       [](ModelSpec&, ParallelPlan& p) { p.zero_stage = 4; },
       {"plan.zero_stage"},
       "zero_stage=4 must be 0..3"},
      {"schedule name",
       [](ModelSpec&, ParallelPlan& p) { p.schedule = "2f2b"; },
       {"plan.schedule"},
       ""},
      {"sequence parallelism",
       [](ModelSpec&, ParallelPlan& p) {
         p.sequence_parallel = true;
         p.tp = 1;
         p.dp = 4;
       },
       {"plan.sequence_parallel", "plan.tp"},
       "sequence_parallel needs tp>1"},
      {"global batch",
       [](ModelSpec&, ParallelPlan& p) { p.global_batch = 7; },
       {"plan.global_batch", "plan.micro_batch_size", "plan.microbatches", "plan.dp"},
       "global_batch=7 does not equal micro_batch_size*microbatches*dp = 1*4*2 = 8"},
      {"pp and layers",
       [](ModelSpec& m, ParallelPlan&) { m.layers = 1; },
       {"plan.pp", "model.layers"},
       "pp=2 exceeds layers=1"},
      {"vocab mode needs pp",
       [](ModelSpec&, ParallelPlan& p) {
         p.vocab = schedule::VocabMode::Vocab1;
         p.pp = 1;
         p.dp = 4;
       },
       {"plan.vocab", "plan.pp"},
       "vocab mode vocab-1 needs pp>1"},
      {"model heads",
       [](ModelSpec& m, ParallelPlan&) { m.heads = 5; },
       {"model.heads", "model.hidden"},
       "heads=5 does not divide hidden=256"},
  };
  for (const RuleCase& c : cases) {
    SCOPED_TRACE(c.name);
    ModelSpec m = model();
    ParallelPlan p = good_plan();
    p.global_batch = 0;  // derived again from the broken plan, unless the case sets it
    c.breaks(m, p);
    if (p.global_batch == 0) apply_defaults(p);
    const InputError e = error_of([&] { validate(m, make_cluster(hardware(), c.devices), p); });
    EXPECT_EQ(e.fields(), c.fields) << e.what();
    EXPECT_EQ(e.field(), c.fields.front());
    if (!c.rule.empty()) {
      EXPECT_EQ(e.rule(), c.rule);
      EXPECT_EQ(e.what(), c.rule);
    }
  }
}

TEST(ErrorFields, ANestedSpecKeepsItsFieldUnderItsContext) {
  HardwareSpec hw = hardware();
  hw.peak_flops = 0;
  const InputError e = error_of([&] { validate(hw); });
  EXPECT_EQ(e.fields(), Fields{"hardware.peak_flops"});
  EXPECT_EQ(e.rule(), "peak_flops=0 must be positive");
  EXPECT_STREQ(e.what(), "hardware gpu: peak_flops=0 must be positive");
}

TEST(ErrorFields, AClusterRuleNamesTheClustersFields) {
  ClusterSpec c = make_cluster(hardware(), 16);
  c.devices = 12;  // 8 per node
  const InputError e = error_of([&] { validate(c); });
  EXPECT_EQ(e.fields(), (Fields{"cluster.devices", "cluster.devices_per_node"})) << e.what();
}

// The schedule generators' rules are about the plan's fields too, and its schedule.
TEST(ErrorFields, AScheduleRuleNamesThePlansFields) {
  ParallelPlan p = good_plan();
  p.schedule = "interleaved-1f1b";
  p.chunks = 2;
  p.microbatches = 3;  // a last group of 3 mod pp = 1 micro-batch, fewer than pp
  p.global_batch = 0;
  apply_defaults(p);
  const InputError e = error_of([&] { (void)plan_schedule(p); });
  EXPECT_EQ(e.field(), "plan.microbatches") << e.what();
  EXPECT_EQ(e.fields(), (Fields{"plan.microbatches", "plan.pp", "plan.schedule"})) << e.what();
  EXPECT_EQ(e.rule(), e.what());
  p.chunks = 3;
  p.schedule = "1f1b";
  const InputError chunks = error_of([&] { (void)plan_schedule(p); });
  EXPECT_EQ(chunks.fields(), (Fields{"plan.chunks", "plan.schedule"})) << chunks.what();
}

// A run file's rule is said at the line of the field it is about.
TEST(ErrorFields, ARunFileNamesTheLineAndKeyOfTheField) {
  const InputError e = error_of([] {
    (void)parse_run("model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\npp = 1\ntp = 3\ndp = 1\n",
                    "r.toml");
  });
  EXPECT_STREQ(e.what(), "r.toml:5: key 'plan.tp': tp=3 does not divide heads=4");
  EXPECT_EQ(e.field(), "plan.tp");
  EXPECT_EQ(e.rule(), "tp=3 does not divide heads=4");
  // Fields the file does not give (tp, pp): the rule at the first one it gives.
  const InputError absent = error_of([] {
    (void)parse_run("model = \"tiny\"\ncluster = \"dgx-a100-8\"\n[plan]\ndp = 2\n", "r.toml");
  });
  EXPECT_STREQ(absent.what(),
               "r.toml:4: key 'plan.dp': tp*pp*dp = 2 does not match the "
               "cluster's 8 devices");
}

// A spec file's own keys are fields too: a wrong type, a missing key, an unknown key (a typo), in
// a whole file (the spec's name in front) or inline in a run file (the table's dotted name).
TEST(ErrorFields, ASpecFilesKeyIsItsField) {
  const std::string model = "layers = 2\nhidden = 64\nheads = \"four\"\nvocab = 8\nseq_len = 8\n";
  const InputError type = error_of([&] { (void)parse_model(model, "m.toml"); });
  EXPECT_EQ(type.fields(), Fields{"model.heads"}) << type.what();
  EXPECT_STREQ(type.what(), "m.toml:3: key 'heads': expected an integer, got a string");
  EXPECT_EQ(type.rule(), "expected an integer, got a string");

  const InputError missing =
      error_of([] { (void)parse_model("layers = 2\nhidden = 64\nvocab = 8\nseq_len = 8\n"); });
  EXPECT_EQ(missing.fields(), Fields{"model.heads"}) << missing.what();
  EXPECT_EQ(missing.rule(), "missing key 'heads'");

  const InputError typo = error_of(
      [] { (void)parse_model("layers = 2\nhiden = 64\nheads = 4\nvocab = 8\nseq_len = 8\n"); });
  EXPECT_EQ(typo.fields(), Fields{"model.hiden"}) << typo.what();

  const InputError inline_model = error_of([] {
    (void)parse_run("cluster = \"dgx-a100-8\"\n[model]\npreset = \"tiny\"\nheads = -4\n", "r.toml");
  });
  EXPECT_EQ(inline_model.field(), "model.heads") << inline_model.what();

  const InputError efficiency = error_of([] {
    (void)parse_hardware(
        "peak_flops = 1e12\nhbm_bytes = 1e9\nhbm_bandwidth = 1e9\nintra_node_bandwidth = 1e9\n"
        "inter_node_bandwidth = 1e9\n[efficiency]\ngemm = 2.0\n");
  });
  EXPECT_EQ(efficiency.fields(), Fields{"hardware.efficiency.gemm"}) << efficiency.what();

  const InputError group = error_of([] {
    (void)parse_cluster(
        "hardware = \"h100-sxm\"\n[[node_groups]]\nnodes = 1\ninter_node_bandwidth = 1e9\n"
        "[[node_groups]]\nnodes = 2\n");
  });
  EXPECT_EQ(group.fields(), Fields{"cluster.node_groups[1].inter_node_bandwidth"}) << group.what();

  const InputError no_size = error_of([] { (void)parse_cluster("hardware = \"h100-sxm\"\n"); });
  EXPECT_EQ(no_size.fields(), (Fields{"cluster.nodes", "cluster.devices"})) << no_size.what();
}

}  // namespace
}  // namespace pipetune::spec
