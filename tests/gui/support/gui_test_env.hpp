// The display and the Qt application object of a GUI test process (header only).
//
//   QApplication* app = pipetune::gui::test::gui_test_app();
//   if (!app) PIPETUNE_SKIP_OR_FAIL(pipetune::gui::test::gui_test_skip_reason());
//
// gui_test_app() uses $DISPLAY when an X server answers on it, else starts its own
// `Xvfb -displayfd N -screen 0 1600x1000x24 -nolisten tcp` (the display number is picked by the
// server), sets DISPLAY and QT_QPA_PLATFORM=xcb and creates the one QApplication of the process.
// The Xvfb is terminated at process exit. Without an X server (no Xvfb binary, start failure) it
// returns nullptr and gui_test_skip_reason() says why.
//
// Core tests that only need an event loop call test_core_app(): it returns the application that
// exists, else tries gui_test_app(), else creates a QCoreApplication. A process may hold only one
// Q*Application, so every test of gui_fast_tests must get it through these two functions.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <QApplication>
#include <QCoreApplication>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "support/required_data.hpp"

extern char** environ;

namespace pipetune::gui::test {

namespace detail {

struct TestDisplay {
  pid_t xvfb_pid = -1;
  std::string reason;  // why there is no display ("" when there is one)
  bool tried = false;
  bool ok = false;
  QCoreApplication* app = nullptr;  // never deleted: Qt is torn down by the process exit
  int argc = 1;
  char arg0[16] = "gui_tests";
  char* argv[2] = {arg0, nullptr};
};

inline TestDisplay& state() {
  static TestDisplay s;
  return s;
}

// ":N" or ":N.S" -> true when something accepts connections on /tmp/.X11-unix/XN.
inline bool x_server_answers(const char* display) {
  if (display == nullptr || display[0] != ':') return false;
  const int n = std::atoi(display + 1);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::snprintf(addr.sun_path, sizeof addr.sun_path, "/tmp/.X11-unix/X%d", n);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

inline void stop_xvfb() {
  TestDisplay& s = state();
  if (s.xvfb_pid <= 0) return;
  ::kill(s.xvfb_pid, SIGTERM);
  int status = 0;
  ::waitpid(s.xvfb_pid, &status, 0);
  s.xvfb_pid = -1;
}

// Starts Xvfb and waits (up to 15 s) for it to write its display number; "" on failure.
inline std::string start_xvfb(std::string& reason) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    reason = std::string("pipe: ") + std::strerror(errno);
    return "";
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // The child gets the write end as fd 3 (dup2 clears CLOEXEC); its stdout/stderr are dropped.
  posix_spawn_file_actions_adddup2(&actions, fds[1], 3);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  char a0[] = "Xvfb", a1[] = "-displayfd", a2[] = "3", a3[] = "-screen", a4[] = "0",
       a5[] = "1600x1000x24", a6[] = "-nolisten", a7[] = "tcp";
  char* argv[] = {a0, a1, a2, a3, a4, a5, a6, a7, nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawnp(&pid, "Xvfb", &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(fds[1]);
  if (rc != 0) {
    ::close(fds[0]);
    reason = std::string("cannot start Xvfb: ") + std::strerror(rc);
    return "";
  }
  state().xvfb_pid = pid;
  std::atexit(stop_xvfb);
  std::string number;
  pollfd p{fds[0], POLLIN, 0};
  while (number.find('\n') == std::string::npos) {
    if (::poll(&p, 1, 15000) <= 0) break;
    char buf[32];
    const ssize_t n = ::read(fds[0], buf, sizeof buf);
    if (n <= 0) break;
    number.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fds[0]);
  while (!number.empty() && (number.back() == '\n' || number.back() == '\r')) number.pop_back();
  if (number.empty()) {
    stop_xvfb();
    reason = "Xvfb started but reported no display within 15 s";
    return "";
  }
  return ":" + number;
}

}  // namespace detail

inline QApplication* gui_test_app() {
  detail::TestDisplay& s = detail::state();
  if (s.tried) return s.ok ? qobject_cast<QApplication*>(s.app) : nullptr;
  s.tried = true;
  if (QCoreApplication::instance() != nullptr) {
    s.app = QCoreApplication::instance();
    s.ok = qobject_cast<QApplication*>(s.app) != nullptr;
    if (!s.ok) s.reason = "a QCoreApplication exists already (created without test_core_app())";
    return s.ok ? qobject_cast<QApplication*>(s.app) : nullptr;
  }
  const char* env_display = std::getenv("DISPLAY");
  if (!detail::x_server_answers(env_display)) {
    const std::string display = detail::start_xvfb(s.reason);
    if (display.empty()) return nullptr;
    ::setenv("DISPLAY", display.c_str(), 1);
  }
  ::setenv("QT_QPA_PLATFORM", "xcb", 1);
  s.app = new QApplication(s.argc, s.argv);
  s.ok = true;
  return static_cast<QApplication*>(s.app);
}

inline const std::string& gui_test_skip_reason() {
  return detail::state().reason;
}

inline QCoreApplication* test_core_app() {
  if (QCoreApplication::instance() != nullptr) return QCoreApplication::instance();
  if (QApplication* app = gui_test_app()) return app;
  detail::TestDisplay& s = detail::state();
  s.app = new QCoreApplication(s.argc, s.argv);
  return s.app;
}

}  // namespace pipetune::gui::test
