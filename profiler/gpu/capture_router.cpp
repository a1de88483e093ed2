#include "profiler/gpu/capture_router.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace pipetune::profiler {

bool is_kernel_launch_call(std::string_view name) {
  // Runtime (cuda...) and driver (cu...) spellings, with their _v2 / _ptsz / Ex suffixes.
  for (std::string_view part :
       {"LaunchKernel", "LaunchCooperativeKernel", "GraphLaunch", "LaunchGrid"})
    if (name.find(part) != std::string_view::npos) return true;
  return false;
}

bool is_launch_call(std::string_view name) {
  if (is_kernel_launch_call(name)) return true;
  for (std::string_view part : {"LaunchHostFunc", "Memcpy", "Memset"})
    if (name.find(part) != std::string_view::npos) return true;
  return false;
}

void CaptureRouter::assign_stream(std::uint32_t stream, std::int32_t rank) {
  const auto [it, added] = stream_rank_.emplace(stream, rank);
  if (!added && it->second != rank)
    throw std::invalid_argument("CUDA stream " + std::to_string(stream) + " is rank " +
                                std::to_string(it->second) + "'s, not rank " +
                                std::to_string(rank) + "'s");
}

std::int32_t CaptureRouter::rank_of_stream(std::int32_t stream) const {
  if (sole_rank_ >= 0) return sole_rank_;
  const auto it = stream_rank_.find(static_cast<std::uint32_t>(stream));
  return it == stream_rank_.end() ? -1 : it->second;
}

void CaptureRouter::add(GpuCapture capture) {
  for (ApiCallRecord& call : capture.api_calls) {
    if (!is_launch_call(call.name)) {
      ++counts_.other_calls;
      continue;
    }
    newest_call_ns_ = std::max(newest_call_ns_, call.start_ns);
    if (is_kernel_launch_call(call.name)) {
      // Correlation ids grow with each call (CUPTI numbers them process-wide): the tie-breaker.
      CallAt& newest = newest_of_thread_[call.thread_id];
      if (call.start_ns > newest.start_ns ||
          (call.start_ns == newest.start_ns && call.correlation > newest.correlation))
        newest = {call.start_ns, call.correlation};
    }
    by_arrival_.push_back({call.start_ns, call.correlation});
    calls_.insert_or_assign(call.correlation, std::move(call));
  }
  // Most captures hold one rank's records: room for all of them in the first's pending list.
  if (!capture.activities.empty()) {
    const std::int32_t first = rank_of_stream(capture.activities.front().stream);
    if (first >= 0) {
      std::vector<KernelRecord>& pending = pending_[first].activities;
      pending.reserve(pending.size() + capture.activities.size());
    }
  }
  for (KernelRecord& record : capture.activities) {
    const std::int32_t rank = rank_of_stream(record.stream);
    if (rank < 0) {
      ++counts_.unknown_stream;
      // Its launch call would wait for it until evicted: a record dropped takes its call along.
      calls_.erase(static_cast<std::uint32_t>(record.correlation));
      continue;
    }
    ++counts_.routed;
    pending_[rank].activities.push_back(std::move(record));
  }
  evict_aged_calls();
}

void CaptureRouter::evict_aged_calls() {
  // Calls whose record never came (dropped by CUPTI, a failed launch) must not pile up over a
  // long run, and finding them must not cost a step: a run that leaves calls unanswered keeps
  // up to max_call_age_ns_ of them, too many to scan at every take. So they go from the front of
  // the arrival order; an entry whose call was taken with its record is passed over.
  while (!by_arrival_.empty() &&
         newest_call_ns_ - by_arrival_.front().start_ns > max_call_age_ns_) {
    const CallAt oldest = by_arrival_.front();
    by_arrival_.pop_front();
    const auto it = calls_.find(oldest.correlation);
    if (it == calls_.end() || it->second.start_ns != oldest.start_ns) continue;
    ++counts_.evicted_calls;
    calls_.erase(it);
  }
  // Entries of taken calls wait here until they age out: rebuild the order from the calls still
  // waiting when those are most of it, so it stays within twice the waiting calls.
  constexpr std::size_t kSlack = 4096;
  if (by_arrival_.size() <= 2 * calls_.size() + kSlack) return;
  by_arrival_.clear();
  for (const auto& [correlation, call] : calls_)
    by_arrival_.push_back({call.start_ns, correlation});
  std::sort(by_arrival_.begin(), by_arrival_.end(), [](const CallAt& a, const CallAt& b) {
    return a.start_ns != b.start_ns ? a.start_ns < b.start_ns : a.correlation < b.correlation;
  });
}

bool CaptureRouter::holds_newest_launch(std::int32_t rank, std::uint32_t thread) const {
  const auto newest = newest_of_thread_.find(thread);
  const auto pending = pending_.find(rank);
  if (newest == newest_of_thread_.end() || pending == pending_.end()) return false;
  const std::vector<KernelRecord>& records = pending->second.activities;
  // The newest launch completes last on its stream: look from the end.
  return std::any_of(records.rbegin(), records.rend(), [&](const KernelRecord& r) {
    return static_cast<std::uint32_t>(r.correlation) == newest->second.correlation;
  });
}

GpuCapture CaptureRouter::take(std::int32_t rank) {
  GpuCapture out;
  const auto it = pending_.find(rank);
  if (it == pending_.end()) return out;
  out.activities = std::move(it->second.activities);
  pending_.erase(it);
  out.api_calls.reserve(out.activities.size());
  // One call may have several records (a graph launch): each call goes out once.
  for (const KernelRecord& record : out.activities) {
    const auto call = calls_.find(static_cast<std::uint32_t>(record.correlation));
    if (call == calls_.end()) continue;
    out.api_calls.push_back(std::move(call->second));
    calls_.erase(call);
  }
  return out;
}

}  // namespace pipetune::profiler
