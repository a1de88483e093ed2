// Telling a live writer from a dead one: this process is alive; the same pid with another start
// time (a reused pid) is dead; a zombie and a reaped child are dead; another host is unknown.
#include "db/store/process_identity.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <thread>

namespace pipetune::db {
namespace {

TEST(ProcessIdentity, ThisProcessIsAlive) {
  const ProcessIdentity self = current_process();
  EXPECT_EQ(self.pid, ::getpid());
  EXPECT_FALSE(self.host.empty());
  EXPECT_GT(self.start_ticks, 0);
  EXPECT_EQ(writer_state(self), WriterState::Alive);
  // /proc/self/stat field 22, read independently: split on spaces after the last ')'.
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22; ++i) rest >> field;
  EXPECT_EQ(std::to_string(self.start_ticks), field);
}

TEST(ProcessIdentity, ReusedPidOtherHostAndRebootAreTold) {
  ProcessIdentity reused = current_process();
  reused.start_ticks += 1;
  EXPECT_EQ(writer_state(reused), WriterState::Dead);
  ProcessIdentity elsewhere = current_process();
  elsewhere.host += "-elsewhere";
  EXPECT_EQ(writer_state(elsewhere), WriterState::Unknown);
  ProcessIdentity before_reboot = current_process();
  before_reboot.boot_id = "00000000-0000-0000-0000-000000000000";
  EXPECT_EQ(writer_state(before_reboot), WriterState::Dead);
}

TEST(ProcessIdentity, ZombieAndReapedChildrenAreDead) {
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::usleep(100000);
    ::_exit(0);
  }
  ProcessIdentity id = current_process();
  id.pid = child;
  bool zombie = false;
  ASSERT_TRUE(read_process_start(child, id.start_ticks, zombie));
  EXPECT_FALSE(zombie);
  EXPECT_EQ(writer_state(id), WriterState::Alive);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  std::int64_t ticks = 0;
  while (!(read_process_start(child, ticks, zombie) && zombie) &&
         std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  ASSERT_TRUE(zombie);
  EXPECT_EQ(writer_state(id), WriterState::Dead) << "an exited, unreaped child";
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(writer_state(id), WriterState::Dead) << "a reaped child";
}

}  // namespace
}  // namespace pipetune::db
