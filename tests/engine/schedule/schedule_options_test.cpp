// What generate() refuses beside sizes: options a schedule does not read, and costs
// past the one bound on schedule times (check_costs), which the simulator applies too.
#include <gtest/gtest.h>

#include <limits>
#include <string>

#include "engine/errors.hpp"
#include "engine/schedule/costs.hpp"
#include "engine/schedule/generators.hpp"

namespace pipetune::schedule {
namespace {

GeneratorParams params(const std::string& name) {
  GeneratorParams g;
  g.name = name;
  g.stages = 4;
  g.microbatches = 8;
  return g;
}

std::string refusal(const GeneratorParams& g) {
  try {
    generate(g);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(ScheduleOptions, AGroupSizeIsInterleavedOnesOnly) {
  for (std::string_view name : schedule_names()) {
    GeneratorParams g = params(std::string(name));
    g.group_size = 4;
    if (name == "interleaved-1f1b") {
      EXPECT_EQ(refusal(g), "") << name;
    } else {
      EXPECT_EQ(refusal(g), "a micro-batch group size (4) applies to interleaved-1f1b only, not " +
                                std::string(name));
    }
  }
}

TEST(ScheduleOptions, AMemoryLimitIsTheMemoryBoundedSchedulesOnly) {
  for (std::string_view name : schedule_names()) {
    GeneratorParams g = params(std::string(name));
    g.memory_limit = 6.0;
    if (name == "zb-h2" || name == "zb-v" || name == "skippipe-ca") {
      EXPECT_EQ(refusal(g), "") << name;
    } else {
      EXPECT_EQ(refusal(g),
                "an activation memory limit applies to the memory-bounded schedules zb-h2, zb-v "
                "and skippipe-ca only, not " +
                    std::string(name));
    }
  }
}

TEST(ScheduleOptions, CostsPastWhatATraceHoldsAreRefused) {
  EXPECT_NO_THROW(check_costs(CostTable::uniform(4, 1e9, 1e9, 1e9)));
  for (double bad : {1e10, 1e308, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN(), -1.0}) {
    EXPECT_THROW(check_costs(CostTable::uniform(4, bad, 1, 1)), InputError) << bad;
    CostTable t = CostTable::uniform(4, 1, 1, 1);
    t.collective_time = bad;
    EXPECT_THROW(check_costs(t), InputError) << bad;
    t = CostTable::uniform(4, 1, 1, 1);
    t.p2p_latency = bad;
    EXPECT_THROW(check_costs(t), InputError) << bad;
  }
  // B and W each fit; their fused sum does not.
  EXPECT_THROW(check_costs(CostTable::uniform(4, 1, 5e9, 5e9)), InputError);
  // The cost-aware generators plan with them: refused before planning, not stalled in it.
  GeneratorParams g = params("1f1b");
  g.vocab = VocabMode::Vocab1;
  g.costs = CostTable::uniform(4, 1, 1, 1, 1e308, 1);
  EXPECT_NE(refusal(g).find("an op cost of 1e+308 is beyond what a trace holds"), std::string::npos)
      << refusal(g);
  EXPECT_THROW(check_schedule_time(kMaxScheduleTime, "a time"), InputError);
  EXPECT_NO_THROW(check_schedule_time(kMaxScheduleTime * 0.999, "a time"));
}

}  // namespace
}  // namespace pipetune::schedule
