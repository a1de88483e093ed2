// db/output_file: the rule every output file follows (a regular file only, links followed,
// replaced atomically), checked on real files, FIFOs, sockets and links in a scratch folder.
#include "db/output_file.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace pipetune::db {
namespace {

namespace fs = std::filesystem;

struct ScratchFolder {
  fs::path dir;
  ScratchFolder() {
    char tmpl[] = "/tmp/pipetune_output_XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir = tmpl;
  }
  ~ScratchFolder() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The message of the InputError `f` throws ("" when it throws none).
template <typename F>
std::string input_error_of(F f) {
  try {
    f();
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(OutputFile, ANewOrReplacedRegularFileIsWrittenWhole) {
  ScratchFolder s;
  const std::string out = s.path("out.txt");
  check_output_file(out, false);
  write_output_file(out, "first");
  EXPECT_EQ(read(out), "first");
  EXPECT_THROW(check_output_file(out, false), OutputFileExists);
  check_output_file(out, true);
  write_output_file(out, [](std::ostream& o) { o << std::string(200000, 'x'); });
  EXPECT_EQ(read(out), std::string(200000, 'x'));
  EXPECT_EQ(s.names(), std::vector<std::string>{"out.txt"});
}

TEST(OutputFile, AWriterThatFailsLeavesTheOldFileAndNoTemporary) {
  ScratchFolder s;
  const std::string out = s.path("out.txt");
  write_output_file(out, "old");
  EXPECT_THROW(write_output_file(out,
                                 [](std::ostream& o) {
                                   o << std::string(100000, 'y');
                                   throw std::runtime_error("the writer failed");
                                 }),
               std::runtime_error);
  EXPECT_EQ(read(out), "old");
  EXPECT_EQ(s.names(), std::vector<std::string>{"out.txt"});
}

TEST(OutputFile, SpecialFilesAreRefusedNamingWhatTheyAre) {
  ScratchFolder s;
  const std::string fifo = s.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  fs::create_directory(s.path("folder"));
  for (const auto& [path, named] : std::vector<std::pair<std::string, std::string>>{
           {fifo, "is a FIFO (named pipe), not a regular file"},
           {s.path("folder"), "is a directory, not a regular file"},
           {"", "the output file name is empty"}}) {
    for (const bool replace : {false, true})
      EXPECT_NE(input_error_of([&] { check_output_file(path, replace); }).find(named),
                std::string::npos)
          << path;
    EXPECT_NE(input_error_of([&] { write_output_file(path, "x"); }).find(named), std::string::npos)
        << path;
  }
  struct stat st {};
  ASSERT_EQ(::lstat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

// /proc's links (/dev/stdout is one) lead to pipes that have no path: the kernel's lookup says
// what they are.
TEST(OutputFile, AProcLinkToAPipeIsAPipe) {
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const std::string link = "/proc/self/fd/" + std::to_string(fds[1]);
  EXPECT_NE(input_error_of([&] { check_output_file(link, true); }).find("is a FIFO (named pipe)"),
            std::string::npos);
  EXPECT_NE(input_error_of([&] { write_output_file(link, "x"); }).find("is a FIFO (named pipe)"),
            std::string::npos);
  ::close(fds[0]);
  ::close(fds[1]);
}

TEST(OutputFile, TheFolderMustExistAndBeAFolder) {
  ScratchFolder s;
  EXPECT_NE(input_error_of([&] {
              check_output_file(s.path("nodir/x.json"), true);
            }).find("folder '" + s.path("nodir") + "' does not exist"),
            std::string::npos);
  write_output_file(s.path("file"), "x");
  EXPECT_NE(input_error_of([&] {
              check_output_file(s.path("file/x.json"), true);
            }).find("Not a directory"),
            std::string::npos);
}

TEST(OutputFile, LinksAreFollowedAndStayLinks) {
  ScratchFolder s;
  fs::create_directory(s.path("real"));
  const std::string link = s.path("link.txt");
  fs::create_symlink("real/target.txt", link);  // dangling until written
  EXPECT_EQ(resolve_output_path(link), s.path("real/target.txt"));
  check_output_file(link, false);
  write_output_file(link, "through the link");
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read(s.path("real/target.txt")), "through the link");
  EXPECT_THROW(check_output_file(link, false), OutputFileExists);
  // A chain of links, and a cycle.
  fs::create_symlink("link.txt", s.path("second.txt"));
  write_output_file(s.path("second.txt"), "twice");
  EXPECT_EQ(read(s.path("real/target.txt")), "twice");
  fs::create_symlink("loop-b", s.path("loop-a"));
  fs::create_symlink("loop-a", s.path("loop-b"));
  EXPECT_NE(input_error_of([&] {
              check_output_file(s.path("loop-a"), true);
            }).find("too many levels of symbolic links"),
            std::string::npos);
}

TEST(OutputFile, AnExecutableFileGetsExecuteBits) {
  ScratchFolder s;
  const mode_t old_mask = ::umask(022);
  write_output_file(s.path("run.sh"), "#!/bin/sh\n", {.executable = true});
  write_output_file(s.path("plain.txt"), "x");
  ::umask(old_mask);
  struct stat st {};
  ASSERT_EQ(::stat(s.path("run.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0755u);
  ASSERT_EQ(::stat(s.path("plain.txt").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

}  // namespace
}  // namespace pipetune::db
