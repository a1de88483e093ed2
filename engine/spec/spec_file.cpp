#include "engine/spec/spec_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "engine/errors.hpp"

namespace fs = std::filesystem;

namespace pipetune::spec {

namespace {

[[noreturn]] void fail(const std::string& path, const std::string& why) {
  throw InputError("cannot write '" + path + "': " + why);
}

// The file a path's links lead to (the path itself when it is no link).
fs::path link_target(const std::string& path) {
  std::error_code ec;
  if (!fs::is_symlink(fs::symlink_status(path, ec))) return path;
  const fs::path target = fs::weakly_canonical(path, ec);
  if (ec) fail(path, ec.message());
  return target;
}

std::string file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

void check_target(const std::string& path, const fs::path& target) {
  struct stat st {};
  if (::stat(target.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      fail(path, "it is " + file_kind(st.st_mode) + ", and only a regular file is written");
  } else if (errno != ENOENT) {
    fail(path, std::strerror(errno));
  }
}

// A new file beside the target that no other writer uses; its descriptor, or -1 and errno.
int create_temporary(const fs::path& target, bool executable, std::string& name) {
  static std::atomic<unsigned> counter{0};
  const fs::path folder = target.has_parent_path() ? target.parent_path() : fs::path(".");
  for (int attempt = 0;; ++attempt) {
    name = (folder /
            (".pipetune-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".tmp"))
               .string();
    const int fd =
        ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, executable ? 0777 : 0666);
    if (fd >= 0 || errno != EEXIST || attempt == 100) return fd;
  }
}

bool write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

void write_spec_file(const std::string& path, std::string_view text, bool executable) {
  if (path.empty()) throw InputError("the file name is empty");
  const fs::path target = link_target(path);
  check_target(path, target);
  std::string temporary;
  const int fd = create_temporary(target, executable, temporary);
  if (fd < 0)
    fail(path, "cannot create a file in its folder: " + std::string(std::strerror(errno)));
  const auto abandon = [&](const std::string& step) {
    const int err = errno;
    ::close(fd);
    ::unlink(temporary.c_str());
    fail(path, step + ": " + std::strerror(err));
  };
  if (!write_all(fd, text)) abandon("writing");
  if (::fsync(fd) != 0) abandon("flushing to the device");
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    fail(path, "closing: " + std::string(std::strerror(err)));
  }
  if (::rename(temporary.c_str(), target.c_str()) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    fail(path, "renaming into place: " + std::string(std::strerror(err)));
  }
}

}  // namespace pipetune::spec
