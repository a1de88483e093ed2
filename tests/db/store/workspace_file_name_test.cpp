// A workspace path is a file name, whatever SQLite would make of it: never SQLite's temporary
// database (""), its in-memory one (":memory:") or a URI ("file:...", which Debian's SQLite,
// built with SQLITE_USE_URI, reads as one whatever the open flags say). The read-only (immutable)
// open, which needs a URI, builds it from any file name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "db/store/schema.hpp"
#include "db/store/sqlite_util.hpp"
#include "db/store/workspace.hpp"
#include "store_test_support.hpp"

namespace pipetune::db {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Changes the working directory for one test (relative names are the point here).
struct InDirectory {
  fs::path old = fs::current_path();
  explicit InDirectory(const std::string& dir) { fs::current_path(dir); }
  ~InDirectory() { fs::current_path(old); }
};

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(WorkspaceFileName, TheNameSQLiteGetsIsOnlyEverAFileName) {
  EXPECT_EQ(sqlite::literal_file_name("file:uri2.db"), "./file:uri2.db");
  EXPECT_EQ(sqlite::literal_file_name(":memory:"), "./:memory:");
  EXPECT_EQ(sqlite::literal_file_name("/abs/file:x.db"), "/abs/file:x.db");
  EXPECT_THROW(sqlite::literal_file_name(""), InputError);
}

TEST(WorkspaceFileName, AnEmptyPathIsRefused) {
  EXPECT_THROW(open_workspace_db("", OpenMode::Create), InputError);
  EXPECT_THROW(open_workspace_db("", OpenMode::Existing), InputError);
}

TEST(WorkspaceFileName, URIsAndMemoryNamesAreFilesOfThatName) {
  for (const std::string name : {"file:uri2.db", "file:x?mode=memory", ":memory:"}) {
    TempDir dir;
    const std::string folder = fs::path(dir.file("x")).parent_path().string();
    InDirectory here(folder);
    { open_workspace_db(name, OpenMode::Create); }
    EXPECT_EQ(files_in(folder), std::vector<std::string>{name}) << name;
    Workspace ws(name);  // opens the existing file: the schema is there
    EXPECT_TRUE(ws.runs().empty());
  }
}

// As root the immutable open is what a read-only workspace gets; it is called directly here.
TEST(WorkspaceFileName, TheImmutableOpenTakesAnyFileName) {
  TempDir dir;
  for (const std::string name : {"plain.db", "q?x#y%z.db", "file:u.db"}) {
    const std::string path = dir.file(name);
    { open_workspace_db(path, OpenMode::Create); }
    // An absolute path starting "//" is the same file; in a URI it must not read as a host.
    for (const std::string& spelling : {path, "/" + path}) {
      sqlite::Connection db = sqlite::Connection::open_immutable(spelling);
      EXPECT_EQ(db.query_int64("SELECT count(*) FROM schema_version"), 1) << spelling;
    }
  }
}

}  // namespace
}  // namespace pipetune::db
