// Writes one run into a workspace from a background thread. Producers (simulator, engine ranks,
// importers) call append() from their own threads; it queues the part and returns, never waiting
// on SQLite. The writer thread commits a batch (one transaction, WAL, synchronous=NORMAL) when
// `batch_rows` rows are queued or `batch_interval` has passed since the oldest queued one, so a
// crash loses at most the uncommitted batch and a reader sees the run grow.
//
//   RunWriter w("pipetune.db", {TraceKind::Measured, "gpt-small tp2 pp2"});
//   w.append(part);  // any thread, any number of times
//   w.finish(RunStatus::Complete);
//
// Parts join by lane (rank, stream, index) and by name text; a lane's spans should come in
// start order across parts (trace_inserter.hpp). An error in the writer thread is rethrown by the
// next append/flush/finish (the same exception: InputError for a bad file, std::runtime_error
// for I/O); the run is then marked failed. Destroying a writer without finish() flushes what
// was appended and marks the run failed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "db/store/store_types.hpp"
#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db {

struct WriterOptions {
  std::size_t batch_rows = 100000;                // rows per transaction (at most, roughly)
  std::chrono::milliseconds batch_interval{200};  // longest a queued row waits for a commit
  // Check every page of the workspace (SQLite's quick_check) before creating the run, so a
  // corrupt file fails before a long job rather than after it (InputError about the field "db",
  // naming the damage).
  // Reads the whole file: for runs that take long anyway (training).
  bool check_integrity = false;
};

class RunWriter {
 public:
  // Creates the workspace if missing and the run (status running, this process as its writer),
  // then starts the writer thread. InputError for bad info (a name that run_name.hpp refuses,
  // plan/specs not JSON) or a bad file; nothing is created then.
  RunWriter(const std::string& path, RunInfo info, WriterOptions options = {});
  ~RunWriter();
  RunWriter(const RunWriter&) = delete;
  RunWriter& operator=(const RunWriter&) = delete;

  std::int64_t run_id() const;

  // Lanes, spans, memory samples, counters and step metrics of a part (its kind is ignored:
  // the run's is RunInfo::kind). InputError for a malformed part (an index out of range, a span
  // ending before it starts), checked here on the caller's thread. Thread-safe.
  void append(const profiler::Trace& part);
  void append(profiler::Trace&& part);
  void append_kernels(std::vector<profiler::KernelRecord> kernels);
  // Replaces the run's summary JSON (InputError when not JSON; "" clears it).
  void set_summary_json(std::string json);

  // Waits until everything appended so far is committed.
  void flush();
  // Commits everything, re-packs lanes that came out of order, and writes the final status and
  // end time; stops the thread. status must not be Running. Calls after it throw logic_error.
  void finish(RunStatus status = RunStatus::Complete);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// Checks a part's indices and times; throws InputError naming the first bad record.
void validate_trace_part(const profiler::Trace& part);

// Writes a whole trace as one complete run; returns its id.
std::int64_t store_trace(const std::string& path, RunInfo info, const profiler::Trace& trace,
                         std::vector<profiler::KernelRecord> kernels = {});

}  // namespace pipetune::db
