#include "db/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <streambuf>
#include <vector>

namespace pipetune::db {

namespace {

namespace fs = std::filesystem;

// Linux's own limit on links followed in one lookup.
constexpr int kMaxLinkHops = 40;

std::string in_quotes(const std::string& path) {
  return "'" + path + "'";
}

std::string folder_of(const std::string& resolved) {
  const fs::path folder = fs::path(resolved).parent_path();
  return folder.empty() ? std::string(".") : folder.string();
}

// The checks both entry points make; true when a regular file is at the path.
bool check_target(const std::string& path, const std::string& resolved) {
  struct stat st {};
  bool exists = false;
  // The kernel's own lookup first: it also follows the links /proc makes (/dev/stdout to a pipe).
  if (::stat(path.c_str(), &st) == 0) {
    if (!S_ISREG(st.st_mode))
      throw InputError(in_quotes(path) + " is " + file_type_name(st.st_mode) +
                       ", not a regular file: output is written only to regular files");
    exists = true;
  } else if (errno != ENOENT) {
    throw InputError("cannot write " + in_quotes(path) + ": " + std::strerror(errno));
  }
  // The new text is renamed into place from beside the target: its folder must take a file.
  const std::string folder = folder_of(resolved);
  if (::stat(folder.c_str(), &st) != 0) {
    const int err = errno;
    throw InputError(
        "cannot write " + in_quotes(path) + ": folder " + in_quotes(folder) +
        (err == ENOENT ? std::string(" does not exist") : ": " + std::string(std::strerror(err))));
  }
  if (!S_ISDIR(st.st_mode))
    throw InputError("cannot write " + in_quotes(path) + ": " + in_quotes(folder) + " is " +
                     file_type_name(st.st_mode) + ", not a folder");
  if (::access(folder.c_str(), W_OK | X_OK) != 0)
    throw InputError("cannot write " + in_quotes(path) + ": folder " + in_quotes(folder) + ": " +
                     std::strerror(errno));
  return exists;
}

// An output stream buffer over a file descriptor that keeps the errno of the write that failed.
class FileDescriptorBuffer : public std::streambuf {
 public:
  explicit FileDescriptorBuffer(int fd) : fd_(fd), buffer_(std::size_t{1} << 16) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }
  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
      *pptr() = traits_type::to_char_type(c);
      pbump(1);
    }
    return traits_type::not_eof(c);
  }
  int sync() override { return drain() ? 0 : -1; }

 private:
  bool drain() {
    if (error_ != 0) return false;
    const char* p = pbase();
    std::size_t left = static_cast<std::size_t>(pptr() - pbase());
    while (left > 0) {
      const ssize_t n = ::write(fd_, p, left);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = n < 0 ? errno : EIO;
        return false;
      }
      p += n;
      left -= static_cast<std::size_t>(n);
    }
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return true;
  }

  int fd_;
  std::vector<char> buffer_;
  int error_ = 0;
};

// A new file in the target's folder that no other writer uses, with a short name whatever the
// target's length; its descriptor and name. -1 and errno when it cannot be made.
int create_temporary(const std::string& resolved, bool executable, std::string& name) {
  static std::atomic<unsigned> counter{0};
  const mode_t mode = executable ? 0777 : 0666;  // less the umask, as any new file
  const fs::path folder = folder_of(resolved);
  for (int attempt = 0;; ++attempt) {
    name = (folder /
            (".pipetune-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + ".tmp"))
               .string();
    const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
    if (fd >= 0 || errno != EEXIST || attempt == 100) return fd;
  }
}

}  // namespace

std::string file_type_name(unsigned mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

std::string resolve_output_path(const std::string& path) {
  std::string current = path;
  for (int hop = 0; hop < kMaxLinkHops; ++hop) {
    struct stat st {};
    if (::lstat(current.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) return current;
    std::error_code ec;
    const fs::path target = fs::read_symlink(current, ec);
    if (ec) return current;  // check_target says why it cannot be used
    current = target.is_absolute() ? target.string()
                                   : (fs::path(current).parent_path() / target).string();
  }
  throw InputError(in_quotes(path) + ": too many levels of symbolic links");
}

void check_output_file(const std::string& path, bool replace, const std::string& workspace) {
  if (path.empty()) throw InputError("the output file name is empty");
  const std::string resolved = resolve_output_path(path);
  const bool exists = check_target(path, resolved);
  // Whether the folder takes a file is known only by making one (/proc, a read-only mount).
  std::string probe;
  const int fd = create_temporary(resolved, false, probe);
  if (fd < 0)
    throw InputError("cannot write " + in_quotes(path) + ": cannot create a file in " +
                     in_quotes(folder_of(resolved)) + ": " + std::strerror(errno));
  ::close(fd);
  ::unlink(probe.c_str());
  if (!exists) return;
  struct stat output {};
  struct stat kept {};
  if (!workspace.empty() && ::stat(path.c_str(), &output) == 0 &&
      ::stat(workspace.c_str(), &kept) == 0 && output.st_dev == kept.st_dev &&
      output.st_ino == kept.st_ino)
    throw InputError(in_quotes(path) + " is the workspace " + in_quotes(workspace) +
                     ": writing it would destroy the workspace's runs");
  if (!replace) throw OutputFileExists(path + " exists");
}

void write_output_file(const std::string& path, const std::function<void(std::ostream&)>& write,
                       const OutputFileOptions& options) {
  if (path.empty()) throw InputError("the output file name is empty");
  const std::string resolved = resolve_output_path(path);
  (void)check_target(path, resolved);
  std::string temporary;
  const int fd = create_temporary(resolved, options.executable, temporary);
  if (fd < 0)
    throw std::runtime_error("cannot write " + in_quotes(path) + ": creating " +
                             in_quotes(temporary) + ": " + std::strerror(errno));
  // The step that failed and its errno, taken at the failing call.
  const auto fail = [&](const std::string& step, int err) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw std::runtime_error("cannot write " + in_quotes(path) + ": " + step + ": " +
                             std::strerror(err));
  };
  FileDescriptorBuffer buffer(fd);
  {
    std::ostream out(&buffer);
    try {
      write(out);
      out.flush();
    } catch (...) {
      ::close(fd);
      ::unlink(temporary.c_str());
      throw;
    }
    if (buffer.error() != 0 || !out)
      fail("writing " + in_quotes(temporary), buffer.error() != 0 ? buffer.error() : EIO);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    fail("flushing " + in_quotes(temporary) + " to the device", err);
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    throw std::runtime_error("cannot write " + in_quotes(path) + ": closing " +
                             in_quotes(temporary) + ": " + std::strerror(err));
  }
  if (::rename(temporary.c_str(), resolved.c_str()) != 0) {
    const int err = errno;
    ::unlink(temporary.c_str());
    throw std::runtime_error("cannot write " + in_quotes(path) + ": renaming " +
                             in_quotes(temporary) + " into place: " + std::strerror(err));
  }
}

void write_output_file(const std::string& path, std::string_view text,
                       const OutputFileOptions& options) {
  write_output_file(
      path,
      [text](std::ostream& out) {
        out.write(text.data(), static_cast<std::streamsize>(text.size()));
      },
      options);
}

}  // namespace pipetune::db
