// Output paths a hostile or careless user gives, through the
// binary: a directory, FIFO, socket or device is refused with exit 2 naming what it is (even with
// --force) and is left as it was; a symbolic link is written through and stays a link; a path
// whose folder is missing, or a checkpoint directory that is not one, is refused before the
// first step or measurement, and no run is stored. Every special file is made in a scratch
// folder: a failing test never replaces anything outside it.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/cli_expect.hpp"
#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSimulate = {"simulate", "--schedule",     "1f1b", "--stages",
                                            "2",        "--microbatches", "4",    "--no-gantt"};

// A scratch folder with a workspace holding one simulated run (run 1) and one search.
struct Scratch : ScratchWorkspace {
  Scratch() {
    const ProcessResult sim = run_pipetune(with(kSimulate, {"--db", db}));
    EXPECT_EQ(sim.exit_code, 0) << sim.err;
  }
  void add_search() const {
    const ProcessResult tune =
        run_pipetune({"tune", "--model", "tiny", "--hardware", "h100-sxm", "--gpus", "8",
                      "--global-batch", "32", "--seq", "32", "--top", "1", "--db", db});
    EXPECT_EQ(tune.exit_code, 0) << tune.err;
  }
};

// A Unix socket bound at `path` (closed at once: the file stays).
bool make_socket(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return false;
  std::copy(path.begin(), path.end(), address.sun_path);
  const bool bound = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
  ::close(fd);
  return bound;
}

mode_t file_type(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return 0;
  return st.st_mode & S_IFMT;
}

// Every command that writes an output file, with `out` as that file and --force.
std::vector<std::vector<std::string>> writers(const Scratch& s, const std::string& out) {
  return {
      {"train", "--steps", "1", "--no-db", "--trace", out, "--force"},
      with(kSimulate, {"--no-db", "--trace", out, "--force"}),
      {"export-trace", "1", "-o", out, "--force", "--db", s.db},
      {"export", "--format", "megatron", "-o", out, "--force", "--db", s.db},
      {"calibrate", "--hardware", "h100-sxm", "-o", out, "--force", "--db", s.db},
      {"calibrate", "--local", "--quick", "--devices", "1", "--threads", "1", "-o", out, "--force"},
  };
}

TEST(HostileOutputPaths, SpecialFilesAreRefusedEvenWithForceAndLeftAsTheyWere) {
  Scratch s;
  s.add_search();
  struct Special {
    std::string path;
    mode_t type;
    std::string named;
  };
  std::vector<Special> specials;
  const std::string fifo = s.path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  specials.push_back({fifo, S_IFIFO, "is a FIFO (named pipe), not a regular file"});
  const std::string socket = s.path("socket");
  ASSERT_TRUE(make_socket(socket));
  specials.push_back({socket, S_IFSOCK, "is a socket, not a regular file"});
  const std::string folder = s.path("folder");
  fs::create_directory(folder);
  specials.push_back({folder, S_IFDIR, "is a directory, not a regular file"});
  // A null device of the scratch folder's own (root only): never /dev/null itself.
  const std::string device = s.path("null-device");
  if (::mknod(device.c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0)
    specials.push_back({device, S_IFCHR, "is a character device, not a regular file"});
  for (const Special& special : specials) {
    for (const auto& args : writers(s, special.path)) {
      expect_refused(args, special.named);
      EXPECT_EQ(file_type(special.path), special.type) << command_line(args);
    }
  }
  // A link to a FIFO is the FIFO.
  const std::string link = s.path("link-to-fifo");
  fs::create_symlink(fifo, link);
  expect_refused({"export-trace", "1", "-o", link, "--force", "--db", s.db}, "FIFO");
  EXPECT_EQ(file_type(link), S_IFLNK);
  EXPECT_EQ(file_type(fifo), S_IFIFO);
  // The checkpoint directory: the same words for what is not a directory.
  expect_refused({"train", "--steps", "1", "--no-db", "--checkpoint", fifo},
                 "is a FIFO (named pipe), not a directory");
  EXPECT_EQ(file_type(fifo), S_IFIFO);
}

TEST(HostileOutputPaths, ASymbolicLinkIsWrittenThroughAndStaysALink) {
  Scratch s;
  const std::string target = s.path("real.json"), link = s.path("link.json");
  std::ofstream(target) << "old";
  fs::create_symlink("real.json", link);  // relative: resolved from the link's folder
  expect_refused({"export-trace", "1", "-o", link, "--db", s.db},
                 "exists (use --force to overwrite it)");
  const ProcessResult r = run_pipetune({"export-trace", "1", "-o", link, "--force", "--db", s.db});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(file_type(link), S_IFLNK);
  EXPECT_EQ(fs::read_symlink(link), fs::path("real.json"));
  EXPECT_TRUE(nlohmann::json::accept(slurp(target))) << slurp(target).substr(0, 200);

  // A link to a file that does not exist yet creates that file, in the link's target folder.
  fs::create_directory(s.dir / "elsewhere");
  const std::string dangling = s.path("dangling.json");
  fs::create_symlink(s.dir / "elsewhere" / "new.json", dangling);
  const ProcessResult created = run_pipetune(with(kSimulate, {"--no-db", "--trace", dangling}));
  ASSERT_EQ(created.exit_code, 0) << created.err;
  EXPECT_EQ(file_type(dangling), S_IFLNK);
  EXPECT_TRUE(nlohmann::json::accept(slurp((s.dir / "elsewhere" / "new.json").string())));
  // Nothing else is left in either folder (no temporary file).
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(s.dir / "elsewhere"))
    left.push_back(e.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"new.json"});
}

// The number of runs in a workspace; 0 when there is no workspace file.
std::size_t stored_runs(const std::string& db) {
  if (!fs::exists(db)) return 0;
  const ProcessResult r = run_pipetune({"runs", "--json", "--db", db});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out).size();
}

TEST(HostileOutputPaths, MissingFoldersAreRefusedBeforeTheWork) {
  Scratch s;
  s.add_search();
  const std::string missing = s.path("nodir") + "/x.json";
  const std::string train_db = s.path("train.db");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"train", "--steps", "2", "--trace", missing, "--db", train_db},
           {"train", "--steps", "2", "--checkpoint", s.path("nodir") + "/sub/ck", "--db", train_db},
           with(kSimulate, {"--trace", missing, "--db", train_db}),
           {"export", "--format", "megatron", "-o", missing, "--db", s.db},
           {"export-trace", "1", "-o", missing, "--db", s.db},
           {"calibrate", "--local", "--quick", "--devices", "1", "--threads", "1", "-o", missing},
       })
    expect_refused(args, "nodir");
  EXPECT_EQ(stored_runs(train_db), 0u);  // nothing trained or simulated, nothing stored
  EXPECT_FALSE(fs::exists(s.path("nodir")));
  // A file where a folder should be.
  std::ofstream(s.path("file")) << "x";
  expect_refused(with(kSimulate, {"--trace", s.path("file") + "/x.json", "--db", train_db}),
                 "file");
  EXPECT_EQ(stored_runs(train_db), 0u);
}

TEST(HostileOutputPaths, CheckpointDestinationsAreCheckedBeforeTheFirstStep) {
  Scratch s;
  const std::string db = s.path("train.db");
  const std::string file = s.path("a-file");
  std::ofstream(file) << "keep me";
  expect_refused({"train", "--steps", "2", "--checkpoint", file, "--db", db},
                 "is a file, not a directory");
  EXPECT_EQ(slurp(file), "keep me");
  const std::string notes = s.path("notes");
  fs::create_directory(notes);
  std::ofstream(s.path("notes/todo.txt")) << "keep me";
  expect_refused({"train", "--steps", "2", "--checkpoint", notes, "--db", db},
                 "is not a checkpoint directory");
  EXPECT_EQ(slurp(s.path("notes/todo.txt")), "keep me");
  EXPECT_EQ(stored_runs(db), 0u);
  // An empty directory takes one, and a checkpoint is replaced by the next.
  const std::string empty = s.path("empty");
  fs::create_directory(empty);
  for (int run = 0; run < 2; ++run) {
    const ProcessResult r =
        run_pipetune({"train", "--steps", "1", "--checkpoint", empty, "--db", db});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::exists(s.path("empty/manifest.txt")));
  }
}

// --force replaces an output file, never the workspace the command reads or stores into.
TEST(HostileOutputPaths, TheWorkspaceIsNeverAnOutputFile) {
  Scratch s;
  s.add_search();
  const std::string link = s.path("link-to-workspace.json");
  fs::create_symlink(s.db, link);
  for (const std::string& out : {s.db, link}) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             with(kSimulate, {"--trace", out, "--force", "--db", s.db}),
             {"train", "--steps", "1", "--trace", out, "--force", "--db", s.db},
             {"export-trace", "1", "-o", out, "--force", "--db", s.db},
             {"export", "--format", "megatron", "-o", out, "--force", "--db", s.db},
             {"calibrate", "--hardware", "h100-sxm", "-o", out, "--force", "--db", s.db},
         })
      expect_refused(args, "is the workspace '" + s.db + "'");
  }
  EXPECT_EQ(stored_runs(s.db), 1u);  // the simulated run, and no other
}

// Point 12: the error names the real cause, never "Success".
TEST(HostileOutputPaths, ErrorsNameTheRealCause) {
  Scratch s;
  // A folder that exists and says it is writable, but takes no new file.
  expect_refused({"export-trace", "1", "-o", "/proc/x.json", "--db", s.db},
                 "cannot create a file in '/proc'");
  // A name of 250 characters is a file name; the temporary file beside it must fit too.
  const std::string long_name = s.path(std::string(250, 'a'));
  const ProcessResult long_ok = run_pipetune({"export-trace", "1", "-o", long_name, "--db", s.db});
  EXPECT_EQ(long_ok.exit_code, 0) << long_ok.err;
  EXPECT_TRUE(nlohmann::json::accept(slurp(long_name)));
  fs::create_directory(s.path("folder"));
  const ProcessResult to_folder =
      run_pipetune({"export-trace", "1", "-o", s.path("folder"), "--force", "--db", s.db});
  EXPECT_EQ(to_folder.exit_code, 2) << to_folder.err;
  EXPECT_NE(to_folder.err.find("is a directory"), std::string::npos) << to_folder.err;
  EXPECT_EQ(to_folder.err.find("Success"), std::string::npos) << to_folder.err;
  expect_refused({"export-trace", "1", "-o", "", "--db", s.db}, "--output: the value is empty");
  expect_refused(with(kSimulate, {"--no-db", "--trace", ""}), "file name is empty");
}

// A write the file system refuses (here a file-size limit, as a quota would) names the system's
// reason, leaves no temporary file, and the file it would have replaced stays as it was.
TEST(HostileOutputPaths, AFailedWriteNamesTheReasonAndKeepsTheOldFile) {
  Scratch s;
  const std::string big = s.path("big.db");
  ASSERT_EQ(run_pipetune({"simulate", "--schedule", "1f1b", "--stages", "8", "--microbatches", "64",
                          "--no-gantt", "--db", big})
                .exit_code,
            0);
  const std::string out = s.path("trace.json");
  std::ofstream(out) << "old";
  char err_template[] = "/tmp/pipetune_err_XXXXXX";
  const int err_fd = ::mkstemp(err_template);
  ASSERT_GE(err_fd, 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::dup2(err_fd, 2);
    const rlimit limit{64 * 1024, 64 * 1024};  // above the workspace's index, below the trace
    ::setrlimit(RLIMIT_FSIZE, &limit);
    std::string bin = PIPETUNE_BIN;
    std::vector<std::string> args = {bin, "export-trace", "1", "-o", out, "--force", "--db", big};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  ::close(err_fd);
  const std::string err = slurp(err_template);
  ::unlink(err_template);
  ASSERT_TRUE(WIFEXITED(status)) << err;
  EXPECT_EQ(WEXITSTATUS(status), 1) << err;
  EXPECT_EQ(count_lines(err), 1) << err;
  EXPECT_NE(err.find("File too large"), std::string::npos) << err;
  EXPECT_EQ(slurp(out), "old");
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(s.dir))
    if (e.path() != big && e.path() != s.db) left.push_back(e.path().filename());
  EXPECT_EQ(left, std::vector<std::string>{"trace.json"});
}

}  // namespace
}  // namespace pipetune::testing
