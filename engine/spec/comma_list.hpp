// Lists a plan's keys take as text ("--stage-tp 4,2,2", "full,none", the GUI's fields): entries
// separated by commas, spaces around each ignored.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pipetune::spec {

// `text` without its leading and trailing spaces.
inline std::string_view trimmed(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

// The entries of `text`, each trimmed; none when the text is blank. An empty entry ("2,,1") is
// kept, for the caller to refuse by name.
inline std::vector<std::string_view> comma_entries(std::string_view text) {
  std::vector<std::string_view> out;
  const std::string_view all = trimmed(text);
  if (all.empty()) return out;
  std::size_t start = 0;
  while (true) {
    const std::size_t comma = all.find(',', start);
    out.push_back(trimmed(all.substr(start, comma - start)));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

// The entries' names joined by `separator` ("full,none"; "f/n" with a name's first letter).
template <class T, class Name>
std::string joined(const std::vector<T>& entries, Name&& name, std::string_view separator) {
  std::string s;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) s += separator;
    s += name(entries[i]);
  }
  return s;
}

}  // namespace pipetune::spec
