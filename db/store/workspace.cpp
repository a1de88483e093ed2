#include "db/store/workspace.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>

#include "db/store/counter_block.hpp"
#include "db/store/process_identity.hpp"
#include "db/store/run_layout.hpp"
#include "engine/errors.hpp"
#include "profiler/analysis/time_window.hpp"

namespace pipetune::db {

namespace {

constexpr const char* kRunColumns =
    "r.id, r.kind, r.name, r.plan_json, r.specs_json, r.summary_json, r.status, "
    "r.started_unix_ns, r.ended_unix_ns, r.writer_host, r.writer_pid, "
    "(SELECT coalesce(sum(l.span_count), 0) FROM lanes l WHERE l.run = r.id), "
    "r.writer_boot_id, r.writer_start_ticks";

double read_real(const sqlite::Statement& s, int column) {
  return s.column_is_null(column) ? std::numeric_limits<double>::quiet_NaN()
                                  : s.column_double(column);
}

[[noreturn]] void corrupt(const std::string& path, const std::string& what) {
  throw InputError(path + ": corrupt workspace (" + what + ")");
}

// A lane's deepest nesting level: -1 without spans, else below its span count (depth d needs d + 1
// nested spans). Readers query each level, so a damaged value must not become 2^31 queries.
std::int32_t checked_max_depth(const std::string& path, std::int64_t max_depth,
                               std::int64_t span_count) {
  if (span_count < 0 || max_depth < -1 || max_depth >= std::max<std::int64_t>(span_count, 0))
    corrupt(path, "lane of " + std::to_string(span_count) + " spans with max depth " +
                      std::to_string(max_depth));
  return static_cast<std::int32_t>(max_depth);
}

RunRecord read_run(const sqlite::Statement& s, const std::string& path) {
  RunRecord r;
  r.id = s.column_int64(0);
  if (!parse_trace_kind(s.column_text_view(1), r.kind))
    corrupt(path, "run " + std::to_string(r.id) + " has kind '" + s.column_text(1) + "'");
  r.name = s.column_text(2);
  r.plan_json = s.column_text(3);
  r.specs_json = s.column_text(4);
  r.summary_json = s.column_text(5);
  if (!parse_run_status(s.column_text_view(6), r.status))
    corrupt(path, "run " + std::to_string(r.id) + " has status '" + s.column_text(6) + "'");
  r.started_unix_ns = s.column_int64(7);
  r.ended_unix_ns = s.column_is_null(8) ? -1 : s.column_int64(8);
  r.writer_host = s.column_text(9);
  r.writer_pid = s.column_int64(10);
  r.span_count = s.column_int64(11);
  r.writer_boot_id = s.column_text(12);
  r.writer_start_ticks = s.column_is_null(13) ? -1 : s.column_int64(13);
  return r;
}

}  // namespace

Workspace::Workspace(const std::string& path, OpenMode mode) : db_(open_workspace_db(path, mode)) {
  db_.exec("PRAGMA cache_size = -65536");  // 64 MiB of pages: windows revisit the same blocks
  refresh_interrupted();
}

Workspace::~Workspace() = default;
Workspace::Workspace(Workspace&&) noexcept = default;
Workspace& Workspace::operator=(Workspace&&) noexcept = default;

int Workspace::schema_version() {
  return read_schema_version(db_);
}

LaneWindowReader& Workspace::reader() {
  if (!reader_) reader_ = std::make_unique<LaneWindowReader>(db_);
  return *reader_;
}

void Workspace::refresh_interrupted() {
  std::vector<std::int64_t> dead;
  {
    sqlite::Statement s = db_.prepare(
        "SELECT id, writer_host, writer_boot_id, writer_pid, writer_start_ticks FROM runs WHERE "
        "status = 'running'");
    while (s.step()) {
      ProcessIdentity writer;
      writer.host = s.column_text(1);
      writer.boot_id = s.column_text(2);
      writer.pid = s.column_int64(3);
      writer.start_ticks = s.column_is_null(4) ? -1 : s.column_int64(4);
      if (writer_state(writer) == WriterState::Dead) dead.push_back(s.column_int64(0));
    }
  }
  if (dead.empty() || db_.read_only()) return;
  sqlite::Transaction tx(db_);
  sqlite::Statement mark = db_.prepare(
      "UPDATE runs SET status = 'interrupted', ended_unix_ns = coalesce(last_commit_unix_ns, "
      "started_unix_ns) WHERE id = ?1 AND status = 'running'");
  for (const std::int64_t id : dead) mark.bind(1, id).run();
  tx.commit();
}

std::vector<RunRecord> Workspace::runs() {
  refresh_interrupted();
  sqlite::Statement s =
      db_.prepare(std::string("SELECT ") + kRunColumns + " FROM runs r ORDER BY r.id");
  std::vector<RunRecord> out;
  while (s.step()) out.push_back(read_run(s, path()));
  return out;
}

namespace {

[[noreturn]] void unknown_run(const std::string& path, const std::string& wanted,
                              const std::vector<RunRecord>& known) {
  std::string message = path + ": no run " + wanted;
  if (known.empty()) throw InputError(message + " (the workspace has no runs)");
  message += "; known runs:";
  constexpr std::size_t kShown = 10;
  const std::size_t first = known.size() > kShown ? known.size() - kShown : 0;  // the latest
  for (std::size_t i = first; i < known.size(); ++i) {
    const RunRecord& r = known[i];
    message += (i == first ? " " : ", ") + std::to_string(r.id) + " '" + r.name + "' (" +
               std::string(trace_kind_name(r.kind)) + ", " +
               std::string(run_status_name(r.status)) + ")";
  }
  if (first > 0) message += " and " + std::to_string(first) + " older";
  throw InputError(message);
}

}  // namespace

RunRecord Workspace::run(std::int64_t id) {
  refresh_interrupted();
  sqlite::Statement s =
      db_.prepare(std::string("SELECT ") + kRunColumns + " FROM runs r WHERE r.id = ?1");
  s.bind(1, id);
  if (s.step()) return read_run(s, path());
  unknown_run(path(), "with id " + std::to_string(id), runs());
}

RunRecord Workspace::find_run(std::string_view id_or_name) {
  refresh_interrupted();
  const bool numeric = !id_or_name.empty() && id_or_name.size() < 19 &&
                       std::all_of(id_or_name.begin(), id_or_name.end(),
                                   [](char c) { return c >= '0' && c <= '9'; });
  if (numeric) {
    sqlite::Statement s =
        db_.prepare(std::string("SELECT ") + kRunColumns + " FROM runs r WHERE r.id = ?1");
    s.bind(1, std::int64_t{std::stoll(std::string(id_or_name))});
    if (s.step()) return read_run(s, path());
  }
  sqlite::Statement s = db_.prepare(std::string("SELECT ") + kRunColumns +
                                    " FROM runs r WHERE r.name = ?1 ORDER BY r.id DESC LIMIT 1");
  s.bind(1, id_or_name);
  if (s.step()) return read_run(s, path());
  unknown_run(path(), "'" + std::string(id_or_name) + "'", runs());
}

void Workspace::require_run(std::int64_t run_id) {
  sqlite::Statement s = db_.prepare("SELECT 1 FROM runs WHERE id = ?1");
  s.bind(1, run_id);
  if (!s.step()) unknown_run(path(), "with id " + std::to_string(run_id), runs());
}

std::vector<LaneInfo> Workspace::lanes(std::int64_t run_id) {
  require_run(run_id);
  sqlite::Statement s = db_.prepare(
      "SELECT idx, rank, stream, stream_index, name, span_count, max_depth, start_ns, end_ns "
      "FROM lanes WHERE run = ?1 ORDER BY idx");
  s.bind(1, run_id);
  std::vector<LaneInfo> out;
  while (s.step()) {
    LaneInfo l;
    l.index = static_cast<std::int32_t>(s.column_int64(0));
    if (l.index != static_cast<std::int32_t>(out.size()))
      corrupt(path(), "run " + std::to_string(run_id) + " lane indices are not 0..n-1");
    l.lane.rank = static_cast<std::int32_t>(s.column_int64(1));
    if (!profiler::parse_stream(s.column_text_view(2), l.lane.stream))
      corrupt(path(), "lane stream '" + s.column_text(2) + "'");
    l.lane.index = static_cast<std::int32_t>(s.column_int64(3));
    l.lane.name = s.column_text(4);
    l.span_count = s.column_int64(5);
    l.max_depth = checked_max_depth(path(), s.column_int64(6), l.span_count);
    l.start_ns = s.column_int64(7);
    l.end_ns = s.column_int64(8);
    out.push_back(std::move(l));
  }
  return out;
}

std::vector<std::string> Workspace::names(std::int64_t run_id) {
  require_run(run_id);
  sqlite::Statement s = db_.prepare("SELECT id, text FROM names WHERE run = ?1 ORDER BY id");
  s.bind(1, run_id);
  std::vector<std::string> out;
  while (s.step()) {
    if (s.column_int64(0) != static_cast<std::int64_t>(out.size()))
      corrupt(path(), "run " + std::to_string(run_id) + " name ids are not 0..n-1");
    out.push_back(s.column_text(1));
  }
  if (out.empty()) out.emplace_back();
  return out;
}

namespace {

profiler::MemorySample read_memory(const sqlite::Statement& s, const std::string& path) {
  profiler::MemorySample m;
  m.rank = static_cast<std::int32_t>(s.column_int64(0));
  if (!profiler::parse_memory_category(s.column_text_view(1), m.category))
    corrupt(path, "memory category '" + s.column_text(1) + "'");
  m.t_ns = s.column_int64(2);
  m.bytes = s.column_int64(3);
  return m;
}

}  // namespace

std::vector<profiler::MemorySample> Workspace::memory(std::int64_t run_id) {
  require_run(run_id);
  sqlite::Statement s = db_.prepare(
      "SELECT rank, category, t_ns, bytes FROM memory_samples WHERE run = ?1 ORDER BY seq");
  s.bind(1, run_id);
  std::vector<profiler::MemorySample> out;
  while (s.step()) out.push_back(read_memory(s, path()));
  return out;
}

std::vector<profiler::MemorySample> Workspace::memory(std::int64_t run_id, std::int32_t rank,
                                                      std::int64_t t0, std::int64_t t1) {
  require_run(run_id);
  std::vector<profiler::MemorySample> out;
  sqlite::Statement before = db_.prepare(
      "SELECT rank, category, t_ns, bytes FROM memory_samples WHERE run = ?1 AND rank = ?2 AND "
      "t_ns < ?3 AND category = ?4 ORDER BY t_ns DESC, seq DESC LIMIT 1");
  for (int c = 0; c < profiler::kMemoryCategoryCount; ++c) {
    before.bind(1, run_id).bind(2, rank).bind(3, t0).bind(
        4, profiler::memory_category_name(static_cast<profiler::MemoryCategory>(c)));
    if (before.step()) out.push_back(read_memory(before, path()));
    before.reset();
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.t_ns < b.t_ns; });
  sqlite::Statement inside = db_.prepare(
      "SELECT rank, category, t_ns, bytes FROM memory_samples WHERE run = ?1 AND rank = ?2 AND "
      "t_ns >= ?3 AND t_ns < ?4 ORDER BY t_ns, seq");
  inside.bind(1, run_id).bind(2, rank).bind(3, t0).bind(4, t1);
  while (inside.step()) out.push_back(read_memory(inside, path()));
  return out;
}

std::vector<profiler::CounterSample> Workspace::counters(std::int64_t run_id) {
  require_run(run_id);
  sqlite::Statement s = db_.prepare(
      "SELECT first_seq, sample_count, samples FROM counter_blocks WHERE run = ?1 ORDER BY "
      "first_seq");
  s.bind(1, run_id);
  std::vector<profiler::CounterSample> out;
  while (s.step()) {
    const std::int64_t first_seq = s.column_int64(0);
    if (first_seq != static_cast<std::int64_t>(out.size()))
      corrupt(path(), "run " + std::to_string(run_id) + " counter block at sample " +
                          std::to_string(first_seq) + " follows " + std::to_string(out.size()) +
                          " samples");
    decode_counter_block(s.column_blob(2), s.column_bytes(2), s.column_int64(1), run_id, first_seq,
                         path(), out);
  }
  return out;
}

std::vector<profiler::StepMetric> Workspace::steps(std::int64_t run_id) {
  require_run(run_id);
  sqlite::Statement s = db_.prepare(
      "SELECT step, t_ns, loss, tokens_per_s FROM step_metrics WHERE run = ?1 ORDER BY seq");
  s.bind(1, run_id);
  std::vector<profiler::StepMetric> out;
  while (s.step()) {
    profiler::StepMetric m;
    m.step = static_cast<std::int32_t>(s.column_int64(0));
    m.t_ns = s.column_int64(1);
    m.loss = read_real(s, 2);
    m.tokens_per_s = read_real(s, 3);
    out.push_back(m);
  }
  return out;
}

std::vector<profiler::KernelRecord> Workspace::kernels(std::int64_t run_id) {
  const std::vector<std::string> text = names(run_id);
  sqlite::Statement s = db_.prepare(
      "SELECT rank, device, stream, correlation, start_ns, end_ns, name, grid_x, grid_y, grid_z, "
      "block_x, block_y, block_z, bytes, op, phase, microbatch, chunk FROM kernels WHERE run = ?1 "
      "ORDER BY seq");
  s.bind(1, run_id);
  std::vector<profiler::KernelRecord> out;
  while (s.step()) {
    profiler::KernelRecord k;
    k.rank = static_cast<std::int32_t>(s.column_int64(0));
    k.device = static_cast<std::int32_t>(s.column_int64(1));
    k.stream = static_cast<std::int32_t>(s.column_int64(2));
    k.correlation = s.column_int64(3);
    k.start_ns = s.column_int64(4);
    k.end_ns = s.column_int64(5);
    const std::int64_t name = s.column_int64(6);
    if (name < 0 || name >= static_cast<std::int64_t>(text.size()))
      corrupt(path(), "kernel name id " + std::to_string(name));
    k.name = text[static_cast<std::size_t>(name)];
    for (int i = 0; i < 3; ++i) {
      k.grid[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(s.column_int64(7 + i));
      k.block[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(s.column_int64(10 + i));
    }
    k.bytes = s.column_int64(13);
    if (!s.column_is_null(14)) {
      const std::int64_t op = s.column_int64(14);
      if (op < 0 || op >= static_cast<std::int64_t>(text.size()))
        corrupt(path(), "kernel op name id " + std::to_string(op));
      k.op = text[static_cast<std::size_t>(op)];
    }
    if (!s.column_is_null(15)) {
      profiler::SpanKind phase;
      const std::string name = s.column_text(15);
      if (!profiler::parse_span_kind(name, phase)) corrupt(path(), "kernel phase '" + name + "'");
      k.phase = phase;
    }
    if (!s.column_is_null(16)) k.microbatch = static_cast<std::int32_t>(s.column_int64(16));
    if (!s.column_is_null(17)) k.chunk = static_cast<std::int16_t>(s.column_int64(17));
    out.push_back(std::move(k));
  }
  return out;
}

StoredRun Workspace::load(std::int64_t run_id) {
  StoredRun out;
  out.run = run(run_id);
  profiler::Trace& trace = out.trace;
  apply_run_record(out.run, trace);
  trace.names = names(run_id);
  const std::vector<LaneInfo> lane_infos = lanes(run_id);
  std::vector<SpanAt> spans;
  std::vector<std::int64_t> seq;
  for (const LaneInfo& l : lane_infos) {
    trace.lanes.push_back(l.lane);
    sqlite::Statement id = db_.prepare("SELECT id FROM lanes WHERE run = ?1 AND idx = ?2");
    id.bind(1, run_id).bind(2, l.index);
    if (!id.step()) corrupt(path(), "lane vanished");
    reader().all_spans(LaneRef{id.column_int64(0), l.index, l.max_depth}, spans, seq);
  }
  std::vector<std::size_t> order(spans.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return seq[a] < seq[b]; });
  trace.spans.reserve(spans.size());
  for (const std::size_t i : order) {
    if (spans[i].span.name >= trace.names.size())
      corrupt(path(), "span name id " + std::to_string(spans[i].span.name));
    trace.spans.push_back(spans[i].span);
  }
  trace.memory = memory(run_id);
  trace.counters = counters(run_id);
  for (const profiler::CounterSample& c : trace.counters) {
    if (c.name >= trace.names.size()) corrupt(path(), "counter name id " + std::to_string(c.name));
  }
  trace.steps = steps(run_id);
  // Sample times an analysis can subtract (spans are checked as their blocks are read).
  const auto check_time = [&](std::int64_t t, const char* what) {
    if (!profiler::analysis::trace_time_ok(t))
      corrupt(path(), std::string(what) + " at " + std::to_string(t) + " ns");
  };
  for (const auto& m : trace.memory) check_time(m.t_ns, "memory sample");
  for (const auto& c : trace.counters) check_time(c.t_ns, "counter sample");
  for (const auto& st : trace.steps) check_time(st.t_ns, "step");
  out.kernels = kernels(run_id);
  return out;
}

LaneRef Workspace::lane_ref(std::int64_t run_id, std::int32_t lane_index) {
  sqlite::Statement s =
      db_.prepare("SELECT id, max_depth, span_count FROM lanes WHERE run = ?1 AND idx = ?2", true);
  s.bind(1, run_id).bind(2, lane_index);
  if (s.step())
    return LaneRef{s.column_int64(0), lane_index,
                   checked_max_depth(path(), s.column_int64(1), s.column_int64(2))};
  require_run(run_id);
  const std::int64_t count =
      db_.query_int64("SELECT count(*) FROM lanes WHERE run = " + std::to_string(run_id));
  throw InputError(path() + ": run " + std::to_string(run_id) + " has no lane " +
                   std::to_string(lane_index) + " (it has " + std::to_string(count) + ")");
}

std::vector<SpanAt> Workspace::spans(std::int64_t run_id, std::int32_t lane_index, std::int64_t t0,
                                     std::int64_t t1) {
  return reader().spans(lane_ref(run_id, lane_index), t0, t1);
}

LaneWindow Workspace::window(std::int64_t run_id, std::int32_t lane_index, std::int64_t t0,
                             std::int64_t t1, int width_px) {
  return reader().fold(lane_ref(run_id, lane_index), t0, t1, width_px);
}

void Workspace::set_summary_json(std::int64_t run_id, const std::string& json) {
  if (!json.empty() && !nlohmann::json::accept(json))
    throw InputError("run " + std::to_string(run_id) + ": summary JSON is not valid JSON");
  require_run(run_id);
  sqlite::Transaction tx(db_);
  sqlite::Statement s = db_.prepare("UPDATE runs SET summary_json = ?2 WHERE id = ?1");
  s.bind(1, run_id);
  if (json.empty())
    s.bind_null(2);
  else
    s.bind(2, json);
  s.run();
  tx.commit();
}

namespace {

void insert_trial(sqlite::Statement& s, const TrialRecord& trial) {
  s.bind(1, trial.search_id);
  if (trial.run_id < 0)
    s.bind_null(2);
  else
    s.bind(2, trial.run_id);
  s.bind(3, trial.plan_json)
      .bind(4, trial.iteration_s)
      .bind(5, trial.tokens_per_s)
      .bind(6, trial.mfu)
      .bind(7, trial.peak_memory_bytes)
      .bind(8, trial.feasible ? 1 : 0);
  if (trial.pruned_reason.empty())
    s.bind_null(9);
  else
    s.bind(9, trial.pruned_reason);
  s.run();
}

constexpr const char* kInsertTrial =
    "INSERT INTO tuner_trials(search_id, run_id, plan_json, iteration_s, tokens_per_s, mfu, "
    "peak_memory_bytes, feasible, pruned_reason) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";

}  // namespace

std::int64_t Workspace::latest_search_id() {
  sqlite::Statement s = db_.prepare("SELECT MAX(search_id) FROM tuner_trials");
  if (!s.step() || s.column_is_null(0)) return -1;
  return s.column_int64(0);
}

std::int64_t Workspace::add_search(std::vector<TrialRecord> trials) {
  for (const TrialRecord& t : trials)
    if (!nlohmann::json::accept(t.plan_json))
      throw InputError("tuner trial: plan_json is not valid JSON");
  sqlite::Transaction tx(db_);
  const std::int64_t search_id = latest_search_id() + 1;
  sqlite::Statement s = db_.prepare(kInsertTrial);
  for (TrialRecord& t : trials) {
    t.search_id = search_id;
    insert_trial(s, t);
  }
  tx.commit();
  return search_id;
}

std::int64_t Workspace::add_trial(const TrialRecord& trial) {
  if (!nlohmann::json::accept(trial.plan_json))
    throw InputError("tuner trial: plan_json is not valid JSON");
  sqlite::Transaction tx(db_);
  sqlite::Statement s = db_.prepare(kInsertTrial);
  insert_trial(s, trial);
  const std::int64_t id = db_.last_insert_rowid();
  tx.commit();
  return id;
}

std::vector<TrialRecord> Workspace::trials(std::int64_t search_id) {
  sqlite::Statement s = db_.prepare(
      "SELECT id, search_id, run_id, plan_json, iteration_s, tokens_per_s, mfu, "
      "peak_memory_bytes, feasible, pruned_reason FROM tuner_trials WHERE search_id = ?1 ORDER "
      "BY id");
  s.bind(1, search_id);
  std::vector<TrialRecord> out;
  while (s.step()) {
    TrialRecord t;
    t.id = s.column_int64(0);
    t.search_id = s.column_int64(1);
    t.run_id = s.column_is_null(2) ? -1 : s.column_int64(2);
    t.plan_json = s.column_text(3);
    t.iteration_s = read_real(s, 4);
    t.tokens_per_s = read_real(s, 5);
    t.mfu = read_real(s, 6);
    t.peak_memory_bytes = s.column_int64(7);
    t.feasible = s.column_int64(8) != 0;
    t.pruned_reason = s.column_text(9);
    out.push_back(std::move(t));
  }
  return out;
}

void Workspace::check() {
  std::string result;
  try {
    result = db_.query_text("PRAGMA quick_check");
  } catch (const sqlite::BadFileError& e) {
    throw sqlite::BadFileError(path() + ": workspace is corrupt (" + sqlite3_errstr(e.code()) + ")",
                               e.code());
  }
  if (result != "ok") {
    // quick_check lists one problem per line: report the first and how many there are, on one
    // line.
    const std::size_t lines =
        1 + static_cast<std::size_t>(std::count(result.begin(), result.end(), '\n'));
    std::string first = result.substr(0, result.find('\n'));
    if (lines > 1) first += "; " + std::to_string(lines) + " problems";
    throw sqlite::BadFileError(path() + ": workspace is corrupt (" + first + ")", SQLITE_CORRUPT);
  }
}

}  // namespace pipetune::db
