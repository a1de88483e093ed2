#include "db/import/nsys_sendrecv.hpp"

#include <algorithm>
#include <cctype>
#include <unordered_set>

namespace pipetune::db::import_detail {

NcclCall nccl_call_of(std::string_view name) {
  auto is = [&](std::string_view call) {
    return name.substr(0, call.size()) == call &&
           (name.size() == call.size() ||
            !std::isalnum(static_cast<unsigned char>(name[call.size()])));
  };
  if (name.substr(0, 4) != "nccl") return NcclCall::None;
  if (is("ncclSend")) return NcclCall::Send;
  if (is("ncclRecv")) return NcclCall::Recv;
  if (is("ncclGroupStart")) return NcclCall::GroupStart;
  if (is("ncclGroupEnd")) return NcclCall::GroupEnd;
  return NcclCall::Other;
}

SendRecvDirections::SendRecvDirections(
    const std::vector<GpuActivity>& gpu, const std::vector<ApiCall>& api,
    const std::vector<NvtxRange>& nvtx, const std::vector<std::int64_t>& range_domains,
    const std::unordered_map<std::int64_t, std::string>& domain_names) {
  std::unordered_set<std::int64_t> correlations;
  for (const GpuActivity& a : gpu)
    if (a.nccl == profiler::NcclKernel::SendRecv) correlations.insert(a.record.correlation);
  if (correlations.empty()) return;
  for (const ApiCall& c : api)
    if (correlations.count(c.correlation))
      launches_[{c.process, c.correlation}] = {c.tid, c.start_ns};
  const auto in_nccl_domain = [&](std::size_t range_index) {
    const std::int64_t d = range_domains[range_index];
    if (d == 0) return false;
    auto it = domain_names.find(d);
    return it == domain_names.end() || it->second == "NCCL";
  };
  for (std::size_t i = 0; i < nvtx.size(); ++i) {
    const NvtxRange& r = nvtx[i];
    if (r.nccl == NcclCall::None || !in_nccl_domain(i)) continue;
    nccl_calls_[r.process | r.tid].emplace_back(r.start_ns, r.end_ns, r.nccl);
  }
  for (auto& [thread, calls] : nccl_calls_) std::sort(calls.begin(), calls.end());
}

bool SendRecvDirections::has_launch(const GpuActivity& a) const {
  return launches_.count({a.process, a.record.correlation}) > 0;
}

profiler::SpanKind SendRecvDirections::direction(const GpuActivity& a) const {
  using profiler::SpanKind;
  auto launch = launches_.find({a.process, a.record.correlation});
  if (launch == launches_.end()) return SpanKind::Send;
  auto calls = nccl_calls_.find(a.process | launch->second.first);
  if (calls == nccl_calls_.end()) return SpanKind::Send;
  const auto& v = calls->second;  // (start, end, call) by start
  const std::int64_t t = launch->second.second;
  auto it = std::upper_bound(v.begin(), v.end(), t,
                             [](std::int64_t x, const auto& c) { return x < std::get<0>(c); });
  if (it == v.begin()) return SpanKind::Send;
  std::size_t i = static_cast<std::size_t>(it - v.begin()) - 1;
  if (std::get<1>(v[i]) < t) return SpanKind::Send;  // no call encloses the launch
  bool send = false, recv = false;
  if (std::get<2>(v[i]) == NcclCall::GroupEnd) {
    for (std::size_t j = i; j-- > 0;) {
      const NcclCall c = std::get<2>(v[j]);
      if (c == NcclCall::GroupStart || c == NcclCall::GroupEnd) break;
      send = send || c == NcclCall::Send;
      recv = recv || c == NcclCall::Recv;
    }
  } else {
    send = std::get<2>(v[i]) == NcclCall::Send;
    recv = std::get<2>(v[i]) == NcclCall::Recv;
  }
  return recv && !send ? SpanKind::Recv : SpanKind::Send;
}

}  // namespace pipetune::db::import_detail
