// The tuner's target: a model on hardware x GPUs, or on a cluster preset or file whose node groups
// have different NICs (the cluster's own figures, checked against presets/clusters/
// h100-mixed-nic.toml), and the contradictions refused by name.
#include "tuner/search/tuning_target.hpp"

#include <gtest/gtest.h>

#include "engine/errors.hpp"

namespace pipetune::tuner {
namespace {

std::string refusal(const TuningTarget& t) {
  try {
    (void)resolve_target(t);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(TuningTarget, AClusterGivesItsHardwareSizeAndNodeGroups) {
  TuningTarget t;
  t.model = "llama3-70b";
  t.cluster = "h100-mixed-nic";
  t.global_batch = 128;
  const ResolvedTarget r = resolve_target(t);
  // 2 nodes with 400 Gb/s NICs, then 2 with 200 Gb/s, 8 H100s each.
  EXPECT_EQ(r.cluster.devices, 32);
  EXPECT_EQ(r.cluster.devices_per_node, 8);
  EXPECT_EQ(r.cluster.hardware.name, "h100-sxm");
  ASSERT_EQ(r.cluster.node_groups.size(), 2u);
  EXPECT_DOUBLE_EQ(r.cluster.node_inter_bandwidth(0), 50e9);
  EXPECT_DOUBLE_EQ(r.cluster.node_inter_bandwidth(3), 25e9);
}

TEST(TuningTarget, ClusterAndHardwareFlagsAreOneOrTheOther) {
  TuningTarget t;
  t.model = "llama3-70b";
  t.cluster = "h100-mixed-nic";
  t.global_batch = 128;
  t.gpus = 8;
  EXPECT_NE(refusal(t).find("h100-mixed-nic gives the hardware, GPUs and nodes"), std::string::npos)
      << refusal(t);
  t.gpus = 0;
  t.hardware = "h100-sxm";
  EXPECT_NE(refusal(t).find("do not also give hardware"), std::string::npos);
  t.hardware.clear();
  t.cluster = "no-such-cluster";
  EXPECT_NE(refusal(t).find("unknown cluster preset 'no-such-cluster'"), std::string::npos)
      << refusal(t);
  TuningTarget none;
  none.model = "llama3-70b";
  none.global_batch = 128;
  EXPECT_NE(refusal(none).find("hardware: choose a hardware preset (or a cluster)"),
            std::string::npos);
}

}  // namespace
}  // namespace pipetune::tuner
