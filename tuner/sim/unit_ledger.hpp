// Activation units one rank holds on its device and on its host, for the simulator's offload
// tier (KARMA). An offload copy ends, and a prefetching reload starts, at times that lie among
// the rank's later or earlier ops, so the changes reach the ledger out of time order: each waits
// until nothing earlier can come, then the changes apply in time order, those of one instant
// together (frees before allocations, so an instant never shows both at once).
#pragma once

#include <algorithm>
#include <cstddef>
#include <vector>

namespace pipetune::sim::detail {

class UnitLedger {
 public:
  // At time t (seconds), the device gains device_delta units and the host host_delta.
  void add(double t, double device_delta, double host_delta) {
    // Kept in time order as they come (a few at a time): settle() then needs no sort.
    const auto at = std::upper_bound(pending_.begin(), pending_.end(), t,
                                     [](double x, const Change& c) { return x < c.t; });
    pending_.insert(at, {t, device_delta, host_delta});
  }

  // Applies every change before `watermark` (the caller knows none earlier can still come),
  // calling on_change(t, device, host) once per instant with the units held from t on.
  template <class OnChange>
  void settle(double watermark, OnChange&& on_change) {
    if (pending_.empty()) return;
    std::size_t i = 0;
    while (i < pending_.size() && pending_[i].t < watermark) {
      const double t = pending_[i].t;
      for (; i < pending_.size() && pending_[i].t == t; ++i) {
        device_ += pending_[i].device;
        host_ += pending_[i].host;
      }
      peak_device_ = std::max(peak_device_, device_);
      peak_host_ = std::max(peak_host_, host_);
      on_change(t, device_, host_);
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(i));
  }

  double peak_device() const { return peak_device_; }
  double peak_host() const { return peak_host_; }

 private:
  struct Change {
    double t = 0.0, device = 0.0, host = 0.0;
  };
  std::vector<Change> pending_;  // in time order; a few ops' worth
  double device_ = 0.0, host_ = 0.0, peak_device_ = 0.0, peak_host_ = 0.0;
};

}  // namespace pipetune::sim::detail
