// RAII wrappers over the SQLite C API (a connection, a prepared statement, a write transaction)
// and a checked-call macro. Every failure throws with the database path, what was attempted,
// SQLite's message and the C++ file and line of the call:
//   - BadFileError (an InputError) when the file is not a database or is corrupt
//     (SQLITE_NOTADB, SQLITE_CORRUPT): that is bad input, not a runtime failure;
//   - Error (a std::runtime_error) for everything else (I/O, full disk, busy past the timeout).
// General purpose: nothing here knows pipetune's schema.
#pragma once

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <source_location>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

#include "engine/errors.hpp"

namespace pipetune::db::sqlite {

// A SQLite call failed; code() is the extended result code, message() SQLite's own words for it
// (kept apart from what(): the connection's message is gone once a transaction rolls back).
class Error : public std::runtime_error {
 public:
  Error(const std::string& what, int code, std::string message)
      : std::runtime_error(what), code_(code), message_(std::move(message)) {}
  int code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  int code_;
  std::string message_;
};

// The file is not a SQLite database, or it is corrupt.
class BadFileError : public InputError {
 public:
  BadFileError(const std::string& what, int code) : InputError(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// True for the primary codes that mean "try again later" (SQLITE_BUSY, SQLITE_LOCKED).
bool is_busy(int code);

// Throws BadFileError or Error. `db` may be null (then SQLite's message for `code` is used);
// `db_path` names the database in the message.
[[noreturn]] void throw_error(sqlite3* db, int code, std::string_view db_path,
                              std::string_view what, const char* file, int line);

// PIPETUNE_SQLITE_CHECK(handle, path, call): runs `call` (returning an SQLite result code) and
// throws unless it returned SQLITE_OK; the message names this file and line.
#define PIPETUNE_SQLITE_CHECK(handle, path, call)                                                 \
  do {                                                                                            \
    const int pipetune_sqlite_rc_ = (call);                                                       \
    if (pipetune_sqlite_rc_ != SQLITE_OK)                                                         \
      ::pipetune::db::sqlite::throw_error((handle), pipetune_sqlite_rc_, (path), #call, __FILE__, \
                                          __LINE__);                                              \
  } while (0)

class Connection;

// A prepared statement. Parameters are 1-based (as in SQLite), columns 0-based.
class Statement {
 public:
  Statement() = default;
  Statement(Connection& connection, std::string_view sql, bool persistent,
            std::source_location where = std::source_location::current());
  ~Statement();
  Statement(Statement&& other) noexcept;
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view text);  // copied (SQLITE_TRANSIENT)
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, int value) { return bind(index, std::int64_t{value}); }
  Statement& bind_blob(int index, const void* data, std::size_t bytes);  // copied
  Statement& bind_null(int index);
  Statement& bind_static_blob(int index, const void* data, std::size_t bytes);  // not copied

  // Steps once: true when a row is ready, false when done. Throws on error.
  bool step(std::source_location where = std::source_location::current());
  // Steps a statement that returns no rows, then resets it.
  void run(std::source_location where = std::source_location::current());
  void reset();  // keeps the bindings

  std::int64_t column_int64(int column) const { return sqlite3_column_int64(stmt_, column); }
  double column_double(int column) const { return sqlite3_column_double(stmt_, column); }
  bool column_is_null(int column) const {
    return sqlite3_column_type(stmt_, column) == SQLITE_NULL;
  }
  std::string column_text(int column) const;
  std::string_view column_text_view(int column) const;  // valid until the next step/reset
  // Pointer and size of a BLOB column, valid until the next step/reset.
  const void* column_blob(int column) const { return sqlite3_column_blob(stmt_, column); }
  std::size_t column_bytes(int column) const {
    return static_cast<std::size_t>(sqlite3_column_bytes(stmt_, column));
  }

  sqlite3_stmt* handle() const { return stmt_; }

 private:
  [[noreturn]] void fail(int code, std::string_view what, const char* file, int line) const;

  sqlite3_stmt* stmt_ = nullptr;
  Connection* connection_ = nullptr;
};

// What to give SQLite for the file at `path` so that it is read as nothing but a file name: a
// relative path gets "./" in front, so that neither "file:..." (a URI wherever SQLite is built
// with SQLITE_USE_URI, as Debian's is, whatever the open flags say) nor ":memory:" (a database
// in memory) is taken for anything else. InputError for an empty path (SQLite's temporary
// database, gone when closed).
std::string literal_file_name(const std::string& path);

// One database connection. Not thread-safe: use it from one thread at a time.
class Connection {
 public:
  Connection() = default;
  // flags: SQLITE_OPEN_* (SQLITE_OPEN_NOMUTEX is added). `name` goes to SQLite as it is
  // (":memory:", a URI with SQLITE_OPEN_URI); a user's path goes through open_file. Throws
  // BadFileError / Error.
  Connection(const std::string& name, int flags,
             std::source_location where = std::source_location::current());
  // The file at `path`, only ever a file: literal_file_name. InputError for an empty path.
  static Connection open_file(const std::string& path, int flags,
                              std::source_location where = std::source_location::current());
  // A file this process may not write (read-only file or folder): opened read-only as
  // immutable, so SQLite needs no lock, journal or WAL index beside it. Messages name `path`.
  static Connection open_immutable(const std::string& path,
                                   std::source_location where = std::source_location::current());
  ~Connection();
  Connection(Connection&& other) noexcept;
  Connection& operator=(Connection&& other) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Runs one or more statements that return nothing (DDL, PRAGMA ..., BEGIN/COMMIT).
  void exec(std::string_view sql, std::source_location where = std::source_location::current());
  Statement prepare(std::string_view sql, bool persistent = false,
                    std::source_location where = std::source_location::current()) {
    return Statement(*this, sql, persistent, where);
  }
  // The first column of the first row of `sql` as an integer; `fallback` when there is no row.
  std::int64_t query_int64(std::string_view sql, std::int64_t fallback = 0,
                           std::source_location where = std::source_location::current());
  std::string query_text(std::string_view sql,
                         std::source_location where = std::source_location::current());

  // Waits up to `timeout` for locks held by other connections (sqlite3_busy_timeout).
  void set_busy_timeout(std::chrono::milliseconds timeout);
  std::chrono::milliseconds busy_timeout() const { return busy_timeout_; }
  std::int64_t last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }
  bool read_only() const { return sqlite3_db_readonly(db_, "main") == 1; }

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  [[noreturn]] void fail(int code, std::string_view what, const char* file, int line) const {
    throw_error(db_, code, path_, what, file, line);
  }

 private:
  // Opens `name`; messages, from the open's own on, name `shown`.
  Connection(const std::string& name, const std::string& shown, int flags,
             std::source_location where);

  sqlite3* db_ = nullptr;
  std::string path_;
  std::chrono::milliseconds busy_timeout_{0};
};

// Runs fn() again while it throws Error with a busy code, for the cases where SQLite returns
// SQLITE_BUSY without calling the busy handler (WAL recovery, journal mode changes, a lock
// upgrade); gives up after the connection's busy timeout and rethrows.
template <class Fn>
auto retry_busy(const Connection& connection, Fn&& fn) -> decltype(fn()) {
  const auto deadline = std::chrono::steady_clock::now() + connection.busy_timeout();
  auto pause = std::chrono::milliseconds(1);
  for (;;) {
    try {
      return fn();
    } catch (const Error& e) {
      if (!is_busy(e.code()) || std::chrono::steady_clock::now() >= deadline) throw;
    }
    sqlite3_sleep(static_cast<int>(pause.count()));
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

// A write transaction (BEGIN IMMEDIATE, so the write lock is taken up front and waits through
// the busy handler instead of failing on upgrade). Rolls back unless commit() was called.
class Transaction {
 public:
  explicit Transaction(Connection& connection);
  ~Transaction();
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  void commit();

 private:
  Connection& connection_;
  bool open_ = true;
};

// A read snapshot: one deferred transaction around several reads, so they see one state of
// the database and take SQLite's shared lock once instead of once per statement. Nothing when
// the connection is already inside a transaction. Ended (COMMIT, which writes nothing) when
// destroyed.
class ReadSnapshot {
 public:
  explicit ReadSnapshot(Connection& connection);
  ~ReadSnapshot();
  ReadSnapshot(const ReadSnapshot&) = delete;
  ReadSnapshot& operator=(const ReadSnapshot&) = delete;

 private:
  Connection& connection_;
  bool began_ = false;
};

}  // namespace pipetune::db::sqlite
