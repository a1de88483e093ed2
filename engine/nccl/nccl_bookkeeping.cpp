#include "engine/nccl/nccl_bookkeeping.hpp"

#include <algorithm>
#include <cstring>
#include <set>
#include <stdexcept>

namespace pipetune::nccl {

UniqueIdBytes unique_id_to_bytes(const ncclUniqueId& id) {
  static_assert(sizeof(ncclUniqueId) == NCCL_UNIQUE_ID_BYTES, "ncclUniqueId is its bytes");
  UniqueIdBytes bytes{};
  std::memcpy(bytes.data(), &id, bytes.size());
  return bytes;
}

ncclUniqueId unique_id_from_bytes(std::span<const std::uint8_t> bytes) {
  if (bytes.size() != NCCL_UNIQUE_ID_BYTES)
    throw std::invalid_argument("NCCL unique id of " + std::to_string(bytes.size()) +
                                " bytes (expected " + std::to_string(NCCL_UNIQUE_ID_BYTES) + ")");
  ncclUniqueId id;
  std::memcpy(&id, bytes.data(), bytes.size());
  return id;
}

std::optional<StashedMessage> TagMailbox::take(int tag) {
  const auto it = by_tag_.find(tag);
  if (it == by_tag_.end()) return std::nullopt;
  StashedMessage m = it->second.front();
  it->second.pop_front();
  if (it->second.empty()) by_tag_.erase(it);
  return m;
}

void TagMailbox::stash(int tag, StashedMessage message) {
  by_tag_[tag].push_back(message);
}

std::size_t TagMailbox::size() const {
  std::size_t n = 0;
  for (const auto& [tag, q] : by_tag_) n += q.size();
  return n;
}

std::vector<StashedMessage> TagMailbox::drain() {
  std::vector<StashedMessage> all;
  for (auto& [tag, q] : by_tag_) all.insert(all.end(), q.begin(), q.end());
  by_tag_.clear();
  return all;
}

std::string recv_size_mismatch(int rank, int src, int tag, std::size_t expected,
                               std::uint64_t sent) {
  if (expected == sent) return {};
  return "recv on rank " + std::to_string(rank) + " from rank " + std::to_string(src) + " (tag " +
         std::to_string(tag) + ") expects " + std::to_string(expected) +
         " floats, the message has " + std::to_string(sent);
}

const char* collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_reduce:
      return "all_reduce";
    case CollectiveKind::reduce_scatter:
      return "reduce_scatter";
    case CollectiveKind::all_gather:
      return "all_gather";
    case CollectiveKind::all_to_all:
      return "all_to_all";
    case CollectiveKind::all_to_all_v:
      return "all_to_all_v";
    case CollectiveKind::broadcast:
      return "broadcast";
    case CollectiveKind::reduce_scatter_v:
      return "reduce_scatter_v";
  }
  return "unknown collective";
}

std::string describe_signature(const CollectiveSignature& s) {
  const auto kind = static_cast<CollectiveKind>(s.kind);
  std::string text = collective_name(kind);
  if (kind == CollectiveKind::broadcast)
    text += "(root " + std::to_string(s.op) + ", ";
  else if (kind == CollectiveKind::all_reduce || kind == CollectiveKind::reduce_scatter ||
           kind == CollectiveKind::reduce_scatter_v)
    text += std::string("(") + (s.op == 0 ? "sum" : "max") + ", ";
  else
    text += "(";
  return text + std::to_string(s.count) + " floats)";
}

std::string signature_mismatch(std::span<const CollectiveSignature> all, int me,
                               const comm::ProcessGroup& group) {
  const CollectiveSignature& mine = all[static_cast<std::size_t>(me)];
  const bool any_count = static_cast<CollectiveKind>(mine.kind) == CollectiveKind::all_to_all_v;
  for (std::size_t j = 0; j < all.size(); ++j) {
    const CollectiveSignature& other = all[j];
    const bool same =
        other.kind == mine.kind && other.op == mine.op && (any_count || other.count == mine.count);
    if (same) continue;
    const int other_rank = j < group.ranks.size() ? group.ranks[j] : -1;
    const int my_rank = group.ranks[static_cast<std::size_t>(me)];
    return "on " + group.describe() + ", rank " + std::to_string(my_rank) + " called " +
           describe_signature(mine) + " but rank " + std::to_string(other_rank) + " called " +
           describe_signature(other);
  }
  return {};
}

std::vector<std::pair<int, int>> resolve_links(std::span<const std::pair<int, int>> links,
                                               int world) {
  std::vector<std::pair<int, int>> out;
  if (links.empty()) {
    for (int a = 0; a < world; ++a)
      for (int b = 0; b < world; ++b)
        if (a != b) out.emplace_back(a, b);
    return out;
  }
  std::set<std::pair<int, int>> seen;
  for (const auto& [a, b] : links) {
    const std::string name = "(" + std::to_string(a) + " -> " + std::to_string(b) + ")";
    if (a < 0 || a >= world || b < 0 || b >= world)
      throw std::invalid_argument("NCCL communicator: link " + name + " names a rank outside [0, " +
                                  std::to_string(world) + ")");
    if (a == b)
      throw std::invalid_argument("NCCL communicator: link " + name +
                                  " is a self link (sends to self need none)");
    if (!seen.insert({a, b}).second)
      throw std::invalid_argument("NCCL communicator: link " + name + " is listed twice");
    out.emplace_back(a, b);
  }
  return out;
}

}  // namespace pipetune::nccl
