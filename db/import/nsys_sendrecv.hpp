// The direction of NCCL SendRecv kernels in an nsys export (private to db/import): a SendRecv
// kernel does not say whether it sends or receives, so the NCCL API ranges around the CUDA call
// that launched it tell.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "db/import/nsys_rows.hpp"

namespace pipetune::db::import_detail {

// What a NCCL API range's name says it is (ncclSend, ncclRecv, group start or end, another
// NCCL call, or none).
NcclCall nccl_call_of(std::string_view name);

class SendRecvDirections {
 public:
  // The CUDA calls that launched SendRecv kernels, and the NCCL API ranges of each thread: those
  // in the "NCCL" domain or an unnamed non-default one (NCCL's domain-create row can fall
  // outside a trimmed capture). range_domains holds each range's domainId, domain_names the
  // named domains.
  SendRecvDirections(const std::vector<GpuActivity>& gpu, const std::vector<ApiCall>& api,
                     const std::vector<NvtxRange>& nvtx,
                     const std::vector<std::int64_t>& range_domains,
                     const std::unordered_map<std::int64_t, std::string>& domain_names);

  // Whether the capture holds the CUDA call that launched the kernel.
  bool has_launch(const GpuActivity& a) const;
  // Send unless the NCCL calls that issued the launch show ncclRecv and no ncclSend.
  profiler::SpanKind direction(const GpuActivity& a) const;

 private:
  struct PairHash {
    std::size_t operator()(const std::pair<std::int64_t, std::int64_t>& p) const noexcept {
      // Unsigned: the mix may wrap (signed overflow would be undefined).
      return std::hash<std::uint64_t>{}(static_cast<std::uint64_t>(p.first) * 1000003u ^
                                        static_cast<std::uint64_t>(p.second));
    }
  };
  // (process, correlationId) -> (tid, start) of the CUDA call that launched a SendRecv kernel.
  std::unordered_map<std::pair<std::int64_t, std::int64_t>, std::pair<std::int32_t, std::int64_t>,
                     PairHash>
      launches_;
  // globalTid -> NCCL API calls (start, end, call) by start.
  std::unordered_map<std::int64_t, std::vector<std::tuple<std::int64_t, std::int64_t, NcclCall>>>
      nccl_calls_;
};

}  // namespace pipetune::db::import_detail
