// Collectives a rank runs beside its own compute: on a thread of the rank's (a stream of
// collectives), in the order submitted, over a channel of its communicator
// (Communicator::open_channel), so that they never queue behind the rank's own collectives on the
// same group. Every member of a group submits the group's collectives in the same order, as on
// the communicator itself. The rank submits, computes, and waits for the collective it needs
// next: the chunked all-to-all of MoE layers (ParallelPlan::moe_chunks) overlaps the experts'
// GEMMs so.
#pragma once

#include <cstdint>
#include <exception>
#include <span>

#include "engine/comm/process_group.hpp"

namespace pipetune::comm {

class CollectiveStream {
 public:
  virtual ~CollectiveStream() = default;
  using Ticket = std::uint64_t;
  // output <- the group's all-to-all of input (Communicator::all_to_all). Both spans must stay
  // valid, and input unchanged, until wait(ticket) returns.
  virtual Ticket all_to_all(const ProcessGroup& group, std::span<const float> input,
                            std::span<float> output) = 0;
  // output <- the two-phase all-to-all of input over `node` then `cross`
  // (two_phase_all_to_all.hpp), in host memory, on the same terms.
  virtual Ticket all_to_all_two_phase(const ProcessGroup& node, const ProcessGroup& cross,
                                      std::span<const float> input, std::span<float> output) = 0;
  // When a collective ran, on the clock of the stream's owner (its recorder's).
  struct Ran {
    std::int64_t start_ns = 0;
    std::int64_t end_ns = 0;
  };
  // Blocks until the ticket's collective has run; rethrows the stream's first error.
  virtual Ran wait(Ticket ticket) = 0;
  // The owner met `error` with collectives queued or running: the run fails with it (a
  // collective waiting on peers then ends), the queue is dropped, and this returns once none
  // runs, so the buffers they held may go.
  virtual void abandon(std::exception_ptr error) = 0;
};

}  // namespace pipetune::comm
