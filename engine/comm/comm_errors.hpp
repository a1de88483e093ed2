// Errors raised by communication. Every one is a RankFailure: the run cannot go on, and the
// message says which rank failed, in which op, and (for a rank woken by someone else's failure)
// what the woken rank was doing.
#pragma once

#include <stdexcept>
#include <string>

namespace pipetune::comm {

class RankFailure : public std::runtime_error {
 public:
  RankFailure(int failed_rank, std::string failed_op, const std::string& message)
      : std::runtime_error(message), failed_rank_(failed_rank), failed_op_(std::move(failed_op)) {}

  // The rank whose failure ended the run (-1 when no single rank is to blame).
  int failed_rank() const { return failed_rank_; }
  // The op that rank was in, e.g. "all_reduce(sum, 4 floats) on dp group [0, 2]".
  const std::string& failed_op() const { return failed_op_; }

 private:
  int failed_rank_;
  std::string failed_op_;
};

// A wait outlasted the watchdog limit; the message names the ranks that never arrived.
class WatchdogTimeout : public RankFailure {
 public:
  using RankFailure::RankFailure;
};

// Ranks called different collectives (or sizes, roots, reduce ops) at the same point of a group,
// or a receive does not match the size of the message sent.
class CommMismatch : public RankFailure {
 public:
  using RankFailure::RankFailure;
};

}  // namespace pipetune::comm
