// Read-only SQLite access for the importers (private to db/import): RAII handles whose every
// failure is an InputError naming the file and what was being read, plus schema probing.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>

#include "db/store/sqlite_util.hpp"
#include "engine/errors.hpp"

namespace pipetune::db::import_detail {

class ReadOnlyDatabase {
 public:
  explicit ReadOnlyDatabase(const std::filesystem::path& file) : file_(file.string()) {
    if (file_.empty()) throw InputError("the file name is empty");
    const int rc = sqlite3_open_v2(sqlite::literal_file_name(file_).c_str(), &db_,
                                   SQLITE_OPEN_READONLY, nullptr);
    if (rc != SQLITE_OK) {
      const std::string why = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
      sqlite3_close(db_);
      db_ = nullptr;
      throw InputError(file_ + ": cannot open as SQLite: " + why);
    }
  }
  ~ReadOnlyDatabase() { sqlite3_close(db_); }
  ReadOnlyDatabase(const ReadOnlyDatabase&) = delete;
  ReadOnlyDatabase& operator=(const ReadOnlyDatabase&) = delete;

  sqlite3* handle() const { return db_; }
  const std::string& file() const { return file_; }

  [[noreturn]] void fail(std::string_view context) const {
    throw InputError(file_ + ": " + std::string(context) + ": " + sqlite3_errmsg(db_));
  }

 private:
  std::string file_;
  sqlite3* db_ = nullptr;
};

class Statement {
 public:
  // `context` names what the statement reads ("table CUPTI_ACTIVITY_KIND_KERNEL") in errors.
  Statement(const ReadOnlyDatabase& db, const std::string& sql, std::string context)
      : db_(db), context_(std::move(context)) {
    if (sqlite3_prepare_v2(db.handle(), sql.c_str(), -1, &stmt_, nullptr) != SQLITE_OK)
      db.fail(context_);
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  void bind_text(int index, std::string_view text) {
    if (sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()),
                          SQLITE_TRANSIENT) != SQLITE_OK)
      db_.fail(context_);
  }

  // True while a row is available; a read error (a truncated or corrupt file) is an InputError.
  bool step() {
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    db_.fail(context_);
  }

  bool is_null(int col) const { return sqlite3_column_type(stmt_, col) == SQLITE_NULL; }
  int type(int col) const { return sqlite3_column_type(stmt_, col); }
  std::int64_t int64(int col) const { return sqlite3_column_int64(stmt_, col); }
  double real(int col) const { return sqlite3_column_double(stmt_, col); }
  std::string_view text(int col) const {
    const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
    if (p == nullptr) return {};
    return {p, static_cast<std::size_t>(sqlite3_column_bytes(stmt_, col))};
  }

 private:
  const ReadOnlyDatabase& db_;
  std::string context_;
  sqlite3_stmt* stmt_ = nullptr;
};

// "name" with embedded quotes doubled: an identifier safe to splice into SQL.
inline std::string quote_identifier(std::string_view name) {
  std::string q = "\"";
  for (char c : name) {
    if (c == '"') q += '"';
    q += c;
  }
  q += '"';
  return q;
}

// Tables and views in the file. A file that is not SQLite fails here ("file is not a database").
inline std::set<std::string, std::less<>> list_tables(const ReadOnlyDatabase& db) {
  std::set<std::string, std::less<>> names;
  Statement st(db, "SELECT name FROM sqlite_master WHERE type IN ('table','view')",
               "not readable as SQLite (reading the table list)");
  while (st.step()) names.emplace(st.text(0));
  return names;
}

inline std::set<std::string, std::less<>> list_columns(const ReadOnlyDatabase& db,
                                                       std::string_view table) {
  std::set<std::string, std::less<>> names;
  Statement st(db, "SELECT name FROM pragma_table_info(?1)",
               "reading the columns of " + std::string(table));
  st.bind_text(1, table);
  while (st.step()) names.emplace(st.text(0));
  return names;
}

}  // namespace pipetune::db::import_detail
