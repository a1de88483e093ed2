// parse_launch_command on the command lines nsys records (PROCESS_0:COMMAND and ARGUMENT_i):
// torchrun's and mpirun's spellings of the job's size, and where the launcher's options end.
#include "db/import/launch_command.hpp"

#include <gtest/gtest.h>

namespace pipetune::db {
namespace {

TEST(LaunchCommand, TorchrunSpellings) {
  // The real capture's command (../shared/data/real_traces/nsys-2gpu-torchrun).
  auto l = parse_launch_command(
      "torchrun", {"--nnodes=1", "--nproc_per_node=2", "--master_port=29506", "/tmp/t.py"});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->launcher, "torchrun");
  EXPECT_EQ(l->processes_per_node, 2);
  EXPECT_EQ(l->nodes, 1);
  EXPECT_EQ(l->world_size, 2);
  EXPECT_EQ(l->text, "torchrun --nnodes=1 --nproc_per_node=2 --master_port=29506 /tmp/t.py");
  // Space-separated values, the hyphenated names, an option with a value in between.
  l = parse_launch_command("/usr/bin/torchrun",
                           {"--nnodes", "2", "--master_addr", "n0", "--nproc-per-node", "8",
                            "--node-rank", "1", "train.py", "--nproc_per_node=99"});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->processes_per_node, 8);  // the script's own --nproc_per_node is not torchrun's
  EXPECT_EQ(l->nodes, 2);
  EXPECT_EQ(l->node_rank, 1);
  EXPECT_EQ(l->world_size, 16);
  // python -m torch.distributed.run; an elastic node range is no fixed size.
  l = parse_launch_command(
      "python3", {"-m", "torch.distributed.run", "--nnodes=1:4", "--nproc_per_node=4", "train.py"});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->processes_per_node, 4);
  EXPECT_FALSE(l->nodes.has_value());
  EXPECT_FALSE(l->world_size.has_value());
}

TEST(LaunchCommand, MpirunAndSrun) {
  auto l =
      parse_launch_command("mpirun", {"--map-by", "ppr:4:node", "-np", "8", "./app", "-n", "3"});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->launcher, "mpirun");
  EXPECT_EQ(l->world_size, 8);
  l = parse_launch_command("srun", {"--ntasks=16", "python", "train.py"});
  ASSERT_TRUE(l.has_value());
  EXPECT_EQ(l->launcher, "srun");
  EXPECT_EQ(l->world_size, 16);
}

TEST(LaunchCommand, OtherCommandsAndBadNumbers) {
  EXPECT_FALSE(parse_launch_command("python3", {"train.py"}).has_value());
  EXPECT_FALSE(parse_launch_command("./saxpy", {}).has_value());
  const auto l = parse_launch_command("torchrun", {"--nproc_per_node=lots", "t.py"});
  ASSERT_TRUE(l.has_value());
  EXPECT_FALSE(l->processes_per_node.has_value());
  EXPECT_FALSE(parse_launch_command("mpirun", {"-np", "-3", "./a"})->world_size.has_value());
}

}  // namespace
}  // namespace pipetune::db
