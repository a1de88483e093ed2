#include "db/store/sqlite_util.hpp"

#include <cstring>
#include <string>
#include <utility>

namespace pipetune::db::sqlite {

namespace {

// "run_writer.cpp" from a full source path: messages stay one short line.
std::string_view base_name(const char* file) {
  std::string_view f(file);
  const auto slash = f.find_last_of('/');
  return slash == std::string_view::npos ? f : f.substr(slash + 1);
}

// SQL or call text on one line, cut to a readable length.
std::string one_line(std::string_view what) {
  std::string out;
  out.reserve(std::min<std::size_t>(what.size(), 96));
  bool space = false;
  for (char c : what) {
    const bool ws = c == ' ' || c == '\n' || c == '\t' || c == '\r';
    if (ws) {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
    if (out.size() >= 90) {
      out += "...";
      break;
    }
  }
  return out;
}

// Whether SQLite's own check finds the database damaged (raw API: called while throwing).
bool reports_damage(sqlite3* db) {
  sqlite3_stmt* check = nullptr;
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check(1)", -1, &check, nullptr) != SQLITE_OK) {
    sqlite3_finalize(check);
    return false;
  }
  const int rc = sqlite3_step(check);
  bool damaged = (rc & 0xff) == SQLITE_CORRUPT || (rc & 0xff) == SQLITE_NOTADB;
  if (rc == SQLITE_ROW) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(check, 0));
    damaged = text == nullptr || std::string_view(text) != "ok";
  }
  sqlite3_finalize(check);
  return damaged;
}

}  // namespace

bool is_busy(int code) {
  const int primary = code & 0xff;
  return primary == SQLITE_BUSY || primary == SQLITE_LOCKED;
}

void throw_error(sqlite3* db, int code, std::string_view db_path, std::string_view what,
                 const char* file, int line) {
  const int primary = code & 0xff;
  std::string path(db_path.empty() ? std::string_view("sqlite") : db_path);
  if (primary == SQLITE_NOTADB) throw BadFileError(path + ": file is not a database", code);
  if (primary == SQLITE_CORRUPT)
    throw BadFileError(path + ": database is corrupt (" + sqlite3_errstr(code) + ")", code);
  // A damaged record can claim a value SQLite cannot allocate (up to 2 GiB): "out of memory"
  // from a file SQLite's own check finds damaged is the damage, not this machine's memory.
  if (primary == SQLITE_NOMEM && db != nullptr && reports_damage(db))
    throw BadFileError(path + ": database is corrupt (a damaged record claims more memory than " +
                           "can be allocated)",
                       SQLITE_CORRUPT);
  // The connection's message is the detailed one when it belongs to this failure.
  std::string message = sqlite3_errstr(code);
  if (db != nullptr && sqlite3_extended_errcode(db) == code) message = sqlite3_errmsg(db);
  // An I/O failure says little by itself ("disk I/O error"): say which operation failed, and
  // the operating system's reason when SQLite kept it.
  if (primary == SQLITE_IOERR && db != nullptr) {
    const int extended = sqlite3_extended_errcode(db);
    if (extended == SQLITE_IOERR_WRITE)
      message += ": a write failed (disk full, a file-size limit or quota, or a device error)";
    else if (extended == SQLITE_IOERR_FSYNC)
      message += ": flushing to the device failed";
    else if (extended == SQLITE_IOERR_READ || extended == SQLITE_IOERR_SHORT_READ)
      message += ": a read failed";
    if (const int os_error = sqlite3_system_errno(db); os_error != 0)
      message += std::string(" (") + std::strerror(os_error) + ")";
  }
  throw Error(path + ": " + one_line(what) + ": " + message + " [" + std::string(base_name(file)) +
                  ":" + std::to_string(line) + "]",
              code, message);
}

// --- Statement ---

Statement::Statement(Connection& connection, std::string_view sql, bool persistent,
                     std::source_location where)
    : connection_(&connection) {
  const int rc = sqlite3_prepare_v3(connection.handle(), sql.data(), static_cast<int>(sql.size()),
                                    persistent ? SQLITE_PREPARE_PERSISTENT : 0, &stmt_, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt_);
    stmt_ = nullptr;
    connection.fail(rc, sql, where.file_name(), static_cast<int>(where.line()));
  }
}

Statement::~Statement() {
  sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)), connection_(other.connection_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
    connection_ = other.connection_;
  }
  return *this;
}

void Statement::fail(int code, std::string_view what, const char* file, int line) const {
  const char* sql = stmt_ != nullptr ? sqlite3_sql(stmt_) : nullptr;
  std::string text(what);
  if (sql != nullptr) text += std::string(" in ") + sql;
  connection_->fail(code, text, file, line);
}

Statement& Statement::bind(int index, std::int64_t value) {
  const int rc = sqlite3_bind_int64(stmt_, index, value);
  if (rc != SQLITE_OK) fail(rc, "bind " + std::to_string(index), __FILE__, __LINE__);
  return *this;
}

Statement& Statement::bind(int index, double value) {
  const int rc = sqlite3_bind_double(stmt_, index, value);
  if (rc != SQLITE_OK) fail(rc, "bind " + std::to_string(index), __FILE__, __LINE__);
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  const int rc =
      sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) fail(rc, "bind " + std::to_string(index), __FILE__, __LINE__);
  return *this;
}

Statement& Statement::bind_blob(int index, const void* data, std::size_t bytes) {
  const int rc =
      sqlite3_bind_blob64(stmt_, index, data, static_cast<sqlite3_uint64>(bytes), SQLITE_TRANSIENT);
  if (rc != SQLITE_OK) fail(rc, "bind " + std::to_string(index), __FILE__, __LINE__);
  return *this;
}

Statement& Statement::bind_static_blob(int index, const void* data, std::size_t bytes) {
  const int rc =
      sqlite3_bind_blob64(stmt_, index, data, static_cast<sqlite3_uint64>(bytes), SQLITE_STATIC);
  if (rc != SQLITE_OK) fail(rc, "bind " + std::to_string(index), __FILE__, __LINE__);
  return *this;
}

Statement& Statement::bind_null(int index) {
  const int rc = sqlite3_bind_null(stmt_, index);
  if (rc != SQLITE_OK) fail(rc, "bind " + std::to_string(index), __FILE__, __LINE__);
  return *this;
}

bool Statement::step(std::source_location where) {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // sqlite3_reset returns the same error; reset so the statement can be used again.
  sqlite3_reset(stmt_);
  fail(rc, "step", where.file_name(), static_cast<int>(where.line()));
}

void Statement::run(std::source_location where) {
  while (step(where)) {
  }
  reset();
}

void Statement::reset() {
  sqlite3_reset(stmt_);
}

std::string Statement::column_text(int column) const {
  return std::string(column_text_view(column));
}

std::string_view Statement::column_text_view(int column) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
  if (text == nullptr) return {};
  return {text, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column))};
}

std::string literal_file_name(const std::string& path) {
  if (path.empty())
    throw InputError("the database file name is empty (SQLite would use a temporary database)");
  return path.front() == '/' ? path : "./" + path;
}

// --- Connection ---

Connection::Connection(const std::string& name, int flags, std::source_location where)
    : Connection(name, name, flags, where) {}

Connection::Connection(const std::string& name, const std::string& shown, int flags,
                       std::source_location where)
    : path_(shown) {
  const int rc = sqlite3_open_v2(name.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3* db = std::exchange(db_, nullptr);
    try {
      throw_error(db, rc, path_, "open", where.file_name(), static_cast<int>(where.line()));
    } catch (...) {
      sqlite3_close_v2(db);
      throw;
    }
  }
  sqlite3_extended_result_codes(db_, 1);
}

Connection Connection::open_file(const std::string& path, int flags, std::source_location where) {
  return Connection(literal_file_name(path), path, flags, where);
}

Connection Connection::open_immutable(const std::string& path, std::source_location where) {
  // Immutability is a URI parameter: the file name made a URI path, with what would end it
  // ('?', '#') and '%' itself percent-encoded. "file://" and an empty authority before an
  // absolute path, so that one starting "//" is not read as a host.
  const std::string name = literal_file_name(path);
  std::string uri = name.front() == '/' ? "file://" : "file:";
  for (const char c : name) {
    if (c == '?' || c == '#' || c == '%') {
      static constexpr char kHex[] = "0123456789ABCDEF";
      uri += '%';
      uri += kHex[(static_cast<unsigned char>(c) >> 4) & 0xF];
      uri += kHex[static_cast<unsigned char>(c) & 0xF];
    } else {
      uri += c;
    }
  }
  uri += "?immutable=1";
  return Connection(uri, path, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI, where);
}

Connection::~Connection() {
  // Statements are owned by their users and finalized first; close_v2 copes with stragglers.
  sqlite3_close_v2(db_);
}

Connection::Connection(Connection&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)),
      path_(std::move(other.path_)),
      busy_timeout_(other.busy_timeout_) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
    busy_timeout_ = other.busy_timeout_;
  }
  return *this;
}

void Connection::exec(std::string_view sql, std::source_location where) {
  const std::string text(sql);
  char* message = nullptr;
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message);
  sqlite3_free(message);  // sqlite3_errmsg still holds it
  if (rc != SQLITE_OK) fail(rc, sql, where.file_name(), static_cast<int>(where.line()));
}

std::int64_t Connection::query_int64(std::string_view sql, std::int64_t fallback,
                                     std::source_location where) {
  Statement s(*this, sql, false, where);
  return s.step(where) && !s.column_is_null(0) ? s.column_int64(0) : fallback;
}

std::string Connection::query_text(std::string_view sql, std::source_location where) {
  Statement s(*this, sql, false, where);
  return s.step(where) ? s.column_text(0) : std::string();
}

void Connection::set_busy_timeout(std::chrono::milliseconds timeout) {
  PIPETUNE_SQLITE_CHECK(db_, path_, sqlite3_busy_timeout(db_, static_cast<int>(timeout.count())));
  busy_timeout_ = timeout;
}

// --- Transaction ---

Transaction::Transaction(Connection& connection) : connection_(connection) {
  retry_busy(connection_, [&] { connection_.exec("BEGIN IMMEDIATE"); });
}

Transaction::~Transaction() {
  if (open_ && sqlite3_get_autocommit(connection_.handle()) == 0)
    sqlite3_exec(connection_.handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  retry_busy(connection_, [&] { connection_.exec("COMMIT"); });
  open_ = false;
}

ReadSnapshot::ReadSnapshot(Connection& connection) : connection_(connection) {
  if (sqlite3_get_autocommit(connection_.handle()) == 0) return;
  connection_.exec("BEGIN");
  began_ = true;
}

ReadSnapshot::~ReadSnapshot() {
  if (began_ && sqlite3_get_autocommit(connection_.handle()) == 0)
    sqlite3_exec(connection_.handle(), "COMMIT", nullptr, nullptr, nullptr);
}

}  // namespace pipetune::db::sqlite
