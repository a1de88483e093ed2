// The parts of an nsys export the importer reads, as plain rows (private to db/import): probing
// of tables and columns, string tables, and typed reads whose errors name file, table and column.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "db/import/sqlite_read.hpp"

namespace pipetune::db::import_detail {

// globalPid / globalTid: PID = (id >> 24) & 0xFFFFFF, TID = id & 0xFFFFFF; higher bits tell hosts
// apart, so a process is keyed by its id with the TID bits cleared.
inline std::int64_t process_key(std::int64_t global_id) {
  return global_id & ~std::int64_t{0xFFFFFF};
}
inline std::int32_t pid_of(std::int64_t global_id) {
  return static_cast<std::int32_t>((global_id >> 24) & 0xFFFFFF);
}
inline std::int32_t tid_of(std::int64_t global_id) {
  return static_cast<std::int32_t>(global_id & 0xFFFFFF);
}

class NsysSchema {
 public:
  explicit NsysSchema(const ReadOnlyDatabase& db);

  const ReadOnlyDatabase& db() const { return db_; }
  bool has_table(std::string_view table) const { return tables_.count(table) != 0; }
  bool has_column(std::string_view table, std::string_view column);

  // "a, "end", NULL" for a SELECT over `table`: required columns must exist (else InputError
  // naming table and column), missing optional ones read as NULL.
  std::string select_list(std::string_view table, const std::vector<std::string_view>& required,
                          const std::vector<std::string_view>& optional);

 private:
  const ReadOnlyDatabase& db_;
  std::set<std::string, std::less<>> tables_;
  std::unordered_map<std::string, std::set<std::string, std::less<>>> columns_;
};

// A row cursor over one table whose integer reads check the stored type: NULL reads as nullopt,
// text or blob where an integer belongs is an InputError naming file, table, column and row.
class TableReader {
 public:
  TableReader(NsysSchema& schema, std::string_view table,
              const std::vector<std::string_view>& required,
              const std::vector<std::string_view>& optional, std::string_view where = {});

  bool next();
  std::optional<std::int64_t> integer(int col) const;
  std::int64_t integer_or(int col, std::int64_t fallback) const {
    return integer(col).value_or(fallback);
  }
  std::string_view text(int col) const { return statement_.text(col); }
  bool is_null(int col) const { return statement_.is_null(col); }
  std::int64_t row() const { return row_; }

 private:
  std::string file_;
  std::string table_;
  std::vector<std::string> column_names_;
  Statement statement_;
  std::int64_t row_ = 0;
};

// StringIds (id -> value); empty when the table is absent.
std::unordered_map<std::int64_t, std::string> read_string_ids(NsysSchema& schema);

}  // namespace pipetune::db::import_detail
