#include "tuner/cost/reshard_cost.hpp"

#include <string>

#include "engine/errors.hpp"

namespace pipetune::tuner {

int reshard_copies(int senders, int receivers) {
  if (senders < 1 || receivers < 1)
    throw SpecError({"plan.stage_tp"},
                    "a stage boundary needs at least one TP rank on each side "
                    "(got " +
                        std::to_string(senders) + " senders, " + std::to_string(receivers) +
                        " receivers)");
  return (receivers + senders - 1) / senders;
}

double reshard_time(int senders, int receivers, double bytes, const GroupLink& link) {
  // The copies leave one sender in series: each pays the hop's latency and its bytes.
  return reshard_copies(senders, receivers) * collective_time(Collective::SendRecv, bytes, link);
}

}  // namespace pipetune::tuner
