#include "db/store/schema.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <iterator>
#include <limits>
#include <stdexcept>
#include <string_view>
#include <utility>
#include <vector>

#include "db/output_file.hpp"
#include "db/store/counter_block.hpp"
#include "db/store/process_identity.hpp"
#include "db/store/span_block.hpp"
#include "engine/errors.hpp"
#include "profiler/trace.hpp"

namespace pipetune::db {

namespace {

// Version 1: runs, lanes, names and the trace tables.
constexpr std::string_view kVersion1 = R"sql(
CREATE TABLE schema_version(version INTEGER NOT NULL);
INSERT INTO schema_version(version) VALUES (0);
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  name TEXT NOT NULL,
  plan_json TEXT,
  specs_json TEXT,
  status TEXT NOT NULL,
  started_unix_ns INTEGER NOT NULL,
  ended_unix_ns INTEGER,
  last_commit_unix_ns INTEGER,
  writer_host TEXT,
  writer_boot_id TEXT,
  writer_pid INTEGER,
  writer_start_ticks INTEGER
);
CREATE INDEX runs_by_name ON runs(name);
CREATE INDEX runs_by_status ON runs(status);
CREATE TABLE span_kinds(id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE);
CREATE TABLE lanes(
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL REFERENCES runs(id),
  idx INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  stream TEXT NOT NULL,
  stream_index INTEGER NOT NULL,
  name TEXT NOT NULL,
  span_count INTEGER NOT NULL DEFAULT 0,
  max_depth INTEGER NOT NULL DEFAULT -1,
  start_ns INTEGER NOT NULL DEFAULT 0,
  end_ns INTEGER NOT NULL DEFAULT 0,
  UNIQUE(run, idx),
  UNIQUE(run, rank, stream, stream_index)
);
CREATE TABLE names(
  run INTEGER NOT NULL,
  id INTEGER NOT NULL,
  text TEXT NOT NULL,
  PRIMARY KEY(run, id)
) WITHOUT ROWID;
CREATE TABLE span_blocks(
  id INTEGER PRIMARY KEY,
  lane INTEGER NOT NULL REFERENCES lanes(id),
  depth INTEGER NOT NULL,
  first_ord INTEGER NOT NULL,
  span_count INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  pred_end_ns INTEGER,
  max_duration_ns INTEGER NOT NULL,
  max_gap_ns INTEGER NOT NULL,
  spans BLOB NOT NULL
);
CREATE INDEX span_blocks_by_end ON span_blocks(
  lane, depth, end_ns, first_ord, span_count, start_ns, pred_end_ns, max_duration_ns, max_gap_ns);
CREATE TABLE memory_samples(
  run INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  category TEXT NOT NULL,
  t_ns INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  PRIMARY KEY(run, rank, t_ns, seq)
) WITHOUT ROWID;
CREATE TABLE counters(
  run INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  name INTEGER NOT NULL,
  t_ns INTEGER NOT NULL,
  value REAL,
  PRIMARY KEY(run, seq)
) WITHOUT ROWID;
CREATE TABLE step_metrics(
  run INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  step INTEGER NOT NULL,
  t_ns INTEGER NOT NULL,
  loss REAL,
  tokens_per_s REAL,
  PRIMARY KEY(run, seq)
) WITHOUT ROWID;
CREATE TABLE kernels(
  run INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  device INTEGER NOT NULL,
  stream INTEGER NOT NULL,
  correlation INTEGER NOT NULL,
  start_ns INTEGER NOT NULL,
  end_ns INTEGER NOT NULL,
  name INTEGER NOT NULL,
  grid_x INTEGER NOT NULL, grid_y INTEGER NOT NULL, grid_z INTEGER NOT NULL,
  block_x INTEGER NOT NULL, block_y INTEGER NOT NULL, block_z INTEGER NOT NULL,
  bytes INTEGER NOT NULL,
  PRIMARY KEY(run, seq)
) WITHOUT ROWID;
CREATE INDEX kernels_by_span ON kernels(run, rank, stream, start_ns);
)sql";

// Version 2: a per-run summary for front ends, and the tuner's trials.
constexpr std::string_view kVersion2 = R"sql(
ALTER TABLE runs ADD COLUMN summary_json TEXT;
CREATE TABLE tuner_trials(
  id INTEGER PRIMARY KEY,
  search_id INTEGER NOT NULL,
  run_id INTEGER REFERENCES runs(id),
  plan_json TEXT NOT NULL,
  iteration_s REAL,
  tokens_per_s REAL,
  mfu REAL,
  peak_memory_bytes INTEGER,
  feasible INTEGER NOT NULL,
  pruned_reason TEXT
);
CREATE INDEX tuner_trials_by_search ON tuner_trials(search_id);
)sql";

// Version 3: each GPU activity's op (the name id of the host range it was launched from) and
// pipeline phase (a span kind name, with its micro-batch and chunk), NULL when unknown (kernel
// attribution, db/import/kernel_attribution.hpp).
constexpr std::string_view kVersion3 = R"sql(
ALTER TABLE kernels ADD COLUMN op INTEGER;
ALTER TABLE kernels ADD COLUMN phase TEXT;
ALTER TABLE kernels ADD COLUMN microbatch INTEGER;
ALTER TABLE kernels ADD COLUMN chunk INTEGER;
)sql";

void create_version_1(sqlite::Connection& db) {
  db.exec(kVersion1);
  // Ids in enum order for a fresh workspace; a later binary appends kinds it adds.
  sqlite::Statement insert = db.prepare("INSERT INTO span_kinds(id, name) VALUES (?1, ?2)");
  for (int k = 0; k < profiler::kSpanKindCount; ++k) {
    insert.bind(1, k).bind(2, profiler::span_kind_name(static_cast<profiler::SpanKind>(k)));
    insert.run();
  }
}

void create_version_2(sqlite::Connection& db) {
  db.exec(kVersion2);
}

void create_version_3(sqlite::Connection& db) {
  db.exec(kVersion3);
}

// Version 4: counter samples in blocks (counter_block.hpp) instead of a row each. The rows of
// an older workspace are packed in their order, run by run, and their table dropped. And the
// block summaries of each lane and depth of a finished run in one row (span_block.hpp's
// BlockIndexEntry), so that a reader takes them at once instead of walking the index.
constexpr std::string_view kVersion4 = R"sql(
CREATE TABLE counter_blocks(
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL,
  first_seq INTEGER NOT NULL,
  sample_count INTEGER NOT NULL,
  samples BLOB NOT NULL
);
CREATE UNIQUE INDEX counter_blocks_by_run ON counter_blocks(run, first_seq);
CREATE TABLE lane_block_index(
  id INTEGER PRIMARY KEY,
  lane INTEGER NOT NULL REFERENCES lanes(id),
  depth INTEGER NOT NULL,
  block_count INTEGER NOT NULL,
  summaries BLOB NOT NULL
);
CREATE UNIQUE INDEX lane_block_index_by_lane ON lane_block_index(lane, depth);
)sql";

void create_version_4(sqlite::Connection& db) {
  db.exec(kVersion4);
  sqlite::Statement read =
      db.prepare("SELECT run, rank, name, t_ns, value FROM counters ORDER BY run, seq");
  sqlite::Statement insert = db.prepare(
      "INSERT INTO counter_blocks(run, first_seq, sample_count, samples) VALUES (?1, ?2, ?3, "
      "?4)");
  std::vector<PackedCounter> block;
  std::int64_t run = -1;
  std::int64_t first_seq = 0;  // the run's samples before the block: seq renumbered 0..n-1
  const auto write = [&] {
    if (block.empty()) return;
    insert.bind(1, run)
        .bind(2, first_seq)
        .bind(3, static_cast<std::int64_t>(block.size()))
        .bind_static_blob(4, block.data(), block.size() * sizeof(PackedCounter))
        .run();
    first_seq += static_cast<std::int64_t>(block.size());
    block.clear();
  };
  while (read.step()) {
    const std::int64_t row_run = read.column_int64(0);
    if (row_run != run || block.size() == kCounterBlockSamples) write();
    if (row_run != run) {
      run = row_run;
      first_seq = 0;
    }
    PackedCounter p{};
    p.t_ns = read.column_int64(3);
    p.value =
        read.column_is_null(4) ? std::numeric_limits<double>::quiet_NaN() : read.column_double(4);
    p.rank = static_cast<std::int32_t>(read.column_int64(1));
    p.name = static_cast<std::uint32_t>(read.column_int64(2));
    block.push_back(p);
  }
  write();
  db.exec("DROP TABLE counters");
}

// Version 5: span and counter blocks compact (span_block.hpp's and counter_block.hpp's formats)
// instead of fixed-size records; each block of an older workspace is decoded and encoded again.
//
// Every row of `select` (its id first; the rows after id ?1 in id order, a batch at a time) gets
// the BLOB `encode(row, blob)` makes, through `update` (?1 the id, ?2 the BLOB). A batch is read
// whole before it is written, so no statement reads a table being updated. A damaged table can
// give its rows out of id order (a seek past an id then finds it again): ids that do not rise
// are refused, so every batch starts past the last and the loop ends.
template <class Encode>
void encode_blobs_again(sqlite::Connection& db, std::string_view table, const std::string& select,
                        const std::string& update, Encode encode) {
  sqlite::Statement read = db.prepare(select);
  sqlite::Statement write = db.prepare(update);
  std::vector<std::pair<std::int64_t, std::vector<std::uint8_t>>> batch;
  std::int64_t after = std::numeric_limits<std::int64_t>::min();
  for (;;) {
    batch.clear();
    read.bind(1, after);
    while (read.step()) {
      const std::int64_t id = read.column_int64(0);
      if (id <= (batch.empty() ? after : batch.back().first))
        throw sqlite::BadFileError(db.path() + ": workspace is damaged (the rows of " +
                                       std::string(table) + " are not in id order at id " +
                                       std::to_string(id) + ")",
                                   SQLITE_CORRUPT);
      auto& row = batch.emplace_back();
      row.first = id;
      encode(read, row.second);
    }
    read.reset();
    if (batch.empty()) break;
    for (const auto& row : batch)
      write.bind(1, row.first).bind_static_blob(2, row.second.data(), row.second.size()).run();
    after = batch.back().first;
  }
}

void create_version_5(sqlite::Connection& db) {
  std::vector<PackedCounter> samples;
  encode_blobs_again(
      db, "counter_blocks",
      "SELECT id, run, first_seq, sample_count, samples FROM counter_blocks WHERE id > ?1 ORDER "
      "BY id LIMIT 256",
      "UPDATE counter_blocks SET samples = ?2 WHERE id = ?1",
      [&](sqlite::Statement& row, std::vector<std::uint8_t>& blob) {
        decode_version4_counter_block(row.column_blob(4), row.column_bytes(4), row.column_int64(3),
                                      row.column_int64(1), row.column_int64(2), db.path(), samples);
        encode_counter_block(samples.data(), samples.size(), blob);
      });
  std::vector<PackedSpan> spans;
  encode_blobs_again(
      db, "span_blocks",
      "SELECT id, span_count, spans FROM span_blocks WHERE id > ?1 ORDER BY id LIMIT 4096",
      "UPDATE span_blocks SET spans = ?2 WHERE id = ?1",
      [&](sqlite::Statement& row, std::vector<std::uint8_t>& blob) {
        decode_version4_block(row.column_blob(2), row.column_bytes(2), row.column_int64(1),
                              row.column_int64(0), db.path(), spans);
        encode_block(spans.data(), spans.size(), blob);
      });
}

struct Migration {
  int to_version;
  void (*apply)(sqlite::Connection& db);
};

constexpr Migration kMigrations[] = {{1, create_version_1},
                                     {2, create_version_2},
                                     {3, create_version_3},
                                     {4, create_version_4},
                                     {5, create_version_5}};
static_assert(std::size(kMigrations) == kSchemaVersion);

// Table count and whether schema_version exists; NOTADB surfaces here for a foreign file.
struct Contents {
  std::int64_t tables = 0;
  bool has_version = false;
};

Contents read_contents(sqlite::Connection& db) {
  return sqlite::retry_busy(db, [&] {
    Contents c;
    c.tables = db.query_int64("SELECT count(*) FROM sqlite_master WHERE type = 'table'");
    c.has_version = db.query_int64(
                        "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                        "name = 'schema_version'") > 0;
    return c;
  });
}

// The tables of the current schema (the header's list). A workspace missing one was damaged
// by hand or by a tool: refused at open, not with a raw SQL error halfway through a command.
// Tested against what the migrations create (store tests), so the list cannot drift.
constexpr const char* kTables[] = {"schema_version", "runs",           "span_kinds",
                                   "lanes",          "names",          "span_blocks",
                                   "memory_samples", "counter_blocks", "step_metrics",
                                   "kernels",        "tuner_trials",   "lane_block_index"};

std::vector<std::string> table_columns(sqlite::Connection& db, const char* table) {
  sqlite::Statement s = db.prepare(std::string("PRAGMA table_info(") + table + ")");
  std::vector<std::string> names;
  while (s.step()) names.push_back(s.column_text(1));
  return names;
}

// Each table's columns as the migrations create them, read once from an in-memory workspace.
const std::vector<std::vector<std::string>>& expected_columns() {
  static const std::vector<std::vector<std::string>> columns = [] {
    sqlite::Connection mem(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    migrate(mem, kSchemaVersion);  // schema.hpp
    std::vector<std::vector<std::string>> c;
    for (const char* table : kTables) c.push_back(table_columns(mem, table));
    return c;
  }();
  return columns;
}

void check_tables(sqlite::Connection& db, const std::string& path) {
  sqlite::Statement s =
      db.prepare("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?1");
  for (std::size_t t = 0; t < std::size(kTables); ++t) {
    const char* table = kTables[t];
    s.bind(1, std::string(table));
    const bool present = s.step() && s.column_int64(0) > 0;
    s.reset();
    if (!present)
      throw InputError(path + ": workspace is damaged: its table '" + table +
                       "' is missing (a pipetune workspace of schema version " +
                       std::to_string(kSchemaVersion) + " has " +
                       std::to_string(std::size(kTables)) + " tables)");
    // A column dropped or renamed by hand or by damage: named here, not as raw SQL later.
    const std::vector<std::string> have = table_columns(db, table);
    for (const std::string& column : expected_columns()[t])
      if (std::find(have.begin(), have.end(), column) == have.end())
        throw InputError(path + ": workspace is damaged: its table '" + table +
                         "' has no column '" + column + "'");
  }
}

void check_version(const std::string& path, int version) {
  if (version > kSchemaVersion)
    throw InputError(path + ": workspace schema version " + std::to_string(version) +
                     " is newer than this pipetune supports (" + std::to_string(kSchemaVersion) +
                     "); upgrade pipetune");
  if (version < 1)
    throw InputError(path + ": not a pipetune workspace (schema_version holds " +
                     std::to_string(version) + ")");
}

}  // namespace

int read_schema_version(sqlite::Connection& db) {
  const bool has = db.query_int64(
                       "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND "
                       "name = 'schema_version'") > 0;
  if (!has) return 0;
  return static_cast<int>(db.query_int64("SELECT max(version) FROM schema_version", 0));
}

void migrate(sqlite::Connection& db, int target) {
  if (target > kSchemaVersion)
    throw std::invalid_argument("migrate: no schema version " + std::to_string(target));
  sqlite::Transaction tx(db);
  const int from = read_schema_version(db);
  if (from > target) return;  // another process migrated further meanwhile
  for (const Migration& m : kMigrations) {
    if (m.to_version <= from || m.to_version > target) continue;
    m.apply(db);
    sqlite::Statement set = db.prepare("UPDATE schema_version SET version = ?1");
    set.bind(1, m.to_version).run();
  }
  tx.commit();
}

namespace {

// SQLite's codes for a file whose content it cannot use (rather than I/O, a full disk or a lock).
bool damaged_file_code(int code) {
  switch (code & 0xff) {
    case SQLITE_ERROR:
    case SQLITE_NOMEM:
    case SQLITE_SCHEMA:
    case SQLITE_TOOBIG:
    case SQLITE_MISMATCH:
    case SQLITE_FORMAT:
    case SQLITE_RANGE:
    case SQLITE_READONLY:  // the file's header forbids writing; permissions were checked first
    // Opening writes only what the file holds (a migration repacking its rows): a constraint
    // those rows break is the file's damage.
    case SQLITE_CONSTRAINT:
      return true;
    default:
      return false;
  }
}

// Whether this process may write the workspace file and create its WAL files beside it.
bool writable_here(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return ::access(path.c_str(), W_OK) == 0 && ::access(dir.empty() ? "." : dir.c_str(), W_OK) == 0;
}

// The longest file name the folder of `path` takes (255 where it cannot say).
std::size_t name_max(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const long n = ::pathconf(dir.empty() ? "." : dir.c_str(), _PC_NAME_MAX);
  return n > 0 ? static_cast<std::size_t>(n) : 255;
}

// SQLite keeps `<name>-journal` (or -wal and -shm) beside a database.
constexpr std::size_t kSqliteSuffix = std::string_view("-journal").size();

// The temporary files' prefix for `path`: its file name, cut so that the longest suffix
// (".creating-", a pid, start ticks, a 64-byte host name and "-journal": under 112 bytes) fits
// the folder's name limit. The same for every creation of `path`, so each finds the others'.
std::string creating_prefix(const std::string& path) {
  constexpr std::size_t kLongestSuffix = 112;
  const std::filesystem::path p(path);
  std::string name = p.filename().string();
  const std::size_t limit = name_max(path);
  const std::size_t room = limit > kLongestSuffix ? limit - kLongestSuffix : 1;
  if (name.size() > room) name.resize(room);
  return name + ".creating-";
}

// The temporary name a workspace is built under: `<prefix><pid>.<start ticks>.<host>` (ticks "x"
// when unknown), so that a later creation can tell a file left by a process killed while
// creating from one that a live process is still building.
std::string creating_name(const std::string& path, const ProcessIdentity& self) {
  const std::string ticks = self.start_ticks >= 0 ? std::to_string(self.start_ticks) : "x";
  const std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return (dir / (creating_prefix(path) + std::to_string(self.pid) + "." + ticks + "." +
                 self.host.substr(0, 64)))
      .string();
}

// The process that named a temporary file `<pid>.<ticks>.<host>[-journal]`; false when the name
// is not of that form.
bool parse_creator(std::string rest, ProcessIdentity& creator) {
  constexpr std::string_view kJournal = "-journal";
  if (rest.size() > kJournal.size() && rest.ends_with(kJournal))
    rest.resize(rest.size() - kJournal.size());
  const auto dot1 = rest.find('.');
  const auto dot2 = dot1 == std::string::npos ? dot1 : rest.find('.', dot1 + 1);
  if (dot2 == std::string::npos) return false;
  const std::string pid = rest.substr(0, dot1), ticks = rest.substr(dot1 + 1, dot2 - dot1 - 1);
  const auto digits = [](const std::string& t) {
    return !t.empty() && t.size() < 19 &&
           std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  if (!digits(pid) || !(ticks == "x" || digits(ticks))) return false;
  creator.pid = std::stoll(pid);
  creator.start_ticks = ticks == "x" ? -1 : std::stoll(ticks);
  creator.host = rest.substr(dot2 + 1);
  return true;
}

// Removes what creations of `path` killed before their link left beside it (the temporary file
// and its rollback journal) when the process that made them is gone. Another host's files, and a
// live process's, are kept. Best effort: a file that cannot be listed or removed stays.
void remove_abandoned_creations(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
  const std::string prefix = creating_prefix(path);
  std::vector<fs::path> abandoned;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    ProcessIdentity creator;
    if (name.starts_with(prefix) && parse_creator(name.substr(prefix.size()), creator) &&
        writer_state(creator) == WriterState::Dead)
      abandoned.push_back(it->path());
  }
  for (const fs::path& file : abandoned) fs::remove(file, ec);
}

// A new workspace is built under a temporary name and linked into place once its schema is
// committed, so a process killed while creating one leaves no empty database at `path` (which
// every reader refuses as not a workspace), only the temporary file, which the next creation of
// that path removes. Where the file system has no hard links the workspace is created in place,
// as before.
void create_workspace_file(const std::string& path) {
  remove_abandoned_creations(path);
  const std::string creating = creating_name(path, current_process());
  ::unlink(creating.c_str());
  try {
    sqlite::Connection db =
        sqlite::Connection::open_file(creating, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    migrate(db, kSchemaVersion);
  } catch (const sqlite::Error& e) {
    ::unlink(creating.c_str());
    if ((e.code() & 0xff) == SQLITE_CANTOPEN)
      throw InputError(path + ": cannot open workspace (" + sqlite3_errstr(e.code()) + ")");
    throw;
  }
  ::link(creating.c_str(), path.c_str());  // EEXIST: another process created it first
  ::unlink(creating.c_str());
}

// SQLite's files beside it must fit the folder's limit too, or the first write fails with
// "unable to open database file".
void check_name_fits(const std::string& path) {
  const std::size_t name = std::filesystem::path(path).filename().string().size();
  const std::size_t limit = name_max(path);
  if (name + kSqliteSuffix > limit)
    throw InputError(path + ": the file name is " + std::to_string(name) +
                     " bytes; a workspace's may have at most " +
                     std::to_string(limit - std::min(limit, kSqliteSuffix)) +
                     " (SQLite keeps '-journal' and '-wal' files beside it, and the folder "
                     "takes names of up to " +
                     std::to_string(limit) + " bytes)");
}

// The file at `path` as the mode needs it: an existing regular file, or (Create) a new
// workspace when there is none. Returns whether it existed.
bool prepare_workspace_file(const std::string& path, OpenMode mode) {
  // A workspace is a file name, never SQLite's temporary database (an empty name).
  if (path.empty()) throw InputError("the workspace file name is empty");
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (!exists && mode == OpenMode::Existing)
    throw InputError(path + ": no such workspace (file not found)");
  // A FIFO would block SQLite's reads and a device take its writes: only a file is a workspace.
  if (exists && !S_ISREG(st.st_mode))
    throw InputError(path + ": not a pipetune workspace (" + file_type_name(st.st_mode) + ")");
  if (!exists && mode == OpenMode::Create) {
    check_name_fits(path);
    create_workspace_file(path);
  }
  return exists;
}

// The connection: read-write (creating with Create), or immutable when this process may not
// write the file.
sqlite::Connection open_connection(const std::string& path, OpenMode mode, bool writable) {
  int flags = SQLITE_OPEN_READWRITE;
  if (mode == OpenMode::Create) flags |= SQLITE_OPEN_CREATE;
  try {
    return writable ? sqlite::Connection::open_file(path, flags)
                    : sqlite::Connection::open_immutable(path);
  } catch (const sqlite::Error& e) {
    if ((e.code() & 0xff) == SQLITE_CANTOPEN)
      throw InputError(path + ": cannot open workspace (" + sqlite3_errstr(e.code()) + ")");
    throw;
  }
}

// What the database holds, refused when it is not a database, is corrupt, or is not a
// workspace (tables but no schema_version; empty when an existing workspace was asked for).
Contents read_workspace_contents(sqlite::Connection& db, const std::string& path, OpenMode mode) {
  Contents contents;
  try {
    contents = read_contents(db);
  } catch (const sqlite::BadFileError& e) {
    if ((e.code() & 0xff) == SQLITE_NOTADB)
      throw sqlite::BadFileError(path + ": not a pipetune workspace (file is not a database)",
                                 e.code());
    throw sqlite::BadFileError(path + ": workspace is corrupt (" + sqlite3_errstr(e.code()) + ")",
                               e.code());
  }
  if (contents.tables > 0 && !contents.has_version)
    throw InputError(path + ": not a pipetune workspace (no schema_version table)");
  if (contents.tables == 0 && mode == OpenMode::Existing)
    throw InputError(path + ": not a pipetune workspace (empty database)");
  return contents;
}

// The schema checked and, where the file is writable, brought to this version in WAL mode; a
// read-only workspace must already be of this version.
void prepare_schema(sqlite::Connection& db, const std::string& path, const Contents& contents,
                    bool writable) {
  db.exec("PRAGMA cell_size_check = ON");  // turns more damage into SQLITE_CORRUPT early
  int version = contents.has_version ? read_schema_version(db) : 0;
  if (contents.has_version) check_version(path, version);
  if (!writable) {
    if (version == kSchemaVersion) check_tables(db, path);
    if (version < kSchemaVersion)
      throw InputError(path + ": workspace is read-only here and has schema version " +
                       std::to_string(version) + "; this pipetune reads version " +
                       std::to_string(kSchemaVersion) +
                       " (open it once where it is writable to upgrade it)");
    return;
  }
  // Only now that the file is ours (or new) may its journal mode change.
  sqlite::retry_busy(db, [&] { db.exec("PRAGMA journal_mode = WAL"); });
  db.exec("PRAGMA synchronous = NORMAL");
  if (version < kSchemaVersion) {
    migrate(db, kSchemaVersion);
    version = read_schema_version(db);
    check_version(path, version);
  }
  check_tables(db, path);
}

}  // namespace

std::vector<std::string> workspace_tables() {
  return {std::begin(kTables), std::end(kTables)};
}

sqlite::Connection open_workspace_db(const std::string& path, OpenMode mode) {
  const bool exists = prepare_workspace_file(path, mode);
  // A workspace this process may not write (a shared, archived or mounted read-only file) is
  // read as immutable: a WAL database otherwise needs to write its index even to be read.
  const bool writable = !exists || writable_here(path);
  if (!writable && mode == OpenMode::Create)
    throw InputError(path +
                     ": workspace is read-only here (no write permission): cannot store "
                     "a run in it");
  sqlite::Connection db = open_connection(path, mode, writable);
  db.set_busy_timeout(kWorkspaceBusyTimeout);
  try {
    const Contents contents = read_workspace_contents(db, path, mode);
    prepare_schema(db, path, contents, writable);
    return db;
  } catch (const sqlite::Error& e) {
    // A schema SQLite cannot use (unsupported format, another text encoding, a table without
    // the columns a query names) or absurd sizes in it: the file is damaged, not the machine.
    if (!damaged_file_code(e.code())) throw;
    throw sqlite::BadFileError(path + ": workspace is damaged (" + e.message() + ")", e.code());
  }
}

}  // namespace pipetune::db
