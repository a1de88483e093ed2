// Bad files and bad requests give one-line InputErrors naming the file, never a crash: a missing
// file, a directory, a text file, an empty file, someone else's SQLite database (left as it
// was), a newer workspace, damaged pages, a truncated file, an unknown run.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "db/store/run_writer.hpp"
#include "db/store/schema.hpp"
#include "db/store/workspace.hpp"
#include "store_test_support.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::profiler;
using testing::TempDir;

// The InputError message of opening `path`, or "no error".
std::string open_error(const std::string& path, OpenMode mode = OpenMode::Existing) {
  try {
    Workspace ws(path, mode);
  } catch (const InputError& e) {
    return e.what();
  }
  return "no error";
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out << bytes;
}

// A finished run of `n` spans spread over four lanes.
std::int64_t store_spans(const std::string& path, int n) {
  Trace t;
  for (int r = 0; r < 4; ++r) t.lane(r, Stream::Compute);
  for (int i = 0; i < n; ++i)
    t.spans.push_back(Span{i % 4, SpanKind::B, 0, i, -1, 100 * i, 100 * i + 50, 0});
  return store_trace(path, {TraceKind::Simulated, "spans", "", ""}, t);
}

TEST(StoreBadInput, MissingFileOrDirectory) {
  TempDir dir;
  EXPECT_EQ(open_error(dir.file("none.db")),
            dir.file("none.db") + ": no such workspace (file not found)");
  std::filesystem::create_directory(dir.file("d.db"));
  EXPECT_EQ(open_error(dir.file("d.db"), OpenMode::Create),
            dir.file("d.db") + ": not a pipetune workspace (a directory)");
  // Create mode makes a new workspace.
  Workspace ws(dir.file("new.db"), OpenMode::Create);
  EXPECT_EQ(ws.schema_version(), kSchemaVersion);
  EXPECT_TRUE(ws.runs().empty());
}

TEST(StoreBadInput, TextFileIsNotAWorkspace) {
  TempDir dir;
  const std::string path = dir.file("pipetune.db");
  std::string text = "step,loss\n";
  for (int i = 0; i < 200; ++i) text += std::to_string(i) + ",2.5\n";
  write_file(path, text);
  EXPECT_EQ(open_error(path), path + ": not a pipetune workspace (file is not a database)");
  EXPECT_EQ(open_error(path, OpenMode::Create),
            path + ": not a pipetune workspace (file is not a database)");
  // A writer refuses it the same way and leaves it alone.
  EXPECT_THROW(RunWriter(path, {TraceKind::Simulated, "x", "", ""}), InputError);
  std::ifstream in(path, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), text);
}

TEST(StoreBadInput, EmptyFileOpensOnlyWhenCreating) {
  TempDir dir;
  const std::string path = dir.file("empty.db");
  write_file(path, "");
  EXPECT_EQ(open_error(path), path + ": not a pipetune workspace (empty database)");
  Workspace ws(path, OpenMode::Create);
  EXPECT_EQ(ws.schema_version(), kSchemaVersion);
}

TEST(StoreBadInput, ForeignSqliteDatabaseIsLeftAlone) {
  TempDir dir;
  const std::string path = dir.file("other.sqlite");
  {
    sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    raw.exec("CREATE TABLE StringIds(id INTEGER PRIMARY KEY, value TEXT)");
  }
  EXPECT_EQ(open_error(path, OpenMode::Create),
            path + ": not a pipetune workspace (no schema_version table)");
  sqlite::Connection raw(path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_text("PRAGMA journal_mode"), "delete") << "its journal mode was changed";
  EXPECT_EQ(raw.query_int64("SELECT count(*) FROM sqlite_master"), 1);
}

TEST(StoreBadInput, NewerSchemaIsRefused) {
  TempDir dir;
  const std::string path = dir.file("future.db");
  { Workspace ws(path, OpenMode::Create); }
  {
    sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.exec("UPDATE schema_version SET version = " + std::to_string(kSchemaVersion + 1));
  }
  const std::string want = path + ": workspace schema version " +
                           std::to_string(kSchemaVersion + 1) +
                           " is newer than this pipetune supports (" +
                           std::to_string(kSchemaVersion) + "); upgrade pipetune";
  EXPECT_EQ(open_error(path), want);
  try {
    RunWriter w(path, {TraceKind::Simulated, "x", "", ""});
    ADD_FAILURE() << "a writer must refuse a newer workspace";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), want);
  }
}

// Runs `fn` on a workspace whose file was damaged; it must throw InputError (one line).
template <class Fn>
void expect_input_error(const std::string& what, Fn fn) {
  try {
    fn();
    ADD_FAILURE() << what << ": no error";
  } catch (const InputError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_NE(message.find("corrupt"), std::string::npos) << what << ": " << message;
  }
}

TEST(StoreBadInput, DamagedPagesAreReportedNotCrashedOn) {
  TempDir dir;
  const std::string path = dir.file("damaged.db");
  const std::int64_t run = store_spans(path, 60000);
  ASSERT_FALSE(std::filesystem::exists(path + "-wal")) << "the writer checkpointed on close";
  const auto size = std::filesystem::file_size(path);
  ASSERT_GT(size, 1u << 18);  // 450 KB: about 110 pages of blocks and indexes
  {
    // Garbage over the middle half of the file: b-tree pages of blocks and indexes.
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 4));
    std::mt19937_64 rng(99);
    for (std::uintmax_t i = 0; i < size / 2; ++i) f.put(static_cast<char>(rng() & 0xff));
  }
  // The schema pages survive, so opening works; reading the damage is an InputError.
  Workspace ws(path);
  expect_input_error("quick_check", [&] { ws.check(); });
  expect_input_error("load", [&] { ws.load(run); });
  expect_input_error("window", [&] {
    for (int lane = 0; lane < 4; ++lane) ws.window(run, lane, 0, 100 * 60000, 1000);
    for (int lane = 0; lane < 4; ++lane) ws.spans(run, lane, 0, 100 * 60000);
  });
}

TEST(StoreBadInput, TruncatedFileIsReportedNotCrashedOn) {
  TempDir dir;
  const std::string path = dir.file("cut.db");
  const std::int64_t run = store_spans(path, 60000);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) / 2);
  expect_input_error("truncated", [&] {
    Workspace ws(path);
    ws.load(run);
  });
}

TEST(StoreBadInput, DamagedHeaderIsNotADatabase) {
  TempDir dir;
  const std::string path = dir.file("header.db");
  store_spans(path, 10);
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.write("this is no header", 17);
  }
  EXPECT_EQ(open_error(path), path + ": not a pipetune workspace (file is not a database)");
}

TEST(StoreBadInput, UnknownRunListsTheKnownOnes) {
  TempDir dir;
  const std::string path = dir.file("runs.db");
  {
    Workspace ws(path, OpenMode::Create);
    try {
      ws.find_run("anything");
      ADD_FAILURE();
    } catch (const InputError& e) {
      EXPECT_EQ(std::string(e.what()), path + ": no run 'anything' (the workspace has no runs)");
    }
  }
  const std::int64_t a = store_spans(path, 3);
  Trace t;
  const std::int64_t b = store_trace(path, {TraceKind::Measured, "train gpt", "", ""}, t);
  const std::int64_t c = store_trace(path, {TraceKind::Measured, "train gpt", "", ""}, t);
  Workspace ws(path);
  EXPECT_EQ(ws.find_run("train gpt").id, c) << "a name finds its latest run";
  EXPECT_EQ(ws.find_run(std::to_string(b)).id, b);
  EXPECT_EQ(ws.find_run("spans").id, a);
  const std::string known = "; known runs: " + std::to_string(a) +
                            " 'spans' (simulated, complete), " + std::to_string(b) +
                            " 'train gpt' (measured, complete), " + std::to_string(c) +
                            " 'train gpt' (measured, complete)";
  try {
    ws.find_run("trian gpt");
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": no run 'trian gpt'" + known);
  }
  try {
    ws.run(99);
    ADD_FAILURE();
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()), path + ": no run with id 99" + known);
  }
  EXPECT_THROW(ws.load(99), InputError);
  EXPECT_THROW(ws.lanes(99), InputError);
  EXPECT_THROW(ws.window(99, 0, 0, 1, 1), InputError);
}

}  // namespace
}  // namespace pipetune::db
