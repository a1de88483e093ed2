// The workspace schema: its version table, the forward migrations, and opening a workspace
// (checks that the file is one, refuses a newer version, migrates an older one).
//
// Tables (version 5):
//   schema_version(version)                       one row
//   runs(id, kind, name, plan_json, specs_json, status, started/ended/last_commit_unix_ns,
//        writer_host, writer_boot_id, writer_pid, writer_start_ticks, summary_json)
//   span_kinds(id, name)                          SpanKind names; span blocks store these ids
//   lanes(id, run, idx, rank, stream, stream_index, name, span_count, max_depth, start_ns, end_ns)
//   names(run, id, text)                          span and counter names, kernel names
//   span_blocks(id, lane, depth, first_ord, span_count, start_ns, end_ns, pred_end_ns,
//               max_duration_ns, max_gap_ns, spans)  up to span_block.hpp's kBlockSpans spans of
//               one lane and depth in time order, compact (span_block.hpp; version 5, 40-byte
//               records before); the index on
//               (lane, depth, end_ns) covers the summary columns, so a window walk reads no blob
//               for blocks it can fold whole
//   lane_block_index(id, lane, depth, block_count, summaries)  (version 4) a finished run's
//               block summaries of one lane and depth in end order, packed (span_block.hpp's
//               BlockIndexEntry): what a window walk reads of span_blocks' index, in one row
//   memory_samples(run, seq, rank, category, t_ns, bytes)
//   counter_blocks(id, run, first_seq, sample_count, samples)  up to counter_block.hpp's
//               kCounterBlockSamples counter samples of one run in append order, packed; the
//               samples of a run are the blocks in first_seq order (version 4; rows before)
//   step_metrics(run, seq, step, t_ns, loss, tokens_per_s)
//   kernels(run, seq, rank, device, stream, correlation, start_ns, end_ns, name, grid_*, block_*,
//           bytes, op, phase, microbatch, chunk)  (the last four: version 3; NULL when unknown)
//   tuner_trials(id, search_id, run_id, plan_json, iteration_s, tokens_per_s, mfu,
//                peak_memory_bytes, feasible, pruned_reason)
// `seq` is the order records were appended in a run, so a run loads back in the same order.
// Enums are stored by name (kind, status, stream, category; span kinds through span_kinds).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "db/store/sqlite_util.hpp"

namespace pipetune::db {

inline constexpr int kSchemaVersion = 5;

// How long a connection waits for another process's write lock before failing.
inline constexpr std::chrono::milliseconds kWorkspaceBusyTimeout{60000};

enum class OpenMode {
  Existing,  // the workspace must exist (InputError when the file is missing)
  Create,    // create a new workspace when the file is missing or an empty database
};

// The tables of schema version kSchemaVersion; opening a workspace missing one is an
// InputError naming it.
std::vector<std::string> workspace_tables();

// Opens a workspace read-write with WAL, synchronous=NORMAL and the busy timeout. Throws
// InputError for a missing file (OpenMode::Existing), a file that is not a database, a database
// that is not a pipetune workspace, a workspace from a newer schema version, and (BadFileError)
// a corrupt one; std::runtime_error for I/O failures.
sqlite::Connection open_workspace_db(const std::string& path, OpenMode mode);

// The version in schema_version; 0 when the database has no schema_version table.
int read_schema_version(sqlite::Connection& db);

// Applies the migrations from the database's version up to `target` (<= kSchemaVersion) in one
// write transaction. A database at version 0 (empty) is created. Exposed for tests that need a
// workspace at an old version.
void migrate(sqlite::Connection& db, int target);

}  // namespace pipetune::db
