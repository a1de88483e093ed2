#include "db/import/nsys_schema.hpp"

namespace pipetune::db::import_detail {

namespace {

std::vector<std::string> names_of(const std::vector<std::string_view>& required,
                                  const std::vector<std::string_view>& optional) {
  std::vector<std::string> names(required.begin(), required.end());
  names.insert(names.end(), optional.begin(), optional.end());
  return names;
}

std::string select_sql(NsysSchema& schema, std::string_view table,
                       const std::vector<std::string_view>& required,
                       const std::vector<std::string_view>& optional, std::string_view where) {
  std::string sql = "SELECT " + schema.select_list(table, required, optional) + " FROM " +
                    quote_identifier(table);
  if (!where.empty()) sql += " WHERE " + std::string(where);
  return sql;
}

}  // namespace

NsysSchema::NsysSchema(const ReadOnlyDatabase& db) : db_(db), tables_(list_tables(db)) {}

bool NsysSchema::has_column(std::string_view table, std::string_view column) {
  auto it = columns_.find(std::string(table));
  if (it == columns_.end())
    it = columns_.emplace(std::string(table), list_columns(db_, table)).first;
  return it->second.count(column) != 0;
}

std::string NsysSchema::select_list(std::string_view table,
                                    const std::vector<std::string_view>& required,
                                    const std::vector<std::string_view>& optional) {
  std::string list;
  auto add = [&](std::string_view item) {
    if (!list.empty()) list += ", ";
    list += item;
  };
  for (std::string_view c : required) {
    if (!has_column(table, c))
      throw InputError(db_.file() + ": table " + std::string(table) + " has no column " +
                       std::string(c) + " (not an nsys export this importer understands)");
    add(quote_identifier(c));
  }
  for (std::string_view c : optional) add(has_column(table, c) ? quote_identifier(c) : "NULL");
  return list;
}

TableReader::TableReader(NsysSchema& schema, std::string_view table,
                         const std::vector<std::string_view>& required,
                         const std::vector<std::string_view>& optional, std::string_view where)
    : file_(schema.db().file()),
      table_(table),
      column_names_(names_of(required, optional)),
      statement_(schema.db(), select_sql(schema, table, required, optional, where),
                 "reading table " + std::string(table)) {}

bool TableReader::next() {
  if (!statement_.step()) return false;
  ++row_;
  return true;
}

std::optional<std::int64_t> TableReader::integer(int col) const {
  switch (statement_.type(col)) {
    case SQLITE_NULL:
      return std::nullopt;
    case SQLITE_INTEGER:
      return statement_.int64(col);
    case SQLITE_FLOAT: {
      const double v = statement_.real(col);
      if (v >= -9.2e18 && v <= 9.2e18) return static_cast<std::int64_t>(v);
      break;
    }
    default:
      break;
  }
  const std::string found = statement_.type(col) == SQLITE_TEXT
                                ? "text '" + std::string(text(col).substr(0, 40)) + "'"
                                : std::string("a non-integer value");
  throw InputError(file_ + ": table " + table_ + " column " +
                   column_names_.at(static_cast<std::size_t>(col)) + " row " +
                   std::to_string(row_) + ": expected an integer, found " + found);
}

std::unordered_map<std::int64_t, std::string> read_string_ids(NsysSchema& schema) {
  std::unordered_map<std::int64_t, std::string> strings;
  if (!schema.has_table("StringIds")) return strings;
  TableReader r(schema, "StringIds", {"id", "value"}, {});
  while (r.next()) {
    if (auto id = r.integer(0)) strings.emplace(*id, std::string(r.text(1)));
  }
  return strings;
}

}  // namespace pipetune::db::import_detail
