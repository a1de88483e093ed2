#include "db/store/counter_block.hpp"

#include <cstring>

#include "engine/errors.hpp"

namespace pipetune::db {

void decode_counter_block(const void* blob, std::size_t bytes, std::int64_t count,
                          std::int64_t run_id, std::int64_t first_seq, const std::string& db_path,
                          std::vector<profiler::CounterSample>& out) {
  const std::string where = db_path + ": corrupt counter block of run " + std::to_string(run_id) +
                            " at sample " + std::to_string(first_seq);
  if (count <= 0 || count > static_cast<std::int64_t>(kCounterBlockSamples) ||
      bytes != static_cast<std::size_t>(count) * sizeof(PackedCounter) || blob == nullptr)
    throw InputError(where + " (" + std::to_string(bytes) + " bytes for " + std::to_string(count) +
                     " samples)");
  const auto* bytes_in = static_cast<const unsigned char*>(blob);
  out.reserve(out.size() + static_cast<std::size_t>(count));
  for (std::int64_t i = 0; i < count; ++i) {
    PackedCounter p;
    std::memcpy(&p, bytes_in + static_cast<std::size_t>(i) * sizeof(PackedCounter), sizeof p);
    out.push_back(profiler::CounterSample{p.rank, p.name, p.t_ns, p.value});
  }
}

}  // namespace pipetune::db
