#include "db/import/import_limits.hpp"

namespace pipetune::db {

std::string limit_bytes_text(std::uint64_t bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  std::size_t unit = 0;
  // Only whole units: a limit is a round number, and "1.5 GiB" is shown in MiB.
  while (unit + 1 < std::size(kUnits) && bytes >= 1024 && bytes % 1024 == 0) {
    bytes /= 1024;
    ++unit;
  }
  return std::to_string(bytes) + " " + kUnits[unit];
}

}  // namespace pipetune::db
