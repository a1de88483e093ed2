// I/O errors while a run is written: a SQLite VFS in front of the default one
// fails writes with SQLITE_IOERR_WRITE — either every write from the N-th on (a device that
// died) or only the N-th (a transient error) — for N = 1, 2, 3... until a run gets through
// untouched. After each: the error surfaced as an exception with a message (never a crash or a
// hang), the workspace opens, and every step that a flush() returned for is stored intact.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "db/store/run_writer.hpp"
#include "db/store/workspace.hpp"
#include "tests/db/store/store_test_support.hpp"

namespace pipetune::db {
namespace {

using testing::TempDir;

// Failure plan, shared by the VFS and the files it opens (through pAppData).
struct FailurePlan {
  long fail_at = 0;  // 1-based write number; 0: never
  bool only_once = false;
  long writes = 0;
  long failed = 0;
  sqlite3_vfs* real = nullptr;
};

struct ShimFile {
  sqlite3_file base;  // first: SQLite sees a sqlite3_file
  FailurePlan* plan;
  sqlite3_file* real;  // the default VFS's file, allocated right after this struct
};

sqlite3_file* real_of(sqlite3_file* f) {
  return reinterpret_cast<ShimFile*>(f)->real;
}

int shim_write(sqlite3_file* f, const void* data, int amount, sqlite3_int64 offset) {
  FailurePlan& plan = *reinterpret_cast<ShimFile*>(f)->plan;
  const long n = ++plan.writes;
  if (plan.fail_at > 0 && (plan.only_once ? n == plan.fail_at : n >= plan.fail_at)) {
    ++plan.failed;
    return SQLITE_IOERR_WRITE;
  }
  return real_of(f)->pMethods->xWrite(real_of(f), data, amount, offset);
}

// Every other method forwards to the real file.
int shim_close(sqlite3_file* f) {
  return real_of(f)->pMethods->xClose(real_of(f));
}
int shim_read(sqlite3_file* f, void* d, int n, sqlite3_int64 o) {
  return real_of(f)->pMethods->xRead(real_of(f), d, n, o);
}
int shim_truncate(sqlite3_file* f, sqlite3_int64 s) {
  return real_of(f)->pMethods->xTruncate(real_of(f), s);
}
int shim_sync(sqlite3_file* f, int flags) {
  return real_of(f)->pMethods->xSync(real_of(f), flags);
}
int shim_size(sqlite3_file* f, sqlite3_int64* s) {
  return real_of(f)->pMethods->xFileSize(real_of(f), s);
}
int shim_lock(sqlite3_file* f, int l) {
  return real_of(f)->pMethods->xLock(real_of(f), l);
}
int shim_unlock(sqlite3_file* f, int l) {
  return real_of(f)->pMethods->xUnlock(real_of(f), l);
}
int shim_reserved(sqlite3_file* f, int* r) {
  return real_of(f)->pMethods->xCheckReservedLock(real_of(f), r);
}
int shim_control(sqlite3_file* f, int op, void* arg) {
  return real_of(f)->pMethods->xFileControl(real_of(f), op, arg);
}
int shim_sector(sqlite3_file* f) {
  return real_of(f)->pMethods->xSectorSize(real_of(f));
}
int shim_characteristics(sqlite3_file* f) {
  return real_of(f)->pMethods->xDeviceCharacteristics(real_of(f));
}
int shim_shm_map(sqlite3_file* f, int region, int size, int extend, void volatile** p) {
  return real_of(f)->pMethods->xShmMap(real_of(f), region, size, extend, p);
}
int shim_shm_lock(sqlite3_file* f, int offset, int n, int flags) {
  return real_of(f)->pMethods->xShmLock(real_of(f), offset, n, flags);
}
void shim_shm_barrier(sqlite3_file* f) {
  real_of(f)->pMethods->xShmBarrier(real_of(f));
}
int shim_shm_unmap(sqlite3_file* f, int del) {
  return real_of(f)->pMethods->xShmUnmap(real_of(f), del);
}

const sqlite3_io_methods kShimMethods = {2,
                                         shim_close,
                                         shim_read,
                                         shim_write,
                                         shim_truncate,
                                         shim_sync,
                                         shim_size,
                                         shim_lock,
                                         shim_unlock,
                                         shim_reserved,
                                         shim_control,
                                         shim_sector,
                                         shim_characteristics,
                                         shim_shm_map,
                                         shim_shm_lock,
                                         shim_shm_barrier,
                                         shim_shm_unmap,
                                         nullptr,
                                         nullptr};

int shim_open(sqlite3_vfs* vfs, const char* name, sqlite3_file* f, int flags, int* out_flags) {
  auto* plan = static_cast<FailurePlan*>(vfs->pAppData);
  auto* shim = reinterpret_cast<ShimFile*>(f);
  shim->plan = plan;
  shim->real = reinterpret_cast<sqlite3_file*>(shim + 1);
  const int rc = plan->real->xOpen(plan->real, name, shim->real, flags, out_flags);
  // SQLite calls xClose even when xOpen fails, once pMethods is set: only set it on success.
  shim->base.pMethods = rc == SQLITE_OK ? &kShimMethods : nullptr;
  return rc;
}

// Registered as the default VFS for its lifetime, so the store's own connections use it.
class FailingWrites {
 public:
  FailingWrites() {
    plan_.real = sqlite3_vfs_find(nullptr);
    vfs_ = *plan_.real;
    vfs_.szOsFile = static_cast<int>(sizeof(ShimFile)) + plan_.real->szOsFile;
    vfs_.zName = "pipetune-failing-writes";
    vfs_.pAppData = &plan_;
    vfs_.xOpen = shim_open;
    vfs_.pNext = nullptr;
    sqlite3_vfs_register(&vfs_, 1);
  }
  ~FailingWrites() {
    sqlite3_vfs_unregister(&vfs_);
    sqlite3_vfs_register(plan_.real, 1);
  }
  FailingWrites(const FailingWrites&) = delete;
  FailingWrites& operator=(const FailingWrites&) = delete;
  FailurePlan& plan() { return plan_; }

 private:
  FailurePlan plan_;
  sqlite3_vfs vfs_{};
};

// Step `step` of a run: one lane's span and the step's metric.
profiler::Trace step_part(int step) {
  profiler::Trace t;
  const auto lane = t.lane(0, profiler::Stream::Compute, 0);
  t.spans.push_back(
      profiler::Span{lane, profiler::SpanKind::F, -1, step, -1, step * 1000, step * 1000 + 500, 0});
  t.steps.push_back(profiler::StepMetric{step, step * 1000 + 600, 5.0 / step, 100.0});
  return t;
}

struct Outcome {
  bool failed = false;  // an exception reached the caller
  std::string error;
  int flushed = 0;  // steps a flush() returned for
};

Outcome write_run(const std::string& path) {
  Outcome o;
  try {
    RunWriter w(path, {profiler::TraceKind::Measured, "io", "{}", "{}"});
    for (int step = 1; step <= 6; ++step) {
      w.append(step_part(step));
      w.flush();
      o.flushed = step;
    }
    w.finish(RunStatus::Complete);
  } catch (const std::exception& e) {
    o.failed = true;
    o.error = e.what();
  }
  return o;
}

void sweep(bool only_once) {
  int runs_failed = 0;
  long points = 0;
  for (long fail_at = 1; fail_at < 400; ++fail_at, ++points) {
    SCOPED_TRACE("write " + std::to_string(fail_at) + (only_once ? " fails" : " and later fail"));
    TempDir dir;
    const std::string path = dir.file("w.db");
    Outcome o;
    long failures = 0;
    {
      FailingWrites shim;
      shim.plan().fail_at = fail_at;
      shim.plan().only_once = only_once;
      o = write_run(path);
      failures = shim.plan().failed;
    }
    if (failures == 0) {  // the run needed fewer writes: the sweep is complete
      EXPECT_FALSE(o.failed) << o.error;
      break;
    }
    if (o.failed) {
      ++runs_failed;
      EXPECT_FALSE(o.error.empty());
      EXPECT_EQ(o.error.find('\n'), std::string::npos) << o.error;
    }
    // The workspace opens (when the failure came before it existed, there is nothing to open:
    // the first write creates it) and holds every flushed step.
    if (o.flushed == 0 && o.failed) continue;
    Workspace ws(path);
    const auto runs = ws.runs();
    ASSERT_EQ(runs.size(), 1u);
    if (o.failed) {
      EXPECT_NE(runs[0].status, RunStatus::Complete);
    }
    const auto steps = ws.steps(runs[0].id);
    ASSERT_GE(static_cast<int>(steps.size()), o.flushed);
    for (int s = 0; s < o.flushed; ++s) {
      EXPECT_EQ(steps[static_cast<std::size_t>(s)].step, s + 1);
      EXPECT_DOUBLE_EQ(steps[static_cast<std::size_t>(s)].loss, 5.0 / (s + 1));
    }
    const StoredRun run = ws.load(runs[0].id);
    EXPECT_GE(static_cast<int>(run.trace.spans.size()), o.flushed);
  }
  EXPECT_GT(runs_failed, 0) << "no injected failure reached the writer";
  std::printf("%s: %d of %ld failure points ended the run with an error, workspace intact\n",
              only_once ? "one failed write" : "writes failing from one on", runs_failed, points);
}

TEST(StorageIoErrors, ADeviceThatStopsWritingAtAnyPoint) {
  sweep(false);
}

TEST(StorageIoErrors, OneFailedWriteAtAnyPoint) {
  sweep(true);
}

}  // namespace
}  // namespace pipetune::db
