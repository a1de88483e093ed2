// Renumbering the ranks of a trace part: a run whose ranks are numbered in another order than the
// one its analyses read (a plan's tp-pp-dp rank order, stored in Megatron's tp-dp-pp numbering so
// that stage = rank / (tp * dp) holds for every stored run of a uniform plan, and stages follow
// one another in rank order with per-stage layouts) has every rank number rewritten.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "profiler/gpu/kernel_record.hpp"
#include "profiler/trace.hpp"

namespace pipetune::profiler {

using RankMap = std::function<std::int32_t(std::int32_t)>;

// Lanes (and their "rank N ..." names), span peers, memory and counter samples.
void renumber_ranks(Trace& trace, const RankMap& rank_of);
void renumber_ranks(std::vector<KernelRecord>& kernels, const RankMap& rank_of);

}  // namespace pipetune::profiler
