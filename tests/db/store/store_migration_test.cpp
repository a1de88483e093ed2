// Schema versions: a version-1 workspace (with a run in it) is migrated to the current version
// on open and keeps its data; a workspace at the current version opens without a byte changed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "db/store/counter_block.hpp"
#include "db/store/run_writer.hpp"
#include "db/store/schema.hpp"
#include "db/store/span_block.hpp"
#include "db/store/workspace.hpp"
#include "engine/errors.hpp"
#include "store_test_support.hpp"
#include "support/schedule_helpers.hpp"
#include "support/sim_helpers.hpp"

namespace pipetune::db {
namespace {

using namespace pipetune::profiler;
using testing::TempDir;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::vector<std::string> columns(sqlite::Connection& db, const std::string& table) {
  std::vector<std::string> out;
  sqlite::Statement s = db.prepare("SELECT name FROM pragma_table_info('" + table + "')");
  while (s.step()) out.push_back(s.column_text(0));
  return out;
}

std::string schema_sql(sqlite::Connection& db) {
  std::string out;
  sqlite::Statement s =
      db.prepare("SELECT type, name, sql FROM sqlite_master WHERE sql IS NOT NULL ORDER BY name");
  while (s.step())
    out += s.column_text(0) + " " + s.column_text(1) + ": " + s.column_text(2) + "\n";
  return out;
}

// A workspace at an older schema `version`, as that pipetune left it (WAL), with `sql` run in it.
void write_old_workspace(const std::string& path, int version, const std::string& sql) {
  sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  raw.exec("PRAGMA journal_mode = WAL");
  migrate(raw, version);
  raw.exec(sql);
}

// Opening the workspace is refused with an InputError whose message holds `expected`, and the file
// keeps schema version `version` (the migration rolled back).
void expect_refused_at_open(const std::string& path, const std::string& expected, int version) {
  try {
    Workspace ws(path);
    ADD_FAILURE() << path << " opened; expected the refusal: " << expected;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  sqlite::Connection raw(path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(read_schema_version(raw), version);
}

TEST(StoreMigration, VersionOneWorkspaceIsMigratedAndKeepsItsRuns) {
  TempDir dir;
  const std::string path = dir.file("v1.db");
  {
    // A version-1 workspace as pipetune 1 left it: no summary column, no trials table.
    sqlite::Connection raw(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    raw.exec("PRAGMA journal_mode = WAL");
    migrate(raw, 1);
    EXPECT_EQ(read_schema_version(raw), 1);
    const auto run_columns = columns(raw, "runs");
    EXPECT_EQ(std::count(run_columns.begin(), run_columns.end(), "summary_json"), 0);
    raw.exec(
        "INSERT INTO runs(id, kind, name, status, started_unix_ns, ended_unix_ns) VALUES "
        "(5, 'measured', 'old run', 'complete', 100, 200);"
        "INSERT INTO lanes(id, run, idx, rank, stream, stream_index, name) VALUES "
        "(1, 5, 0, 2, 'compute', 0, 'rank 2 compute');"
        "INSERT INTO names(run, id, text) VALUES (5, 0, '');"
        "INSERT INTO step_metrics(run, seq, step, t_ns, loss, tokens_per_s) VALUES "
        "(5, 0, 1, 50, 4.5, 900.0);");
  }
  Workspace ws(path);
  EXPECT_EQ(ws.schema_version(), kSchemaVersion);
  const RunRecord r = ws.run(5);
  EXPECT_EQ(r.name, "old run");
  EXPECT_EQ(r.kind, TraceKind::Measured);
  EXPECT_EQ(r.status, RunStatus::Complete);
  EXPECT_EQ(r.summary_json, "");
  EXPECT_EQ(r.ended_unix_ns, 200);
  const StoredRun back = ws.load(5);
  ASSERT_EQ(back.trace.lanes.size(), 1u);
  EXPECT_EQ(back.trace.lanes[0].name, "rank 2 compute");
  ASSERT_EQ(back.trace.steps.size(), 1u);
  EXPECT_EQ(back.trace.steps[0].loss, 4.5);
  // What version 2 added works on the migrated file.
  ws.set_summary_json(5, R"({"iteration_s":0.5})");
  EXPECT_EQ(ws.run(5).summary_json, R"({"iteration_s":0.5})");
  TrialRecord trial;
  trial.search_id = 1;
  trial.run_id = 5;
  trial.plan_json = "{}";
  ws.add_trial(trial);
  EXPECT_EQ(ws.trials(1).size(), 1u);
  // A writer adds runs after the migrated one.
  const std::int64_t next = store_trace(path, {TraceKind::Simulated, "new", "", ""}, Trace{});
  EXPECT_EQ(next, 6);

  // The migrated schema is the one a new workspace gets.
  sqlite::Connection migrated(path, SQLITE_OPEN_READONLY);
  Workspace fresh(dir.file("fresh.db"), OpenMode::Create);
  sqlite::Connection created(dir.file("fresh.db"), SQLITE_OPEN_READONLY);
  EXPECT_EQ(schema_sql(migrated), schema_sql(created));
}

// Version 5 stores span and counter blocks compact: a version-4 workspace's 40-byte span and
// 24-byte counter records are encoded again, and the run loads back span for span and sample for
// sample as it was simulated (the trace is the reference).
TEST(StoreMigration, VersionFourSpanBlocksAreEncodedCompactAndLoadBackTheSame) {
  TempDir dir;
  const std::string path = dir.file("v4.db");
  schedule::GeneratorParams g = schedule::testing::params("zb-v", 4, 160);
  const auto sim = schedule::testing::run(g, schedule::CostTable::uniform(4, 1.0, 1.3, 0.7));
  const std::int64_t id = store_trace(path, {TraceKind::Simulated, "zb-v", "", ""}, sim.trace);
  std::int64_t blocks = 0, spans = 0, full_blocks = 0;
  {
    // Back to version 4 by hand: every block's BLOB as the 40-byte records version 4 stored.
    sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    sqlite::Statement read = raw.prepare("SELECT id, span_count, spans FROM span_blocks");
    std::vector<std::pair<std::int64_t, std::vector<PackedSpan>>> rows;
    while (read.step()) {
      auto& [block_id, records] = rows.emplace_back();
      block_id = read.column_int64(0);
      decode_block(read.column_blob(2), read.column_bytes(2), read.column_int64(1), block_id, path,
                   records);
      spans += static_cast<std::int64_t>(records.size());
      if (records.size() == kBlockSpans) ++full_blocks;
    }
    sqlite::Statement write = raw.prepare("UPDATE span_blocks SET spans = ?2 WHERE id = ?1");
    for (const auto& [block_id, records] : rows)
      write.bind(1, block_id)
          .bind_static_blob(2, records.data(), records.size() * sizeof(PackedSpan))
          .run();
    // And every counter block's as the 24-byte records.
    sqlite::Statement counters =
        raw.prepare("SELECT id, run, first_seq, sample_count, samples FROM counter_blocks");
    std::vector<std::pair<std::int64_t, std::vector<PackedCounter>>> counter_rows;
    while (counters.step()) {
      std::vector<CounterSample> samples;
      decode_counter_block(counters.column_blob(4), counters.column_bytes(4),
                           counters.column_int64(3), counters.column_int64(1),
                           counters.column_int64(2), path, samples);
      auto& [block_id, records] = counter_rows.emplace_back();
      block_id = counters.column_int64(0);
      for (const CounterSample& c : samples) records.push_back(pack_counter(c, c.name));
    }
    ASSERT_FALSE(counter_rows.empty());  // the simulator's activations in flight
    sqlite::Statement write_counters =
        raw.prepare("UPDATE counter_blocks SET samples = ?2 WHERE id = ?1");
    for (const auto& [block_id, records] : counter_rows)
      write_counters.bind(1, block_id)
          .bind_static_blob(2, records.data(), records.size() * sizeof(PackedCounter))
          .run();
    raw.exec("UPDATE schema_version SET version = 4");
    blocks = static_cast<std::int64_t>(rows.size());
  }
  ASSERT_GT(full_blocks, 0);  // lanes of more than one block
  ASSERT_EQ(spans, static_cast<std::int64_t>(sim.trace.spans.size()));

  Workspace ws(path);
  EXPECT_EQ(ws.schema_version(), kSchemaVersion);
  EXPECT_EQ(testing::diff_traces(sim.trace, ws.load(id).trace), "");
  sqlite::Connection migrated(path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(migrated.query_int64("SELECT count(*) FROM span_blocks"), blocks);
  // Compact: under a third of version 4's bytes.
  EXPECT_LT(3 * migrated.query_int64("SELECT sum(length(spans)) FROM span_blocks"),
            spans * static_cast<std::int64_t>(sizeof(PackedSpan)));
}

// Version 4 packs counter samples into blocks: a version-3 workspace's counter rows come back
// in their order, a NULL value as NaN, across a block boundary and for each run apart.
TEST(StoreMigration, VersionThreeCounterRowsArePackedIntoBlocks) {
  TempDir dir;
  const std::string path = dir.file("v3.db");
  const std::int64_t many = static_cast<std::int64_t>(kCounterBlockSamples) + 904;
  // Run 5: seq 0..many-1 with seq 7's value NULL; run 6: three rows with gaps in seq.
  write_old_workspace(
      path, 3,
      "INSERT INTO runs(id, kind, name, status, started_unix_ns) VALUES "
      "(5, 'simulated', 'many', 'complete', 1), (6, 'measured', 'few', 'complete', 2);"
      "INSERT INTO names(run, id, text) VALUES (5, 0, ''), (5, 1, 'activations'), "
      "(6, 0, ''), (6, 1, 'loss scale');"
      "WITH RECURSIVE c(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM c WHERE x < " +
          std::to_string(many - 1) +
          ") INSERT INTO counters(run, seq, rank, name, t_ns, value) SELECT 5, x, x % 3, 1, "
          "10 * x, CASE WHEN x = 7 THEN NULL ELSE 0.5 * x END FROM c;"
          "INSERT INTO counters(run, seq, rank, name, t_ns, value) VALUES "
          "(6, 0, 1, 1, 100, 65536.0), (6, 4, 0, 1, 200, -1.5), (6, 9, 1, 1, 300, 2.0);");
  Workspace ws(path);
  EXPECT_EQ(ws.schema_version(), kSchemaVersion);
  const std::vector<CounterSample> five = ws.counters(5);
  ASSERT_EQ(static_cast<std::int64_t>(five.size()), many);
  for (std::int64_t x = 0; x < many; ++x) {
    const CounterSample& c = five[static_cast<std::size_t>(x)];
    ASSERT_EQ(c.rank, x % 3) << "sample " << x;
    ASSERT_EQ(c.name, 1u) << "sample " << x;
    ASSERT_EQ(c.t_ns, 10 * x) << "sample " << x;
    if (x == 7)
      EXPECT_TRUE(std::isnan(c.value)) << c.value;
    else
      ASSERT_EQ(c.value, 0.5 * static_cast<double>(x)) << "sample " << x;
  }
  const std::vector<CounterSample> six = ws.counters(6);
  ASSERT_EQ(six.size(), 3u);
  EXPECT_EQ(six[0].value, 65536.0);
  EXPECT_EQ(six[1].t_ns, 200);
  EXPECT_EQ(six[1].value, -1.5);
  EXPECT_EQ(six[2].rank, 1);
  EXPECT_EQ(ws.load(6).trace.names[six[2].name], "loss scale");

  sqlite::Connection raw(path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_int64("SELECT count(*) FROM counter_blocks WHERE run = 5"), 2);
  EXPECT_EQ(raw.query_int64("SELECT count(*) FROM counter_blocks WHERE run = 6"), 1);
  EXPECT_EQ(raw.query_int64("SELECT count(*) FROM sqlite_master WHERE name = 'counters'"), 0);
}

// A version-3 file whose counter rows break the new table's constraint when packed (a run stored
// as text reads as run 0, after run 5, so run 0's first block comes twice) is refused as
// damaged, naming the constraint, and left as it was: the migration is rolled back.
TEST(StoreMigration, CounterRowsThatBreakAConstraintWhenPackedAreNamedAsDamage) {
  TempDir dir;
  const std::string path = dir.file("v3-damaged.db");
  write_old_workspace(path, 3,
                      "INSERT INTO counters(run, seq, rank, name, t_ns, value) VALUES "
                      "(0, 0, 0, 0, 10, 1.0), (5, 0, 0, 0, 20, 2.0), ('five', 0, 0, 0, 30, 3.0);");
  expect_refused_at_open(path,
                         path +
                             ": workspace is damaged (UNIQUE constraint failed: "
                             "counter_blocks.run, counter_blocks.first_seq)",
                         3);
  sqlite::Connection raw(path, SQLITE_OPEN_READONLY);
  EXPECT_EQ(raw.query_int64("SELECT count(*) FROM counters"), 3);
  EXPECT_EQ(raw.query_int64("SELECT count(*) FROM sqlite_master WHERE name = 'counter_blocks'"), 0);
}

// Version 5 encodes the blocks again a batch at a time, each batch after the last one's id. Ids
// that do not rise (text, which sorts after every number and reads as 0; or a damaged table's
// order) would give the same rows again and again: they are refused as damage, not looped on.
TEST(StoreMigration, BlockIdsThatDoNotRiseAreNamedNotLoopedOn) {
  TempDir dir;
  const std::string path = dir.file("v4-text-ids.db");
  write_old_workspace(path, 4,
                      "DROP TABLE counter_blocks;"
                      "CREATE TABLE counter_blocks(id TEXT, run INTEGER, first_seq INTEGER, "
                      "sample_count INTEGER, samples BLOB);"
                      "INSERT INTO counter_blocks VALUES ('one', 1, 0, 1, zeroblob(" +
                          std::to_string(sizeof(PackedCounter)) + "));");
  expect_refused_at_open(path,
                         path +
                             ": workspace is damaged (the rows of counter_blocks are not in id "
                             "order at id 0)",
                         4);
}

// A counter block whose size disagrees with its sample count is named, not read past its end.
TEST(StoreMigration, ACorruptCounterBlockIsNamed) {
  TempDir dir;
  const std::string path = dir.file("corrupt.db");
  Trace t;
  const std::uint32_t name = t.intern("loss scale");
  t.counters.push_back(CounterSample{0, name, 10, 1.0});
  t.counters.push_back(CounterSample{0, name, 20, 2.0});
  const std::int64_t run = store_trace(path, {TraceKind::Measured, "one", "", ""}, t);
  {
    sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.exec("UPDATE counter_blocks SET sample_count = 3");
  }
  Workspace ws(path);
  try {
    ws.counters(run);
    FAIL() << "a block of 2 samples read as 3";
  } catch (const InputError& e) {
    // 15 bytes: format, value mode, first time, 4 widths, 4 smallest values, then two samples of
    // a 1-byte time step and a 1-byte value (rank and name are the same throughout).
    EXPECT_NE(std::string(e.what()).find("corrupt counter block of run 1 at sample 0 (15 bytes "
                                         "for 3 samples, not a block of format 1)"),
              std::string::npos)
        << e.what();
  }
}

TEST(StoreMigration, CurrentVersionOpensUnchanged) {
  TempDir dir;
  const std::string path = dir.file("current.db");
  Trace t;
  t.spans.push_back(Span{t.lane(0, Stream::Compute), SpanKind::F, 0, 0, -1, 0, 10, 0});
  store_trace(path, {TraceKind::Simulated, "one", "", ""}, t);
  const std::string before = file_bytes(path);
  {
    Workspace ws(path);
    EXPECT_EQ(ws.schema_version(), kSchemaVersion);
    EXPECT_EQ(ws.runs().size(), 1u);
    EXPECT_EQ(ws.load(1).trace.spans.size(), 1u);
  }
  EXPECT_TRUE(file_bytes(path) == before) << "opening and reading changed the file";
}

TEST(StoreMigration, MigrateRefusesAnUnknownVersion) {
  TempDir dir;
  sqlite::Connection raw(dir.file("x.db"), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  EXPECT_THROW(migrate(raw, kSchemaVersion + 1), std::invalid_argument);
  migrate(raw, kSchemaVersion);
  EXPECT_EQ(read_schema_version(raw), kSchemaVersion);
  migrate(raw, 1);  // already past it: nothing to do
  EXPECT_EQ(read_schema_version(raw), kSchemaVersion);
}

// The table list open_workspace_db checks is exactly what the migrations create.
TEST(StoreMigration, TheCheckedTablesAreThoseTheMigrationsCreate) {
  TempDir dir;
  sqlite::Connection raw(dir.file("fresh.db"), SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  migrate(raw, kSchemaVersion);
  std::vector<std::string> created;
  sqlite::Statement s = raw.prepare(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE "
      "'sqlite_%' ORDER BY name");
  while (s.step()) created.push_back(s.column_text(0));
  std::vector<std::string> checked = workspace_tables();
  std::sort(checked.begin(), checked.end());
  EXPECT_EQ(checked, created);
}

// A workspace missing one of its tables is refused at open, naming the table (it failed later
// with the raw SQL of whatever query first touched it, exit 1).
TEST(StoreMigration, AMissingTableIsNamedAtOpen) {
  TempDir dir;
  const std::string path = dir.file("damaged.db");
  Trace t;
  t.spans.push_back(Span{t.lane(0, Stream::Compute), SpanKind::F, 0, 0, -1, 0, 10, 0});
  store_trace(path, {TraceKind::Simulated, "one", "", ""}, t);
  {
    sqlite::Connection raw(path, SQLITE_OPEN_READWRITE);
    raw.exec("DROP TABLE span_blocks");
  }
  try {
    Workspace ws(path);
    FAIL() << "a workspace without span_blocks opened";
  } catch (const InputError& e) {
    EXPECT_NE(
        std::string(e.what()).find("workspace is damaged: its table 'span_blocks' is missing"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pipetune::db
