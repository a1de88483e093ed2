// Who writes a run: enough to tell, from another process on the same host, whether that writer
// is still alive (running) or died without finishing (interrupted). A pid alone is not enough:
// pids are reused, so the process start time (/proc/<pid>/stat field 22, clock ticks since
// boot) and the boot id are kept with it.
#pragma once

#include <cstdint>
#include <string>

namespace pipetune::db {

struct ProcessIdentity {
  std::string host;     // gethostname()
  std::string boot_id;  // /proc/sys/kernel/random/boot_id; "" when unavailable
  std::int64_t pid = 0;
  std::int64_t start_ticks = -1;  // -1 when unavailable
};

// The calling process.
ProcessIdentity current_process();

enum class WriterState {
  Alive,    // the same process still runs on this host
  Dead,     // it is gone: no such pid, a zombie, a reused pid, or the host rebooted
  Unknown,  // another host: cannot tell
};

WriterState writer_state(const ProcessIdentity& writer);

// Field 22 of /proc/<pid>/stat and whether the process is a zombie; false when unreadable.
bool read_process_start(std::int64_t pid, std::int64_t& start_ticks, bool& zombie);

}  // namespace pipetune::db
