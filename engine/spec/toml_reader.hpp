// Internal to engine/spec: reading spec tables with toml++ so that every error names the file,
// the line and the key. toml++ is a private dependency of pipetune_engine, so only engine/
// sources may include this header.
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pipetune::spec::detail {

// Parse a file or a text; a syntax error becomes SpecError "file:line:column: what".
toml::table parse_toml_file(const std::filesystem::path& path);
toml::table parse_toml_text(std::string_view text, std::string_view source);

// Reads the keys of one table. Every getter registers its key as valid, whether present or
// not; reject_unknown() then turns any other key (a typo) into an error that lists the valid
// ones. Getters return nullopt for absent keys and throw SpecError for a wrong type or range.
class TableReader {
 public:
  // source: the file name for messages; prefix: the table's dotted name ("plan.") or "".
  // field_prefix: what the errors' fields (InputError::fields()) put before a key, the spec's
  // name where the table is a whole file ("model." for a model file); default: prefix.
  TableReader(const toml::table& table, std::string source, std::string prefix = "",
              std::optional<std::string> field_prefix = std::nullopt);

  bool has(std::string_view key) const { return table_.contains(key); }

  std::optional<std::int64_t> integer(std::string_view key);
  std::optional<int> int32(std::string_view key);         // an integer that fits an int
  std::optional<int> positive_int(std::string_view key);  // > 0
  std::optional<std::int64_t> positive_int64(std::string_view key);
  // An integer, or a float with an integral value ("80e9"), > 0: byte counts.
  std::optional<std::int64_t> positive_count(std::string_view key);
  std::optional<double> number(std::string_view key);  // integer or float
  std::optional<double> positive_number(std::string_view key);
  std::optional<double> non_negative_number(std::string_view key);
  std::optional<std::string> string(std::string_view key);
  std::optional<bool> boolean(std::string_view key);
  const toml::table* table(std::string_view key);
  const toml::array* array(std::string_view key);
  const toml::node* node(std::string_view key) { return lookup(key); }  // any type

  // "file:line" of a key (just "file" when it is absent).
  std::string where(std::string_view key) const;
  // Throws SpecError "file:line: key 'prefix.key': what" about the field field_prefix + key.
  [[noreturn]] void fail(std::string_view key, const std::string& what) const;
  // Throws for the first key that no getter asked for.
  void reject_unknown() const;

  const std::string& source() const { return source_; }

 private:
  const toml::node* lookup(std::string_view key);  // registers the key
  [[noreturn]] void wrong_type(std::string_view key, const toml::node& node,
                               std::string_view expected) const;

  const toml::table& table_;
  std::string source_;
  std::string prefix_;
  std::string field_prefix_;
  std::vector<std::string> known_;
};

// "a string", "an integer", ... for messages.
std::string_view node_type_phrase(const toml::node& node);

}  // namespace pipetune::spec::detail
