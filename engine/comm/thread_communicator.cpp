#include "engine/comm/thread_communicator.hpp"

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <numeric>
#include <stdexcept>
#include <string>

#include "engine/comm/comm_errors.hpp"
#include "engine/comm/reduction.hpp"
#include "engine/errors.hpp"

namespace pipetune::comm {

using threads::Contribution;
using threads::GroupState;
using threads::OpCall;
using threads::OpKind;
using threads::Slot;

namespace {

// Marks the rank as inside `call` for error messages. On an exception the rank stays marked as
// in the op, so the launcher can say where it failed.
class ActivityScope {
 public:
  ActivityScope(threads::RankActivity& activity, const OpCall& call)
      : activity_(activity), exceptions_(std::uncaught_exceptions()) {
    std::lock_guard lock(activity_.mutex);
    activity_.current = call;
    activity_.in_op = true;
  }
  ~ActivityScope() {
    if (std::uncaught_exceptions() > exceptions_) return;
    std::lock_guard lock(activity_.mutex);
    activity_.last = activity_.current;
    activity_.has_last = true;
    activity_.in_op = false;
  }
  ActivityScope(const ActivityScope&) = delete;
  ActivityScope& operator=(const ActivityScope&) = delete;

 private:
  threads::RankActivity& activity_;
  int exceptions_;
};

bool overlaps(const float* a, std::size_t na, const float* b, std::size_t nb) {
  const std::less<const float*> before;
  return na > 0 && nb > 0 && before(a, b + nb) && before(b, a + na);
}

// Reduces members' input[offset, offset + len) block by block, folded in group-rank order so every
// element is ((x0 op x1) op x2) ... whichever member computes it, and hands each reduced block to
// emit(position, block, length). A block stays in L1 while every member's part is folded into
// it, so each input is read once and each result written once; folding whole vectors instead
// read and wrote the result once per member. An output may be an input at the same positions:
// a block is read whole before it is emitted.
constexpr std::size_t kReduceBlock = 2048;  // floats

template <class Emit>
void reduce_blocks(ReduceOp op, const std::vector<Contribution>& members, std::size_t offset,
                   std::size_t len, Emit emit) {
  float block[kReduceBlock];
  for (std::size_t at = 0; at < len; at += kReduceBlock) {
    const std::size_t l = std::min(kReduceBlock, len - at);
    const float* first = members[0].input + offset + at;
    std::copy(first, first + l, block);
    for (std::size_t j = 1; j < members.size(); ++j)
      fold_into(op, block, members[j].input + offset + at, l);
    emit(at, static_cast<const float*>(block), l);
  }
}

// out[0, len) <- the reduction of members' input[offset, offset + len).
void reduce_into(ReduceOp op, const std::vector<Contribution>& members, std::size_t offset,
                 std::size_t len, float* out) {
  reduce_blocks(op, members, offset, len, [&](std::size_t at, const float* block, std::size_t l) {
    std::copy(block, block + l, out + at);
  });
}

std::string size_error(const OpCall& call, const std::string& rule) {
  return threads::describe(call) + ": " + rule;
}

}  // namespace

// ---- plumbing ----------------------------------------------------------------------------------

ThreadCommunicator::GroupHandle& ThreadCommunicator::handle(const ProcessGroup& group) {
  auto it = groups_.find(group);
  if (it != groups_.end()) return it->second;
  if (group.ranks.empty()) throw InputError(group.describe() + " has no members");
  std::vector<char> seen(static_cast<std::size_t>(world()), 0);
  for (int r : group.ranks) {
    if (r < 0 || r >= world())
      throw InputError(group.describe() + " names rank " + std::to_string(r) +
                       ", outside the world of " + std::to_string(world()) + " ranks");
    if (seen[static_cast<std::size_t>(r)]++)
      throw InputError(group.describe() + " lists rank " + std::to_string(r) + " twice");
  }
  const int index = group.index_of(rank_);
  if (index < 0)
    throw InputError("rank " + std::to_string(rank_) + " is not a member of " + group.describe());
  // A channel's collectives on a group are a stream of their own beside the rank's on it.
  threads::GroupState& state =
      own_activity_ ? state_.group(ProcessGroup{group.name + " (channel)", group.ranks})
                    : state_.group(group);
  return groups_.emplace(group, GroupHandle{&state, index, 0}).first->second;
}

OpCall ThreadCommunicator::collective_call(GroupHandle& h, OpKind kind) const {
  OpCall call;
  call.kind = kind;
  call.group = h.state;
  call.seq = h.next_seq++;
  return call;
}

template <class Ready>
ThreadCommunicator::WaitEnd ThreadCommunicator::wait(std::unique_lock<std::mutex>& lock,
                                                     std::condition_variable& cv, Ready ready) {
  const auto deadline = std::chrono::steady_clock::now() + state_.options().watchdog_timeout;
  // Readiness is checked first: once the awaited event happened, the op completes even if the
  // run aborts meanwhile (a rendezvous that everyone reached must finish, see the header).
  while (!ready()) {
    if (state_.aborted()) return WaitEnd::aborted;
    if (cv.wait_until(lock, deadline) == std::cv_status::timeout && !ready())
      return state_.aborted() ? WaitEnd::aborted : WaitEnd::timed_out;
  }
  return WaitEnd::ready;
}

template <class Error>
void ThreadCommunicator::fail_and_throw(const OpCall& call, const std::string& message) {
  const std::string op = threads::describe(call);
  Error error(rank_, op, message);
  if (!state_.fail(rank_, op, "in " + op, message, std::make_exception_ptr(error)))
    throw_woken(call);  // another rank failed first; report that one
  throw error;
}

template <class Error>
void ThreadCommunicator::fail_and_throw(const OpCall& call, const std::string& message,
                                        std::unique_lock<std::mutex>& held) {
  const std::string op = threads::describe(call);
  Error error(rank_, op, message);
  const bool first = state_.record(rank_, op, "in " + op, message, std::make_exception_ptr(error));
  held.unlock();
  if (!first) throw_woken(call);  // another rank failed first; report that one
  state_.wake_everyone();
  throw error;
}

void ThreadCommunicator::throw_woken(const OpCall& call) const {
  const threads::Failure f = state_.failure();
  throw RankFailure(
      f.rank, f.op,
      f.summary + "; rank " + std::to_string(rank_) + " stopped in " + threads::describe(call));
}

ThreadCommunicator::ThreadCommunicator(threads::ClusterState& state, int rank, ChannelTag)
    : state_(state),
      rank_(rank),
      own_activity_(std::make_unique<threads::RankActivity>()),
      activity_(own_activity_.get()) {}

std::unique_ptr<Communicator> ThreadCommunicator::open_channel() {
  return std::unique_ptr<Communicator>(new ThreadCommunicator(state_, rank_, ChannelTag{}));
}

void ThreadCommunicator::refuse_on_channel(const char* op) const {
  if (own_activity_)
    throw std::logic_error(std::string(op) + " on a channel of rank " + std::to_string(rank_) +
                           ": a channel carries collectives only");
}

void ThreadCommunicator::fail_run(std::exception_ptr error) {
  std::string what = "unknown exception";
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    what = e.what();
  } catch (...) {
  }
  state_.fail(rank_, "", "outside communication (another thread of the rank failed)", what,
              std::move(error));
}

void ThreadCommunicator::note_progress(std::int64_t step, std::string_view op, int microbatch) {
  threads::RankActivity& a = *activity_;
  std::lock_guard lock(a.mutex);
  a.step = step;
  a.op = op;
  a.microbatch = microbatch;
}

void ThreadCommunicator::throw_if_aborted() const {
  if (!state_.aborted()) return;
  const threads::Failure f = state_.failure();
  throw RankFailure(f.rank, f.op,
                    f.summary + "; rank " + std::to_string(rank_) + " stopped between ops");
}

std::string ThreadCommunicator::missing_members(const Slot& slot, const GroupState& g) {
  std::string s;
  for (std::size_t i = 0; i < slot.members.size(); ++i) {
    if (slot.members[i].present) continue;
    const int r = g.group.ranks[i];
    if (!s.empty()) s += ", ";
    s += "rank " + std::to_string(r) + " (" + state_.describe_activity(r) + ")";
  }
  return s;
}

// Pairwise check of variable all-to-all splits: what i sends to j is what j expects from i.
static std::string check_splits(const Slot& slot, const GroupState& g, const OpCall& call) {
  const std::size_t n = slot.members.size();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < n; ++j) {
      const std::size_t sent = slot.members[i].send_counts[j];
      const std::size_t expected = slot.members[j].recv_counts[i];
      if (sent != expected)
        return "all_to_all_v split mismatch on " + g.description + " (call #" +
               std::to_string(call.seq) + "): rank " + std::to_string(g.group.ranks[i]) +
               " sends " + std::to_string(sent) + " floats to rank " +
               std::to_string(g.group.ranks[j]) + ", which expects " + std::to_string(expected);
    }
  return {};
}

// reduce_scatter_v: every member splits the input by the same counts.
static std::string check_counts(const Slot& slot, const GroupState& g, const OpCall& call) {
  const std::span<const std::size_t> first = slot.members[0].send_counts;
  for (std::size_t i = 1; i < slot.members.size(); ++i) {
    const std::span<const std::size_t> other = slot.members[i].send_counts;
    if (!std::equal(first.begin(), first.end(), other.begin(), other.end()))
      return "reduce_scatter_v count mismatch on " + g.description + " (call #" +
             std::to_string(call.seq) + "): rank " + std::to_string(g.group.ranks[i]) +
             " splits the input otherwise than rank " + std::to_string(g.group.ranks[0]);
  }
  return {};
}

// The call's slot in g, opened by the first member to arrive: one Contribution per member.
static Slot& open_slot(GroupState& g, const OpCall& call) {
  Slot& slot = g.slots[call.seq];
  if (slot.members.empty()) slot.members.resize(static_cast<std::size_t>(g.group.size()));
  return slot;
}

// A collective mismatch between `call` (by rank `rank`) and the members already in the slot, or
// empty if none. The members already there agree with each other, so the first one decides.
static std::string signature_mismatch(const Slot& slot, const GroupState& g, const OpCall& call,
                                      int rank) {
  for (std::size_t i = 0; i < slot.members.size(); ++i) {
    const Contribution& other = slot.members[i];
    if (!other.present) continue;
    if (threads::same_signature(other.call, call)) return {};
    return "collective mismatch on " + g.description + " at call #" + std::to_string(call.seq) +
           ": rank " + std::to_string(g.group.ranks[i]) + " called " +
           threads::describe(other.call) + " but rank " + std::to_string(rank) + " called " +
           threads::describe(call);
  }
  return {};
}

Slot& ThreadCommunicator::arrive(GroupHandle& h, const OpCall& call, const Contribution& mine,
                                 std::unique_lock<std::mutex>& lock) {
  GroupState& g = *h.state;
  const int n = g.group.size();
  const auto me = static_cast<std::size_t>(h.index);
  Slot& slot = open_slot(g, call);
  const std::string mismatch = signature_mismatch(slot, g, call, rank_);
  if (!mismatch.empty()) fail_and_throw<CommMismatch>(call, mismatch, lock);
  slot.members[me] = mine;
  slot.members[me].present = true;
  slot.members[me].call = call;
  auto withdraw = [&] {
    slot.members[me].present = false;
    --slot.arrived;
  };
  if (++slot.arrived == n) {
    if (call.kind == OpKind::all_to_all_v || call.kind == OpKind::reduce_scatter_v) {
      const std::string bad = call.kind == OpKind::all_to_all_v ? check_splits(slot, g, call)
                                                                : check_counts(slot, g, call);
      if (!bad.empty()) {
        withdraw();
        fail_and_throw<CommMismatch>(call, bad, lock);
      }
    }
    g.cv.notify_all();
    return slot;
  }
  const WaitEnd end = wait(lock, g.cv, [&] { return slot.arrived == n; });
  if (end == WaitEnd::aborted) {
    withdraw();
    lock.unlock();
    throw_woken(call);
  }
  if (end == WaitEnd::timed_out) {
    const std::string message = "watchdog: rank " + std::to_string(rank_) + " waited " +
                                std::to_string(state_.options().watchdog_timeout.count()) +
                                " ms in " + threads::describe(call) +
                                "; not arrived: " + missing_members(slot, g);
    withdraw();
    fail_and_throw<WatchdogTimeout>(call, message, lock);
  }
  return slot;
}

template <class Read, class Write>
void ThreadCommunicator::rendezvous(GroupHandle& h, const OpCall& call, const Contribution& mine,
                                    Read read, Write write) {
  if (state_.aborted()) throw_woken(call);
  GroupState& g = *h.state;
  const int n = g.group.size();
  std::unique_lock lock(g.mutex);

  // 1. arrive
  Slot& slot = arrive(h, call, mine, lock);

  if (call.kind == OpKind::barrier) {  // nothing read, nothing to fence
    if (++slot.departed == n) g.slots.erase(call.seq);
    return;
  }

  // 2. read (unlocked: the members' contributions no longer change)
  lock.unlock();
  read(slot);
  lock.lock();

  // 3. fence. Not abortable and no watchdog: every member is past arrival and only copies memory.
  if (++slot.computed == n)
    g.cv.notify_all();
  else
    g.cv.wait(lock, [&] { return slot.computed == n; });
  lock.unlock();

  // 4. write, then leave; the last one out frees the slot.
  write(slot);
  lock.lock();
  if (++slot.departed == n) g.slots.erase(call.seq);
}

// ---- point to point ----------------------------------------------------------------------------

void ThreadCommunicator::send(int dst, int tag, std::span<const float> data) {
  OpCall call;
  call.kind = OpKind::send;
  call.peer = dst;
  call.tag = tag;
  call.count = data.size();
  refuse_on_channel("send");
  ActivityScope scope(*activity_, call);
  if (dst < 0 || dst >= world())
    throw InputError("send from rank " + std::to_string(rank_) + " to rank " + std::to_string(dst) +
                     ", outside the world of " + std::to_string(world()));
  if (state_.aborted()) throw_woken(call);
  threads::Message message{rank_, tag, std::vector<float>(data.begin(), data.end())};
  threads::Mailbox& box = state_.mailbox(dst);
  {
    std::lock_guard lock(box.mutex);
    box.messages.push_back(std::move(message));
  }
  box.cv.notify_all();
}

void ThreadCommunicator::recv(int src, int tag, std::span<float> data) {
  OpCall call;
  call.kind = OpKind::recv;
  call.peer = src;
  call.tag = tag;
  call.count = data.size();
  refuse_on_channel("recv");
  ActivityScope scope(*activity_, call);
  if (src < 0 || src >= world())
    throw InputError("recv on rank " + std::to_string(rank_) + " from rank " + std::to_string(src) +
                     ", outside the world of " + std::to_string(world()));
  if (state_.aborted()) throw_woken(call);
  threads::Mailbox& box = state_.mailbox(rank_);
  std::unique_lock lock(box.mutex);
  auto match = box.messages.end();
  const WaitEnd end = wait(lock, box.cv, [&] {
    match = std::find_if(box.messages.begin(), box.messages.end(),
                         [&](const threads::Message& m) { return m.src == src && m.tag == tag; });
    return match != box.messages.end();
  });
  if (end == WaitEnd::aborted) {
    lock.unlock();
    throw_woken(call);
  }
  if (end == WaitEnd::timed_out) {
    const std::string message = "watchdog: rank " + std::to_string(rank_) + " waited " +
                                std::to_string(state_.options().watchdog_timeout.count()) +
                                " ms in " + threads::describe(call) + "; rank " +
                                std::to_string(src) + " sent nothing with tag " +
                                std::to_string(tag) + " (rank " + std::to_string(src) + ": " +
                                state_.describe_waited_on(src) + ")";
    fail_and_throw<WatchdogTimeout>(call, message, lock);
  }
  threads::Message message = std::move(*match);
  box.messages.erase(match);
  lock.unlock();
  if (message.data.size() != data.size())
    fail_and_throw<CommMismatch>(call, threads::describe(call) + " expects " +
                                           std::to_string(data.size()) + " floats but rank " +
                                           std::to_string(src) + " sent " +
                                           std::to_string(message.data.size()));
  std::copy(message.data.begin(), message.data.end(), data.begin());
}

// ---- collectives -------------------------------------------------------------------------------

void ThreadCommunicator::all_reduce(const ProcessGroup& group, std::span<float> data, ReduceOp op) {
  GroupHandle& h = handle(group);
  OpCall call = collective_call(h, OpKind::all_reduce);
  call.reduce = op;
  call.count = data.size();
  ActivityScope scope(*activity_, call);
  Contribution mine;
  mine.input = data.data();
  mine.output = data.data();
  const std::size_t n = static_cast<std::size_t>(group.size());
  const std::size_t me = static_cast<std::size_t>(h.index);
  // Each member reduces one chunk and writes it into every member's data, in place: no member
  // reads or writes another's chunk, and the fence keeps every buffer alive until all are done.
  // The chunking does not change any element's summation order.
  const std::size_t begin = data.size() * me / n;
  const std::size_t end = data.size() * (me + 1) / n;
  rendezvous(
      h, call, mine,
      [&](Slot& slot) {
        if (n == 1) return;
        reduce_blocks(op, slot.members, begin, end - begin,
                      [&](std::size_t at, const float* block, std::size_t l) {
                        for (const Contribution& member : slot.members)
                          std::copy(block, block + l, member.output + begin + at);
                      });
      },
      [](Slot&) {});
}

void ThreadCommunicator::reduce_scatter(const ProcessGroup& group, std::span<const float> input,
                                        std::span<float> output, ReduceOp op) {
  GroupHandle& h = handle(group);
  OpCall call = collective_call(h, OpKind::reduce_scatter);
  call.reduce = op;
  call.count = input.size();
  call.out_count = output.size();
  ActivityScope scope(*activity_, call);
  const std::size_t n = static_cast<std::size_t>(group.size());
  if (input.size() != output.size() * n)
    throw InputError(size_error(call, "input must hold output size times group size (" +
                                          std::to_string(output.size() * n) + " floats)"));
  Contribution mine;
  mine.input = input.data();
  reduce_own_chunk(h, call, mine, output.size() * static_cast<std::size_t>(h.index), input, output,
                   op);
}

void ThreadCommunicator::reduce_own_chunk(GroupHandle& h, const OpCall& call,
                                          const Contribution& mine, std::size_t offset,
                                          std::span<const float> input, std::span<float> output,
                                          ReduceOp op) {
  // The others read only their own chunks of this input: an output apart from it, or this
  // member's own chunk of it (NCCL's in-place form), is written at once; any other overlap waits
  // for the fence.
  const bool direct = output.data() == input.data() + offset ||
                      !overlaps(input.data(), input.size(), output.data(), output.size());
  rendezvous(
      h, call, mine,
      [&](Slot& slot) {
        if (direct) {
          reduce_into(op, slot.members, offset, output.size(), output.data());
          return;
        }
        staging_.resize(output.size());
        reduce_into(op, slot.members, offset, output.size(), staging_.data());
      },
      [&](Slot&) {
        if (!direct) std::copy(staging_.begin(), staging_.end(), output.begin());
      });
}

void ThreadCommunicator::reduce_scatter_v(const ProcessGroup& group, std::span<const float> input,
                                          std::span<const std::size_t> counts,
                                          std::span<float> output, ReduceOp op) {
  GroupHandle& h = handle(group);
  OpCall call = collective_call(h, OpKind::reduce_scatter_v);
  call.reduce = op;
  call.count = input.size();
  call.out_count = output.size();
  ActivityScope scope(*activity_, call);
  const std::size_t n = static_cast<std::size_t>(group.size());
  const std::size_t me = static_cast<std::size_t>(h.index);
  if (counts.size() != n)
    throw InputError(
        size_error(call, "counts need one entry per member (" + std::to_string(n) + ")"));
  if (std::accumulate(counts.begin(), counts.end(), std::size_t{0}) != input.size())
    throw InputError(size_error(call, "counts do not add up to the input size"));
  if (counts[me] != output.size())
    throw InputError(size_error(
        call, "output must hold this member's count (" + std::to_string(counts[me]) + " floats)"));
  Contribution mine;
  mine.input = input.data();
  mine.send_counts = counts;
  const std::size_t offset = std::accumulate(
      counts.begin(), counts.begin() + static_cast<std::ptrdiff_t>(me), std::size_t{0});
  reduce_own_chunk(h, call, mine, offset, input, output, op);
}

void ThreadCommunicator::all_gather(const ProcessGroup& group, std::span<const float> input,
                                    std::span<float> output) {
  GroupHandle& h = handle(group);
  OpCall call = collective_call(h, OpKind::all_gather);
  call.count = input.size();
  call.out_count = output.size();
  ActivityScope scope(*activity_, call);
  const std::size_t n = static_cast<std::size_t>(group.size());
  const std::size_t c = input.size();
  if (output.size() != c * n)
    throw InputError(size_error(call, "output must hold input size times group size (" +
                                          std::to_string(c * n) + " floats)"));
  const std::size_t me = static_cast<std::size_t>(h.index);
  // NCCL's in-place form (input is this rank's chunk of output) writes straight into output;
  // any other overlap is staged until the fence.
  const bool in_place = input.data() == output.data() + me * c;
  const bool staged = !in_place && overlaps(input.data(), c, output.data(), output.size());
  Contribution mine;
  mine.input = input.data();
  rendezvous(
      h, call, mine,
      [&](Slot& slot) {
        float* out = output.data();
        if (staged) {
          staging_.resize(output.size());
          out = staging_.data();
        }
        for (std::size_t j = 0; j < n; ++j) {
          if (j == me && in_place) continue;
          std::copy(slot.members[j].input, slot.members[j].input + c, out + j * c);
        }
      },
      [&](Slot&) {
        if (staged) std::copy(staging_.begin(), staging_.end(), output.begin());
      });
}

void ThreadCommunicator::all_to_all(const ProcessGroup& group, std::span<const float> input,
                                    std::span<float> output) {
  GroupHandle& h = handle(group);
  OpCall call = collective_call(h, OpKind::all_to_all);
  call.count = input.size();
  call.out_count = output.size();
  ActivityScope scope(*activity_, call);
  const std::size_t n = static_cast<std::size_t>(group.size());
  if (input.size() % n != 0 || output.size() != input.size())
    throw InputError(size_error(call, "input and output must be equal and divisible by the " +
                                          std::string("group size ") + std::to_string(n)));
  if (overlaps(input.data(), input.size(), output.data(), output.size()))
    throw InputError(size_error(call, "input and output overlap"));
  const std::size_t c = input.size() / n;
  const std::size_t me = static_cast<std::size_t>(h.index);
  Contribution mine;
  mine.input = input.data();
  rendezvous(
      h, call, mine,
      [&](Slot& slot) {
        for (std::size_t i = 0; i < n; ++i) {
          const float* from = slot.members[i].input + me * c;
          std::copy(from, from + c, output.data() + i * c);
        }
      },
      [](Slot&) {});
}

void ThreadCommunicator::all_to_all_v(const ProcessGroup& group, std::span<const float> input,
                                      std::span<const std::size_t> send_counts,
                                      std::span<float> output,
                                      std::span<const std::size_t> recv_counts) {
  GroupHandle& h = handle(group);
  OpCall call = collective_call(h, OpKind::all_to_all_v);
  call.count = input.size();
  call.out_count = output.size();
  ActivityScope scope(*activity_, call);
  const std::size_t n = static_cast<std::size_t>(group.size());
  if (send_counts.size() != n || recv_counts.size() != n)
    throw InputError(size_error(
        call, "send and receive counts need one entry per member (" + std::to_string(n) + ")"));
  if (std::accumulate(send_counts.begin(), send_counts.end(), std::size_t{0}) != input.size())
    throw InputError(size_error(call, "send counts do not add up to the input size"));
  if (std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0}) != output.size())
    throw InputError(size_error(call, "receive counts do not add up to the output size"));
  if (overlaps(input.data(), input.size(), output.data(), output.size()))
    throw InputError(size_error(call, "input and output overlap"));
  const std::size_t me = static_cast<std::size_t>(h.index);
  Contribution mine;
  mine.input = input.data();
  mine.send_counts = send_counts;
  mine.recv_counts = recv_counts;
  rendezvous(
      h, call, mine,
      [&](Slot& slot) {
        float* out = output.data();
        for (std::size_t i = 0; i < n; ++i) {
          const Contribution& from = slot.members[i];
          const std::size_t offset = std::accumulate(from.send_counts.begin(),
                                                     from.send_counts.begin() + me, std::size_t{0});
          std::copy(from.input + offset, from.input + offset + recv_counts[i], out);
          out += recv_counts[i];
        }
      },
      [](Slot&) {});
}

void ThreadCommunicator::broadcast(const ProcessGroup& group, std::span<float> data, int root) {
  GroupHandle& h = handle(group);
  OpCall call = collective_call(h, OpKind::broadcast);
  call.count = data.size();
  call.root = root;
  ActivityScope scope(*activity_, call);
  if (root < 0 || root >= group.size())
    throw InputError(
        size_error(call, "root must be a group rank in [0, " + std::to_string(group.size()) + ")"));
  Contribution mine;
  mine.input = data.data();
  rendezvous(
      h, call, mine,
      [&](Slot& slot) {
        if (h.index == root) return;
        const float* from = slot.members[static_cast<std::size_t>(root)].input;
        std::copy(from, from + data.size(), data.begin());
      },
      [](Slot&) {});
}

void ThreadCommunicator::barrier(const ProcessGroup& group) {
  GroupHandle& h = handle(group);
  const OpCall call = collective_call(h, OpKind::barrier);
  ActivityScope scope(*activity_, call);
  rendezvous(
      h, call, Contribution{}, [](Slot&) {}, [](Slot&) {});
}

}  // namespace pipetune::comm
