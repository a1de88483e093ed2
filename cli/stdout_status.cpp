#include "cli/stdout_status.hpp"

#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>
#include <vector>

namespace pipetune::cli {

namespace {

// One command runs per process: its notes and stdout's first failure.
struct StdoutStatus {
  int first_error = 0;
  std::vector<std::string> kept;
};

StdoutStatus& status() {
  static StdoutStatus s;
  return s;
}

// Whether stdout is a pipe or socket that nobody reads any more. stdio drops its buffer and the
// errno of a failed write it made by itself (a full buffer, std::endl's flush), so a failure
// found only afterwards is recognised by its cause.
bool pipe_without_reader() {
  struct stat st {};
  if (::fstat(STDOUT_FILENO, &st) != 0 || !(S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)))
    return false;
  pollfd p{STDOUT_FILENO, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & (POLLERR | POLLHUP)) != 0;
}

}  // namespace

bool flush_stdout() {
  // std::cout is synchronised with stdio: its flush is fflush(stdout), whose errno is the one.
  errno = 0;
  std::cout.flush();
  int error = std::cout.bad() ? errno : 0;
  errno = 0;
  if (std::fflush(stdout) != 0) error = errno != 0 ? errno : EIO;
  if (error != 0 && status().first_error == 0) status().first_error = error;
  return error == 0 && !std::ferror(stdout) && !std::cout.bad();
}

void note_kept(const std::string& what) {
  status().kept.push_back(what);
}

std::string stdout_failure() {
  if (flush_stdout()) return {};
  int error = status().first_error;
  if (error == 0 && pipe_without_reader()) error = EPIPE;
  std::string line = "stdout: ";
  line += error != 0 ? std::strerror(error) : "a write failed";
  for (const std::string& what : status().kept) line += "; " + what;
  return line;
}

}  // namespace pipetune::cli
