#include "engine/spec/toml_reader.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <system_error>

#include "engine/errors.hpp"
#include "engine/spec/presets.hpp"

namespace pipetune::spec::detail {

namespace {

[[noreturn]] void throw_parse_error(const toml::parse_error& e, std::string_view source) {
  const auto& begin = e.source().begin;
  throw SpecError(std::string(source) + ":" + std::to_string(begin.line) + ":" +
                  std::to_string(begin.column) + ": invalid TOML: " + std::string(e.description()));
}

}  // namespace

toml::table parse_toml_file(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec))
    throw SpecError(path.string() + ": " + not_a_file_reason(path));
  // Spec files are a few KiB; a huge one is a mistake (or hostile), never a model.
  constexpr std::uintmax_t kMaxSpecBytes = std::uintmax_t{16} << 20;
  const std::uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxSpecBytes)
    throw SpecError(path.string() + ": " + std::to_string(size) +
                    " bytes is too large for a spec file (at most 16 MiB)");
  try {
    return toml::parse_file(path.string());
  } catch (const toml::parse_error& e) {
    throw_parse_error(e, path.string());
  }
}

toml::table parse_toml_text(std::string_view text, std::string_view source) {
  try {
    return toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    throw_parse_error(e, source);
  }
}

std::string_view node_type_phrase(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::table:
      return "a table";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::date:
    case toml::node_type::time:
    case toml::node_type::date_time:
      return "a date/time";
    case toml::node_type::none:
      break;
  }
  return "nothing";
}

TableReader::TableReader(const toml::table& table, std::string source, std::string prefix,
                         std::optional<std::string> field_prefix)
    : table_(table),
      source_(std::move(source)),
      prefix_(std::move(prefix)),
      field_prefix_(field_prefix.value_or(prefix_)) {}

const toml::node* TableReader::lookup(std::string_view key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.emplace_back(key);
  return table_.get(key);
}

std::string TableReader::where(std::string_view key) const {
  const toml::node* node = table_.get(key);
  if (node == nullptr) return source_;
  return source_ + ":" + std::to_string(node->source().begin.line);
}

void TableReader::fail(std::string_view key, const std::string& what) const {
  throw SpecError({field_prefix_ + std::string(key)},
                  where(key) + ": key '" + prefix_ + std::string(key) + "'", what);
}

void TableReader::wrong_type(std::string_view key, const toml::node& node,
                             std::string_view expected) const {
  fail(key, "expected " + std::string(expected) + ", got " + std::string(node_type_phrase(node)));
}

void TableReader::reject_unknown() const {
  for (auto&& [key, node] : table_) {
    if (std::find(known_.begin(), known_.end(), key.str()) != known_.end()) continue;
    std::string valid;
    for (const auto& k : known_) valid += (valid.empty() ? "" : ", ") + k;
    const std::string table_name =
        prefix_.empty() ? "" : " in [" + prefix_.substr(0, prefix_.size() - 1) + "]";
    throw SpecError({field_prefix_ + std::string(key.str())},
                    source_ + ":" + std::to_string(node.source().begin.line) + ": unknown key '" +
                        prefix_ + std::string(key.str()) + "'" + table_name + " (valid: " + valid +
                        ")");
  }
}

std::optional<std::int64_t> TableReader::integer(std::string_view key) {
  const toml::node* node = lookup(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_integer()) wrong_type(key, *node, "an integer");
  return node->as_integer()->get();
}

std::optional<int> TableReader::int32(std::string_view key) {
  const auto v = integer(key);
  if (!v) return std::nullopt;
  if (*v < std::numeric_limits<int>::min() || *v > std::numeric_limits<int>::max()) {
    fail(key, "value " + std::to_string(*v) + " is out of range");
  }
  return static_cast<int>(*v);
}

std::optional<int> TableReader::positive_int(std::string_view key) {
  const auto v = int32(key);
  if (v && *v <= 0) fail(key, "must be positive, got " + std::to_string(*v));
  return v;
}

std::optional<std::int64_t> TableReader::positive_int64(std::string_view key) {
  const auto v = integer(key);
  if (v && *v <= 0) fail(key, "must be positive, got " + std::to_string(*v));
  return v;
}

std::optional<std::int64_t> TableReader::positive_count(std::string_view key) {
  const toml::node* node = lookup(key);
  if (node == nullptr) return std::nullopt;
  std::int64_t v = 0;
  if (node->is_integer()) {
    v = node->as_integer()->get();
  } else if (node->is_floating_point()) {
    const double d = node->as_floating_point()->get();
    if (!(std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18)) {
      fail(key, "expected a whole number, got " + std::to_string(d));
    }
    v = static_cast<std::int64_t>(d);
  } else {
    wrong_type(key, *node, "a number");
  }
  if (v <= 0) fail(key, "must be positive, got " + std::to_string(v));
  return v;
}

std::optional<double> TableReader::number(std::string_view key) {
  const toml::node* node = lookup(key);
  if (node == nullptr) return std::nullopt;
  if (node->is_integer()) return static_cast<double>(node->as_integer()->get());
  if (node->is_floating_point()) {
    const double d = node->as_floating_point()->get();
    if (!std::isfinite(d)) fail(key, "must be finite");
    return d;
  }
  wrong_type(key, *node, "a number");
}

std::optional<double> TableReader::positive_number(std::string_view key) {
  const auto v = number(key);
  if (v && !(*v > 0.0)) fail(key, "must be positive, got " + std::to_string(*v));
  return v;
}

std::optional<double> TableReader::non_negative_number(std::string_view key) {
  const auto v = number(key);
  if (v && *v < 0.0) fail(key, "must not be negative, got " + std::to_string(*v));
  return v;
}

std::optional<std::string> TableReader::string(std::string_view key) {
  const toml::node* node = lookup(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_string()) wrong_type(key, *node, "a string");
  return node->as_string()->get();
}

std::optional<bool> TableReader::boolean(std::string_view key) {
  const toml::node* node = lookup(key);
  if (node == nullptr) return std::nullopt;
  if (!node->is_boolean()) wrong_type(key, *node, "a boolean (true or false)");
  return node->as_boolean()->get();
}

const toml::table* TableReader::table(std::string_view key) {
  const toml::node* node = lookup(key);
  if (node == nullptr) return nullptr;
  if (!node->is_table()) wrong_type(key, *node, "a table");
  return node->as_table();
}

const toml::array* TableReader::array(std::string_view key) {
  const toml::node* node = lookup(key);
  if (node == nullptr) return nullptr;
  if (!node->is_array()) wrong_type(key, *node, "an array");
  return node->as_array();
}

}  // namespace pipetune::spec::detail
