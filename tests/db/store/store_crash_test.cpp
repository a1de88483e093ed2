// Real processes: a writer killed with SIGKILL mid-run leaves a workspace that opens, holds
// exactly the spans of the batches it committed, and shows the run interrupted (while it was
// alive, the same run read as running); two processes writing one workspace at once both
// succeed and lose nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "db/store/process_identity.hpp"
#include "db/store/run_writer.hpp"
#include "db/store/schema.hpp"
#include "db/store/workspace.hpp"
#include "store_test_support.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::profiler;
using testing::TempDir;

constexpr std::int64_t kPartSpans = 50;

// Part `p` of a child's run: spans p * kPartSpans ... on one lane, span i at [10 i, 10 i + 6).
Trace child_part(std::int64_t p, std::int32_t rank) {
  Trace part;
  part.kind = TraceKind::Measured;
  const auto lane = part.lane(rank, Stream::Compute);
  for (std::int64_t i = p * kPartSpans; i < (p + 1) * kPartSpans; ++i)
    part.spans.push_back(Span{lane, SpanKind::F, 0, -1, -1, 10 * i, 10 * i + 6, 0});
  return part;
}

// Runs in the forked child: never returns into the test framework.
[[noreturn]] void write_forever(const std::string& path) {
  try {
    RunWriter writer(path, {TraceKind::Measured, "killed", "", ""},
                     WriterOptions{500, std::chrono::milliseconds(2)});
    for (std::int64_t p = 0;; ++p) {
      writer.append(child_part(p, 0));
      ::usleep(200);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child writer: %s\n", e.what());
  }
  ::_exit(3);
}

bool is_zombie(pid_t pid) {
  std::int64_t ticks = 0;
  bool zombie = false;
  return read_process_start(pid, ticks, zombie) && zombie;
}

TEST(StoreCrash, KilledWriterLeavesCommittedSpansAndAnInterruptedRun) {
  TempDir dir;
  const std::string path = dir.file("crash.db");
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) write_forever(path);

  // Wait until several batches are committed, checking the live run reads as running.
  std::int64_t seen = 0, run_id = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (seen < 20 * kPartSpans && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    try {
      Workspace ws(path);
      const auto runs = ws.runs();
      if (runs.empty()) continue;
      ASSERT_EQ(runs[0].status, RunStatus::Running) << "a live writer is not interrupted";
      seen = runs[0].span_count;
      run_id = runs[0].id;
    } catch (const InputError&) {
      // The child may not have created the schema yet.
    }
  }
  ::kill(child, SIGKILL);
  ASSERT_GE(seen, 20 * kPartSpans) << "the child committed too little in time";

  // Before it is reaped the child is a zombie: that is a dead writer too.
  const auto reap_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!is_zombie(child) && std::chrono::steady_clock::now() < reap_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  {
    Workspace ws(path);
    EXPECT_EQ(ws.run(run_id).status, RunStatus::Interrupted);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "child status " << status;

  Workspace ws(path);
  ws.check();  // quick_check: the file is whole
  const RunRecord r = ws.run(run_id);
  EXPECT_EQ(r.status, RunStatus::Interrupted);
  EXPECT_GE(r.ended_unix_ns, r.started_unix_ns) << "ended = the last commit";
  const StoredRun back = ws.load(run_id);
  const auto& spans = back.trace.spans;
  EXPECT_GE(static_cast<std::int64_t>(spans.size()), seen) << "a committed span was lost";
  EXPECT_EQ(spans.size() % kPartSpans, 0u) << "a batch commits whole parts";
  for (std::size_t i = 0; i < spans.size(); ++i) {
    // Exactly spans 0 .. n-1: a prefix of what the child appended, without holes.
    ASSERT_EQ(spans[i].start_ns, 10 * static_cast<std::int64_t>(i)) << "span " << i;
    ASSERT_EQ(spans[i].end_ns, 10 * static_cast<std::int64_t>(i) + 6) << "span " << i;
  }
  // The windows agree with the load.
  EXPECT_EQ(ws.spans(run_id, 0, 0, 10 * static_cast<std::int64_t>(spans.size())).size(),
            spans.size());
}

[[noreturn]] void write_run(const std::string& path, std::int32_t rank, std::int64_t parts) {
  int code = 0;
  try {
    RunWriter writer(path, {TraceKind::Measured, "writer " + std::to_string(rank), "", ""},
                     WriterOptions{300, std::chrono::milliseconds(1)});
    for (std::int64_t p = 0; p < parts; ++p) {
      writer.append(child_part(p, rank));
      if (p % 10 == 0) writer.flush();  // many small commits contend for the write lock
    }
    writer.finish(RunStatus::Complete);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer %d: %s\n", rank, e.what());
    code = 1;
  }
  ::_exit(code);
}

TEST(StoreCrash, TwoProcessesWritingOneWorkspaceLoseNothing) {
  TempDir dir;
  const std::string path = dir.file("shared.db");  // neither child finds it: both create it
  constexpr std::int64_t kParts = 400;
  pid_t children[2];
  for (std::int32_t c = 0; c < 2; ++c) {
    children[c] = ::fork();
    ASSERT_GE(children[c], 0);
    if (children[c] == 0) write_run(path, c, kParts);
  }
  for (const pid_t child : children) {
    int status = 0;
    ASSERT_EQ(::waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  }
  Workspace ws(path);
  const auto runs = ws.runs();
  ASSERT_EQ(runs.size(), 2u);
  for (const RunRecord& r : runs) {
    SCOPED_TRACE(r.name);
    EXPECT_EQ(r.status, RunStatus::Complete);
    const StoredRun back = ws.load(r.id);
    ASSERT_EQ(back.trace.spans.size(), static_cast<std::size_t>(kParts * kPartSpans));
    ASSERT_EQ(back.trace.lanes.size(), 1u);
    EXPECT_EQ("writer " + std::to_string(back.trace.lanes[0].rank), r.name);
    for (std::size_t i = 0; i < back.trace.spans.size(); ++i)
      ASSERT_EQ(back.trace.spans[i].start_ns, 10 * static_cast<std::int64_t>(i)) << "span " << i;
  }
}

// A workspace is built as `<path>.creating-<pid>.<start ticks>.<host>` and linked into place
// (db/store/schema.cpp). A creation killed before its link leaves that file and its rollback
// journal; the next creation of the path removes them when their process is gone, and keeps a
// live process's, another host's, and files whose names are not of that form.
TEST(StoreCrash, CreationRemovesWhatKilledCreationsLeft) {
  TempDir dir;
  const std::string path = dir.file("w.db");
  const pid_t gone = ::fork();
  ASSERT_GE(gone, 0);
  if (gone == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  const ProcessIdentity self = current_process();
  ASSERT_FALSE(self.host.empty());
  std::int64_t parent_ticks = -1;
  bool zombie = false;
  ASSERT_TRUE(read_process_start(::getppid(), parent_ticks, zombie));
  const std::string prefix = path + ".creating-";
  const std::string dead = prefix + std::to_string(gone) + ".12345." + self.host;
  const std::vector<std::string> removed = {dead, dead + "-journal",
                                            prefix + std::to_string(gone) + ".x." + self.host};
  const std::vector<std::string> kept = {
      prefix + std::to_string(::getppid()) + "." + std::to_string(parent_ticks) + "." + self.host,
      prefix + std::to_string(gone) + ".12345.another-host.invalid", prefix + "notes.txt",
      prefix + std::to_string(gone) + ".12345", path + ".creating"};
  for (const auto& file : removed) std::ofstream(file) << "left by a killed creation";
  for (const auto& file : kept) std::ofstream(file) << "not ours to remove";

  { auto db = open_workspace_db(path, OpenMode::Create); }

  for (const auto& file : removed) EXPECT_FALSE(std::filesystem::exists(file)) << file;
  for (const auto& file : kept) EXPECT_TRUE(std::filesystem::exists(file)) << file;
  EXPECT_EQ(Workspace(path).runs().size(), 0u);  // a workspace, opened as an existing one
  std::size_t ours = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.file("")))
    ours += entry.path().filename().string().starts_with("w.db.creating-" +
                                                         std::to_string(self.pid) + ".");
  EXPECT_EQ(ours, 0u) << "this creation's own temporary file is still there";
}

}  // namespace
}  // namespace pipetune::db
