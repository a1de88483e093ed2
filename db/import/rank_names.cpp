#include "db/import/rank_names.hpp"

#include <cctype>

namespace pipetune::db {

std::optional<std::int32_t> rank_from_name(std::string_view name) {
  auto lower = [](char c) {
    return static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  };
  auto alpha = [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; };
  for (std::size_t i = 0; i + 4 <= name.size(); ++i) {
    if (lower(name[i]) != 'r' || lower(name[i + 1]) != 'a' || lower(name[i + 2]) != 'n' ||
        lower(name[i + 3]) != 'k')
      continue;
    if (i > 0 && alpha(name[i - 1])) continue;
    std::size_t pos = i + 4;
    while (pos < name.size() && (name[pos] == ' ' || name[pos] == '_' || name[pos] == ':' ||
                                 name[pos] == '#' || name[pos] == '='))
      ++pos;
    std::int64_t value = 0;
    const std::size_t digits = pos;
    while (pos < name.size() && name[pos] >= '0' && name[pos] <= '9' && value <= INT32_MAX) {
      value = value * 10 + (name[pos] - '0');
      ++pos;
    }
    if (pos == digits || value > INT32_MAX) continue;
    if (pos < name.size() && alpha(name[pos])) continue;  // "rank 3rd" is not a rank
    return static_cast<std::int32_t>(value);
  }
  return std::nullopt;
}

}  // namespace pipetune::db
