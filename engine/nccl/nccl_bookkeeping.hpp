// The host-side bookkeeping of the NCCL communicator (nccl_communicator.hpp) that needs no device:
// the unique id as bytes (what travels over the MPI start-up), tag matching of point-to-point
// messages on top of NCCL's tagless FIFOs, the lazily filled per-group table, and the check that
// every member called the same collective. Tested in tests/cuda without a GPU.
#pragma once

#include <nccl.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "engine/comm/process_group.hpp"

namespace pipetune::nccl {

// ---- unique id <-> bytes ------------------------------------------------------------------------

using UniqueIdBytes = std::array<std::uint8_t, NCCL_UNIQUE_ID_BYTES>;

UniqueIdBytes unique_id_to_bytes(const ncclUniqueId& id);
// Throws std::invalid_argument unless `bytes` holds exactly NCCL_UNIQUE_ID_BYTES bytes.
ncclUniqueId unique_id_from_bytes(std::span<const std::uint8_t> bytes);

// ---- point-to-point tag matching ----------------------------------------------------------------
//
// NCCL has no tags: between two ranks, ncclSend and ncclRecv match in the order they are posted.
// The communicator keeps the interface's promise (messages of one (source, destination, tag)
// arrive in order; recv takes the oldest match, whatever was sent with other tags in between)
// like this: every send first posts a small header {tag, count} over MPI (host memory, in order
// per pair), then its data over NCCL (in the same order). A receiver reads the next header from
// the source: when its tag is the one wanted, the data goes straight into the caller's buffer;
// otherwise it is received into a device stash under its tag, and the next header is read. recv
// looks in the stash first (stashed messages are older than any still unread). A stash costs one
// device allocation and a device copy; with tags received in the order sent, none is made.

struct MessageHeader {
  std::int32_t tag = 0;
  std::uint64_t count = 0;  // floats
};

// A message whose data has been received into device memory the communicator owns.
struct StashedMessage {
  void* data = nullptr;  // device pointer (nullptr for an empty message)
  std::uint64_t count = 0;
};

// What recv does with the header it just read.
enum class HeaderAction {
  deliver,  // the wanted tag: receive into the caller's buffer
  stash,    // another tag: receive into the stash and read the next header
};

// The messages from one source that were received ahead of their recv.
class TagMailbox {
 public:
  // The oldest stashed message with `tag`, removed from the mailbox; nullopt when none.
  std::optional<StashedMessage> take(int tag);
  void stash(int tag, StashedMessage message);
  HeaderAction on_header(const MessageHeader& header, int wanted_tag) const {
    return header.tag == wanted_tag ? HeaderAction::deliver : HeaderAction::stash;
  }
  std::size_t size() const;  // stashed messages, all tags
  // Every stashed message, for the owner to free (the mailbox is empty afterwards).
  std::vector<StashedMessage> drain();

 private:
  std::map<int, std::deque<StashedMessage>> by_tag_;
};

// "recv on rank 1 from rank 0 (tag 3) expects 4 floats, the message has 5" (CommMismatch's text),
// or empty when the sizes agree.
std::string recv_size_mismatch(int rank, int src, int tag, std::size_t expected,
                               std::uint64_t sent);

// ---- per-group table ----------------------------------------------------------------------------

// Per process group (keyed by name and members: groups with the same members but different names
// are separate streams of collectives, so they get separate NCCL communicators), a value made on
// first use by `make`. Not thread-safe: one communicator is used by one thread.
template <typename Value>
class GroupTable {
 public:
  template <typename Make>
  Value& get_or_make(const comm::ProcessGroup& group, Make&& make) {
    auto it = values_.find(group);
    if (it == values_.end()) it = values_.emplace(group, std::forward<Make>(make)()).first;
    return it->second;
  }
  Value* find(const comm::ProcessGroup& group) {
    const auto it = values_.find(group);
    return it == values_.end() ? nullptr : &it->second;
  }
  std::size_t size() const { return values_.size(); }
  auto begin() { return values_.begin(); }
  auto end() { return values_.end(); }

 private:
  std::map<comm::ProcessGroup, Value, comm::ProcessGroupLess> values_;
};

// ---- collective signatures ----------------------------------------------------------------------
//
// NCCL given different counts or roots by different members hangs or reads out of bounds; the
// communicator can first exchange each member's signature over MPI (a few bytes) and throw
// CommMismatch naming the first member that differs.

enum class CollectiveKind : std::int32_t {
  all_reduce = 1,
  reduce_scatter,
  all_gather,
  all_to_all,
  all_to_all_v,
  broadcast,
  reduce_scatter_v,
};

struct CollectiveSignature {
  std::int32_t kind = 0;    // CollectiveKind
  std::int32_t op = 0;      // ReduceOp, or the root of a broadcast
  std::uint64_t count = 0;  // floats of the input (all_to_all_v, reduce_scatter_v: its total)
};
static_assert(sizeof(CollectiveSignature) == 16, "sent over MPI as bytes");

const char* collective_name(CollectiveKind kind);
std::string describe_signature(const CollectiveSignature& s);

// The mismatch between member `me`'s signature and the others' (`all` in group-rank order), as
// CommMismatch's message, or empty when every member agrees. all_to_all_v members may differ in
// count (their splits differ); kind and op must still agree.
std::string signature_mismatch(std::span<const CollectiveSignature> all, int me,
                               const comm::ProcessGroup& group);

// ---- point-to-point links -----------------------------------------------------------------------

// The ordered (source, destination) pairs with a NCCL link: `links` as given (validated: ranks in
// [0, world), no self link, no duplicates), or every ordered pair of distinct ranks when empty.
// Throws std::invalid_argument naming the bad link.
std::vector<std::pair<int, int>> resolve_links(std::span<const std::pair<int, int>> links,
                                               int world);

}  // namespace pipetune::nccl
