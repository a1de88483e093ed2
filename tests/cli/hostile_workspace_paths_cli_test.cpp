// Workspace paths are file names, through the binary: an empty one is refused,
// and one that SQLite would read as something else (a "file:" URI, ":memory:") is the file of
// that name, where `runs` then finds the run that the command said it stored there.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "support/run_process.hpp"

namespace pipetune::testing {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kSimulate = {"simulate", "--schedule",     "1f1b", "--stages",
                                            "2",        "--microbatches", "4",    "--no-gantt"};

std::vector<std::string> with(std::vector<std::string> base, std::vector<std::string> more) {
  base.insert(base.end(), more.begin(), more.end());
  return base;
}

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(HostileWorkspacePaths, AnEmptyWorkspacePathIsRefused) {
  ScratchWorkspace s;
  for (const auto& args : std::vector<std::vector<std::string>>{
           with(kSimulate, {"--db", ""}),
           {"train", "--steps", "1", "--db", ""},
           {"runs", "--db", ""},
           {"report", "1", "--db", ""},
       }) {
    const ProcessResult r = run_pipetune(args, s.dir.string());
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << args[0] << ": " << r.err;
    // The option's empty value is refused by name (the library refuses an empty workspace name
    // too: db workspace_file_name_test).
    EXPECT_NE(r.err.find("--db: the value is empty"), std::string::npos) << r.err;
    EXPECT_EQ(r.out.find("stored as run"), std::string::npos) << r.out;
  }
  EXPECT_TRUE(files_in(s.dir).empty());  // nothing created, not even a temporary file
}

// A FIFO would block SQLite's first read and a device swallow its writes (and get a journal file
// beside it): only a regular file is a workspace.
TEST(HostileWorkspacePaths, AFifoOrDeviceIsNotAWorkspace) {
  ScratchWorkspace s;
  struct Special {
    std::string name;
    std::string named;
  };
  std::vector<Special> specials = {{"fifo", "not a pipetune workspace (a FIFO (named pipe))"}};
  ASSERT_EQ(::mkfifo((s.dir / "fifo").c_str(), 0644), 0);
  // A null device of the scratch folder's own (root only): never /dev/null itself.
  if (::mknod((s.dir / "null-device").c_str(), S_IFCHR | 0666, ::makedev(1, 3)) == 0)
    specials.push_back({"null-device", "not a pipetune workspace (a character device)"});
  for (const Special& special : specials) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             with(kSimulate, {"--db", special.name}),
             {"runs", "--db", special.name},
         }) {
      const ProcessResult r = run_pipetune(args, s.dir.string());
      EXPECT_EQ(r.exit_code, 2) << args[0] << " " << special.name << ": " << r.err;
      EXPECT_EQ(count_lines(r.err), 1) << r.err;
      EXPECT_EQ(r.err, "pipetune: error: " + special.name + ": " + special.named + "\n");
    }
  }
  std::vector<std::string> expected;
  for (const Special& special : specials) expected.push_back(special.name);
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(files_in(s.dir), expected);  // no journal or WAL file beside them
}

TEST(HostileWorkspacePaths, NamesSQLiteWouldReadAsURIsAreFileNames) {
  for (const std::string name :
       {"file:uri2.db", "file:x?mode=memory", ":memory:", "file:a%20b#c.db"}) {
    ScratchWorkspace s;
    const std::string dir = s.dir.string();
    const ProcessResult sim = run_pipetune(with(kSimulate, {"--db", name}), dir);
    ASSERT_EQ(sim.exit_code, 0) << name << ": " << sim.err;
    EXPECT_NE(sim.out.find("stored as run 1 in " + name + "\n"), std::string::npos) << sim.out;
    // The workspace is the file of that name, and nothing else is left beside it (no
    // ".creating-..." file, no file of the name a URI would give).
    EXPECT_EQ(files_in(s.dir), std::vector<std::string>{name}) << name;
    const ProcessResult runs = run_pipetune({"runs", "--json", "--db", name}, dir);
    ASSERT_EQ(runs.exit_code, 0) << name << ": " << runs.err;
    const nlohmann::json listed = nlohmann::json::parse(runs.out);
    ASSERT_EQ(listed.size(), 1u) << runs.out;
    EXPECT_EQ(listed[0].at("status"), "complete");
    // The same file by its absolute path.
    const ProcessResult again =
        run_pipetune({"runs", "--json", "--db", (s.dir / name).string()}, "/");
    ASSERT_EQ(again.exit_code, 0) << again.err;
    EXPECT_EQ(nlohmann::json::parse(again.out).size(), 1u);
  }
}

// A long file name: up to the folder's limit less SQLite's "-journal" it is a workspace like any
// other (it failed with "unable to open database file": the temporary name it is built under was
// longer than the folder takes); past that it is refused naming both lengths, and nothing is left.
TEST(HostileWorkspacePaths, LongNamesAreWorkspacesUpToWhatSQLiteCanPutBesideThem) {
  ScratchWorkspace s;
  const std::string dir = s.dir.string();
  const std::string longest = std::string(244, 'w') + ".db";  // 247 = 255 - 8
  const ProcessResult sim = run_pipetune(with(kSimulate, {"--db", longest}), dir);
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  EXPECT_EQ(files_in(s.dir), std::vector<std::string>{longest});
  const ProcessResult runs = run_pipetune({"runs", "--json", "--db", longest}, dir);
  ASSERT_EQ(runs.exit_code, 0) << runs.err;
  EXPECT_EQ(nlohmann::json::parse(runs.out).size(), 1u);
  const std::string too_long = std::string(245, 'x') + ".db";
  const ProcessResult refused = run_pipetune(with(kSimulate, {"--db", too_long}), dir);
  EXPECT_EQ(refused.exit_code, 2) << refused.err;
  EXPECT_NE(refused.err.find("the file name is 248 bytes; a workspace's may have at most 247"),
            std::string::npos)
      << refused.err;
  EXPECT_EQ(count_lines(refused.err), 1) << refused.err;
  EXPECT_EQ(files_in(s.dir), std::vector<std::string>{longest});
}

}  // namespace
}  // namespace pipetune::testing
