#include "db/store/process_identity.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace pipetune::db {

namespace {

std::string host_name() {
  char buffer[HOST_NAME_MAX + 1] = {};
  if (::gethostname(buffer, sizeof buffer) != 0) return "";
  buffer[HOST_NAME_MAX] = '\0';
  return buffer;
}

std::string boot_id() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return id;
}

}  // namespace

bool read_process_start(std::int64_t pid, std::int64_t& start_ticks, bool& zombie) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return false;
  // Field 2 is the command in parentheses and may hold spaces or ')': fields resume after the
  // last ')'. There, field 3 (state) comes first and field 22 (starttime) 19 fields later.
  const auto paren = line.rfind(')');
  if (paren == std::string::npos) return false;
  std::istringstream fields(line.substr(paren + 1));
  std::string state;
  fields >> state;
  std::string value;
  for (int field = 4; field <= 22; ++field) fields >> value;
  if (!fields || state.empty()) return false;
  char* end = nullptr;
  const long long ticks = std::strtoll(value.c_str(), &end, 10);
  if (end == value.c_str() || *end != '\0') return false;
  start_ticks = ticks;
  zombie = state[0] == 'Z' || state[0] == 'X';
  return true;
}

ProcessIdentity current_process() {
  ProcessIdentity id;
  id.host = host_name();
  id.boot_id = boot_id();
  id.pid = ::getpid();
  bool zombie = false;
  if (!read_process_start(id.pid, id.start_ticks, zombie)) id.start_ticks = -1;
  return id;
}

WriterState writer_state(const ProcessIdentity& writer) {
  const ProcessIdentity self = current_process();
  if (writer.host != self.host) return WriterState::Unknown;
  if (!writer.boot_id.empty() && !self.boot_id.empty() && writer.boot_id != self.boot_id)
    return WriterState::Dead;  // rebooted since: every process of that boot is gone
  if (writer.pid <= 0 || writer.pid > INT_MAX) return WriterState::Dead;
  if (::kill(static_cast<pid_t>(writer.pid), 0) != 0 && errno == ESRCH) return WriterState::Dead;
  std::int64_t ticks = -1;
  bool zombie = false;
  if (!read_process_start(writer.pid, ticks, zombie)) {
    // No /proc entry: it exited just now, or there is no /proc; ask kill() once more.
    return ::kill(static_cast<pid_t>(writer.pid), 0) == 0 || errno == EPERM ? WriterState::Alive
                                                                            : WriterState::Dead;
  }
  if (zombie) return WriterState::Dead;
  if (writer.start_ticks >= 0 && ticks != writer.start_ticks) return WriterState::Dead;
  return WriterState::Alive;
}

}  // namespace pipetune::db
