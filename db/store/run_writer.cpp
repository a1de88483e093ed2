#include "db/store/run_writer.hpp"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <thread>
#include <variant>

#include "db/store/process_identity.hpp"
#include "db/store/run_name.hpp"
#include "db/store/schema.hpp"
#include "db/store/sqlite_util.hpp"
#include "db/store/trace_inserter.hpp"
#include "engine/errors.hpp"

namespace pipetune::db {

namespace {

std::int64_t unix_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void check_json(const std::string& json, const std::string& what) {
  if (!json.empty() && !nlohmann::json::accept(json)) throw InputError(what + " is not valid JSON");
}

void mark_failed(sqlite::Connection& db, std::int64_t run_id) noexcept {
  try {
    sqlite::Transaction tx(db);
    sqlite::Statement s = db.prepare(
        "UPDATE runs SET status = 'failed', ended_unix_ns = ?2 WHERE id = ?1 AND status = "
        "'running'");
    s.bind(1, run_id).bind(2, unix_now_ns()).run();
    tx.commit();
  } catch (...) {
    // Best effort: the failure that got us here (a full disk, a lost file) may block this too.
  }
}

}  // namespace

void validate_trace_part(const profiler::Trace& part) {
  const auto bad = [](const std::string& what) { throw InputError("trace part: " + what); };
  for (std::size_t i = 0; i < part.lanes.size(); ++i) {
    if (static_cast<int>(part.lanes[i].stream) >= profiler::kStreamCount)
      bad("lane " + std::to_string(i) + " has an unknown stream");
  }
  for (std::size_t i = 0; i < part.spans.size(); ++i) {
    const profiler::Span& s = part.spans[i];
    const std::string id = "span " + std::to_string(i);
    if (s.lane < 0 || static_cast<std::size_t>(s.lane) >= part.lanes.size())
      bad(id + " refers to lane " + std::to_string(s.lane) + " of " +
          std::to_string(part.lanes.size()));
    if (s.name != 0 && s.name >= part.names.size())
      bad(id + " refers to name " + std::to_string(s.name) + " of " +
          std::to_string(part.names.size()));
    if (static_cast<int>(s.kind) >= profiler::kSpanKindCount) bad(id + " has an unknown kind");
    if (s.end_ns < s.start_ns)
      bad(id + " ends before it starts (start " + std::to_string(s.start_ns) + " ns, end " +
          std::to_string(s.end_ns) + " ns)");
  }
  for (std::size_t i = 0; i < part.memory.size(); ++i) {
    if (static_cast<int>(part.memory[i].category) >= profiler::kMemoryCategoryCount)
      bad("memory sample " + std::to_string(i) + " has an unknown category");
  }
  for (std::size_t i = 0; i < part.counters.size(); ++i) {
    const std::uint32_t name = part.counters[i].name;
    if (name != 0 && name >= part.names.size())
      bad("counter " + std::to_string(i) + " refers to name " + std::to_string(name) + " of " +
          std::to_string(part.names.size()));
  }
}

struct RunWriter::State {
  struct SummaryUpdate {
    std::string json;
  };
  using Item = std::variant<profiler::Trace, std::vector<profiler::KernelRecord>, SummaryUpdate>;

  WriterOptions options;
  sqlite::Connection db;
  std::int64_t run_id = 0;
  std::unique_ptr<TraceInserter> inserter;

  std::mutex mutex;
  std::condition_variable wake;  // work for the writer thread
  std::condition_variable done;  // a flush completed, or the thread failed
  std::deque<Item> queue;
  std::size_t queued_rows = 0;
  std::chrono::steady_clock::time_point oldest;  // when the oldest queued item came
  std::uint64_t flush_requested = 0;
  std::uint64_t flush_done = 0;
  bool stop = false;
  bool finished = false;
  std::exception_ptr error;
  std::thread thread;

  void enqueue(Item item, std::size_t rows);
  void writer_loop();
  void commit_items(std::deque<Item>& items);
};

void RunWriter::State::enqueue(Item item, std::size_t rows) {
  std::lock_guard lock(mutex);
  if (error) std::rethrow_exception(error);
  if (finished)
    throw std::logic_error("RunWriter: run " + std::to_string(run_id) + " is already finished");
  const bool was_empty = queue.empty();
  if (was_empty) oldest = std::chrono::steady_clock::now();
  queue.push_back(std::move(item));
  queued_rows += rows;
  if (was_empty || queued_rows >= options.batch_rows) wake.notify_one();
}

void RunWriter::State::writer_loop() {
  std::unique_lock lock(mutex);
  for (;;) {
    const auto due = [&] {
      return stop || flush_requested > flush_done || queued_rows >= options.batch_rows;
    };
    while (!due()) {
      if (queue.empty()) {
        wake.wait(lock);
      } else if (wake.wait_until(lock, oldest + options.batch_interval) ==
                 std::cv_status::timeout) {
        break;
      }
    }
    std::deque<Item> items;
    items.swap(queue);
    queued_rows = 0;
    const std::uint64_t flush_target = flush_requested;
    const bool stopping = stop;
    const bool failed = error != nullptr;
    lock.unlock();

    std::exception_ptr failure;
    if (!failed && !items.empty()) {
      try {
        commit_items(items);
      } catch (...) {
        failure = std::current_exception();
      }
    }
    items.clear();  // free the parts outside the lock
    if (failure) mark_failed(db, run_id);

    lock.lock();
    if (failure && !error) error = failure;
    flush_done = flush_target;
    done.notify_all();
    if (stopping && queue.empty()) return;
  }
}

void RunWriter::State::commit_items(std::deque<Item>& items) {
  std::optional<sqlite::Transaction> tx;
  std::size_t rows = 0;
  for (Item& item : items) {
    if (!tx) tx.emplace(db);
    if (auto* part = std::get_if<profiler::Trace>(&item)) {
      rows += inserter->add_part(*part);
      *part = profiler::Trace{};  // release its memory early
    } else if (auto* kernels = std::get_if<std::vector<profiler::KernelRecord>>(&item)) {
      rows += inserter->add_kernels(*kernels);
      kernels->clear();
      kernels->shrink_to_fit();
    } else {
      inserter->set_summary_json(std::get<SummaryUpdate>(item).json);
    }
    if (rows >= options.batch_rows) {
      inserter->write_pending(unix_now_ns());
      tx->commit();
      tx.reset();
      rows = 0;
    }
  }
  if (tx) {
    inserter->write_pending(unix_now_ns());
    tx->commit();
  }
}

RunWriter::RunWriter(const std::string& path, RunInfo info, WriterOptions options)
    : state_(std::make_unique<State>()) {
  check_run_name(info.name);  // before the name goes into any message or row
  check_json(info.plan_json, "run '" + info.name + "': plan_json");
  check_json(info.specs_json, "run '" + info.name + "': specs_json");
  if (options.batch_rows == 0) options.batch_rows = 1;
  State& s = *state_;
  s.options = options;
  s.db = open_workspace_db(path, OpenMode::Create);
  if (options.check_integrity) {
    std::string verdict;
    try {
      sqlite::Statement check = s.db.prepare("PRAGMA quick_check(3)");
      while (check.step()) {
        std::string line = check.column_text(0);
        for (char& c : line)
          if (c == '\n') c = ' ';  // one line: quick_check writes several per row
        const std::string banner = "*** in database main *** ";
        if (line.rfind(banner, 0) == 0) line.erase(0, banner.size());
        verdict += (verdict.empty() ? "" : "; ") + line;
      }
    } catch (const sqlite::Error& e) {
      verdict = e.what();
    }
    if (verdict != "ok")
      throw InputError({"db"}, path + ": workspace is corrupt (" + verdict + "): nothing was run");
  }
  s.db.exec("PRAGMA cache_size = -65536");  // 64 MiB: block and index pages of every lane stay hot
  // Checkpoint the WAL every 64 MiB rather than every 4 MiB: fewer fsyncs while streaming.
  s.db.exec("PRAGMA wal_autocheckpoint = 16384");

  const ProcessIdentity self = current_process();
  sqlite::Transaction tx(s.db);
  sqlite::Statement insert = s.db.prepare(
      "INSERT INTO runs(kind, name, plan_json, specs_json, status, started_unix_ns, writer_host, "
      "writer_boot_id, writer_pid, writer_start_ticks) VALUES (?1, ?2, ?3, ?4, 'running', ?5, ?6, "
      "?7, ?8, ?9)");
  insert.bind(1, trace_kind_name(info.kind)).bind(2, info.name);
  if (info.plan_json.empty())
    insert.bind_null(3);
  else
    insert.bind(3, info.plan_json);
  if (info.specs_json.empty())
    insert.bind_null(4);
  else
    insert.bind(4, info.specs_json);
  insert.bind(5, unix_now_ns())
      .bind(6, self.host)
      .bind(7, self.boot_id)
      .bind(8, self.pid)
      .bind(9, self.start_ticks)
      .run();
  s.run_id = s.db.last_insert_rowid();
  s.inserter = std::make_unique<TraceInserter>(s.db, s.run_id);
  tx.commit();

  s.thread = std::thread([&s] { s.writer_loop(); });
}

RunWriter::~RunWriter() {
  if (!state_) return;
  bool finished = false;
  {
    std::lock_guard lock(state_->mutex);
    finished = state_->finished;
  }
  if (!finished) {
    try {
      finish(RunStatus::Failed);
    } catch (...) {
      // A destructor must not throw; the run is marked failed where the database allows it.
    }
  }
  if (state_->thread.joinable()) state_->thread.join();
}

std::int64_t RunWriter::run_id() const {
  return state_->run_id;
}

void RunWriter::append(const profiler::Trace& part) {
  validate_trace_part(part);
  const std::size_t rows =
      part.spans.size() + part.memory.size() + part.counters.size() + part.steps.size();
  state_->enqueue(State::Item(std::in_place_type<profiler::Trace>, part), rows);
}

void RunWriter::append(profiler::Trace&& part) {
  validate_trace_part(part);
  const std::size_t rows =
      part.spans.size() + part.memory.size() + part.counters.size() + part.steps.size();
  state_->enqueue(State::Item(std::in_place_type<profiler::Trace>, std::move(part)), rows);
}

void RunWriter::append_kernels(std::vector<profiler::KernelRecord> kernels) {
  const std::size_t rows = kernels.size();
  state_->enqueue(State::Item(std::move(kernels)), rows);
}

void RunWriter::set_summary_json(std::string json) {
  check_json(json, "run " + std::to_string(state_->run_id) + ": summary JSON");
  state_->enqueue(State::Item(State::SummaryUpdate{std::move(json)}), 1);
}

void RunWriter::flush() {
  State& s = *state_;
  std::unique_lock lock(s.mutex);
  if (s.error) std::rethrow_exception(s.error);
  if (s.finished)
    throw std::logic_error("RunWriter: run " + std::to_string(s.run_id) + " is already finished");
  const std::uint64_t target = ++s.flush_requested;
  s.wake.notify_one();
  s.done.wait(lock, [&] { return s.flush_done >= target || s.error != nullptr; });
  if (s.error) std::rethrow_exception(s.error);
}

void RunWriter::finish(RunStatus status) {
  if (status == RunStatus::Running)
    throw std::invalid_argument("RunWriter::finish: the final status cannot be running");
  State& s = *state_;
  {
    std::lock_guard lock(s.mutex);
    if (s.finished)
      throw std::logic_error("RunWriter: run " + std::to_string(s.run_id) + " is already finished");
    s.finished = true;
    s.stop = true;
    s.wake.notify_one();
  }
  s.thread.join();  // the thread committed everything queued, or failed
  if (s.error) std::rethrow_exception(s.error);  // the thread marked the run failed
  try {
    sqlite::Transaction tx(s.db);
    const std::int64_t now = unix_now_ns();
    s.inserter->rebuild_unordered_lanes(now);
    s.inserter->write_block_index();
    sqlite::Statement update =
        s.db.prepare("UPDATE runs SET status = ?2, ended_unix_ns = ?3 WHERE id = ?1");
    update.bind(1, s.run_id).bind(2, run_status_name(status)).bind(3, now).run();
    tx.commit();
  } catch (...) {
    s.error = std::current_exception();
    mark_failed(s.db, s.run_id);
    throw;
  }
  // Close the file now: the last connection checkpoints the WAL into the database.
  s.inserter.reset();
  s.db = sqlite::Connection();
}

std::int64_t store_trace(const std::string& path, RunInfo info, const profiler::Trace& trace,
                         std::vector<profiler::KernelRecord> kernels) {
  validate_trace_part(trace);
  WriterOptions options;
  RunWriter writer(path, std::move(info), options);
  // Slices of batch_rows spans keep transactions and the WAL bounded for big traces. The first
  // slice carries every lane and name (so they keep the trace's order, idle lanes included); the
  // others only those their spans use, so that the copies stay linear in the trace (a profile of
  // a million ranks has a million lanes). The other records go with the last slice.
  const std::size_t slice = options.batch_rows;
  std::vector<std::int32_t> lane_in_part(trace.lanes.size(), -1);
  std::vector<std::uint32_t> name_in_part(trace.names.size(), 0);
  std::vector<std::size_t> lane_stamp(trace.lanes.size(), 0), name_stamp(trace.names.size(), 0);
  std::size_t from = 0, part_no = 0;
  do {
    ++part_no;
    const std::size_t to = std::min(trace.spans.size(), from + slice);
    const bool first = from == 0, last = to == trace.spans.size();
    profiler::Trace part;
    part.kind = trace.kind;
    if (first) {
      part.lanes = trace.lanes;
      part.names = trace.names;
    }
    const auto lane_of = [&](std::int32_t lane) {
      if (first) return lane;
      const auto l = static_cast<std::size_t>(lane);
      if (lane_stamp[l] != part_no) {
        lane_stamp[l] = part_no;
        lane_in_part[l] = static_cast<std::int32_t>(part.lanes.size());
        part.lanes.push_back(trace.lanes[l]);
      }
      return lane_in_part[l];
    };
    const auto name_of = [&](std::uint32_t name) {
      if (first || name == 0) return name;  // names[0] is the empty name in every part
      if (name_stamp[name] != part_no) {
        name_stamp[name] = part_no;
        name_in_part[name] = static_cast<std::uint32_t>(part.names.size());
        part.names.push_back(trace.names[name]);
      }
      return name_in_part[name];
    };
    part.spans.reserve(to - from);
    for (std::size_t i = from; i < to; ++i) {
      profiler::Span s = trace.spans[i];
      s.lane = lane_of(s.lane);
      s.name = name_of(s.name);
      part.spans.push_back(s);
    }
    if (last) {
      part.memory = trace.memory;
      part.counters = trace.counters;
      for (profiler::CounterSample& c : part.counters) c.name = name_of(c.name);
      part.steps = trace.steps;
    }
    writer.append(std::move(part));
    from = to;
  } while (from < trace.spans.size());
  if (!kernels.empty()) writer.append_kernels(std::move(kernels));
  writer.finish(RunStatus::Complete);
  return writer.run_id();
}

}  // namespace pipetune::db
