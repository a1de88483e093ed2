#include "tuner/search/plan_enumeration.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <exception>
#include <iterator>
#include <optional>
#include <thread>

#include "engine/errors.hpp"
#include "engine/schedule/generators.hpp"
#include "engine/spec/validate.hpp"
#include "tuner/cost/collectives.hpp"
#include "tuner/cost/sparse_embedding_cost.hpp"
#include "tuner/memory/memory_model.hpp"
#include "tuner/search/auto_layer_split.hpp"
#include "tuner/search/offload_options.hpp"
#include "tuner/search/placement_options.hpp"
#include "tuner/search/stage_layout_options.hpp"
#include "tuner/search/stage_recompute_choice.hpp"

namespace pipetune::tuner {

std::string reason_key(std::string_view message) {
  auto is_alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  auto is_digit = [](char c) { return c >= '0' && c <= '9'; };
  std::string out;
  for (std::size_t i = 0; i < message.size();) {
    if (!is_digit(message[i])) {
      out += message[i++];
      continue;
    }
    std::size_t j = i;
    while (j < message.size() && (is_digit(message[j]) || message[j] == '.')) ++j;
    const bool in_name = (i > 0 && (is_alpha(message[i - 1]) || message[i - 1] == '-')) ||
                         (j < message.size() && is_alpha(message[j]));
    out += in_name ? std::string(message.substr(i, j - i)) : std::string("N");
    i = j;
  }
  return out;
}

int search_threads(const SearchSpace& space) {
  return space.threads > 0 ? space.threads
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

namespace {

// The all-to-all chunk counts the search tries on MoE plans with ep > 1 (besides 1).
constexpr int kMoeChunkChoices[] = {2, 4};
// The gradient bytes the sparse embedding gradient's bytes are weighed at before a plan is tried
// (ExecutionOptions::gradient_reduce_bytes' default, fp32); the evaluator then times it.
constexpr double kSparseGradientBytes = 4.0;

std::vector<int> divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

bool is_v_schedule(std::string_view s) {
  return schedule::schedule_placement(s) == schedule::Placement::VShape;
}

// Each list of the search space names an entry once: a repeated entry would score every plan
// it makes twice.
template <class T, class Name>
void require_distinct(const std::vector<T>& items, const char* what, Name name) {
  for (std::size_t i = 0; i < items.size(); ++i)
    for (std::size_t j = 0; j < i; ++j)
      if (items[i] == items[j])
        throw InputError(std::string(what) + ": '" + name(items[i]) + "' is listed twice");
}

const std::vector<std::string> kVocabModes = {"none",    "redis",   "auto",
                                              "vocab-1", "vocab-2", "interlaced"};

class Enumerator {
 public:
  Enumerator(const SearchSpace& space, SearchResult& result)
      : s_(space), r_(result), node_group_orders_(node_group_orders(space.cluster)) {}

  std::vector<SearchJob> run() {
    require_distinct(s_.schedules, "schedules", [](const std::string& x) { return x; });
    require_distinct(s_.vocab_modes, "vocabulary modes", [](const std::string& x) { return x; });
    require_distinct(s_.micro_batch_sizes, "micro-batch sizes",
                     [](int x) { return std::to_string(x); });
    require_distinct(s_.recomputes, "recomputation modes",
                     [](spec::Recompute x) { return std::string(spec::recompute_name(x)); });
    require_distinct(s_.zero_stages, "ZeRO stages", [](int x) { return std::to_string(x); });
    const int n = s_.cluster.devices;
    if (n <= 0) throw InputError("the cluster has no devices");
    if (s_.global_batch <= 0)
      throw InputError("--global-batch must be positive (got " + std::to_string(s_.global_batch) +
                       ")");
    std::vector<Factoring> factorings;
    for (int tp : divisors(n)) {
      if (tp > s_.cluster.devices_per_node) {
        prune("tp spans nodes");
        continue;
      }
      if (s_.model.heads % tp != 0 || s_.model.kv_heads % tp != 0) {
        prune("tp does not divide the attention heads");
        continue;
      }
      for (int pp : divisors(n / tp)) {
        if (pp > s_.model.layers) {
          prune("pp exceeds the layers");
          continue;
        }
        const int dp = n / (tp * pp);
        if (s_.global_batch % dp != 0) {
          prune("global batch not divisible by dp");
          continue;
        }
        for (int ep : expert_degrees(dp)) factorings.push_back({tp, pp, dp, ep});
      }
    }
    if (factorings.empty())
      throw InputError("no valid factorisation of " + std::to_string(n) +
                       " GPUs into tp x pp x dp for " + s_.model.name + " at global batch " +
                       std::to_string(s_.global_batch) + " (" + reasons() + ")");
    const int threads = std::min(search_threads(s_), static_cast<int>(factorings.size()));
    // A cap on the plans stops at the first ones in this order: one thread keeps it.
    if (s_.max_candidates > 0 || threads < 2) {
      for (const Factoring& f : factorings) {
        enumerate_batches(f.tp, f.pp, f.dp, f.ep);
        if (full()) break;
      }
      return std::move(jobs_);
    }
    return enumerate_in_parallel(factorings, threads);
  }

 private:
  struct Factoring {
    int tp, pp, dp, ep;
  };

  Enumerator(const SearchSpace& space, SearchResult& result,
             const std::vector<std::vector<int>>& node_group_orders)
      : s_(space), r_(result), node_group_orders_(node_group_orders) {}

  // Each factoring's plans on `threads` threads, each into its own part, joined in the order of
  // the factorings: the jobs, counts and smallest infeasible plan are those of one thread.
  std::vector<SearchJob> enumerate_in_parallel(const std::vector<Factoring>& factorings,
                                               int threads) {
    struct Part {
      SearchResult result;
      std::vector<SearchJob> jobs;
      std::exception_ptr error;
    };
    std::vector<Part> parts(factorings.size());
    std::atomic<std::size_t> next{0};
    auto worker = [&] {
      for (std::size_t i = next.fetch_add(1); i < factorings.size(); i = next.fetch_add(1)) {
        Part& part = parts[i];
        try {
          Enumerator e(s_, part.result, node_group_orders_);
          const Factoring& f = factorings[i];
          e.enumerate_batches(f.tp, f.pp, f.dp, f.ep);
          part.jobs = std::move(e.jobs_);
        } catch (...) {
          part.error = std::current_exception();
        }
      }
    };
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
    worker();
    for (auto& t : pool) t.join();
    std::size_t total = 0;
    for (const Part& part : parts) total += part.jobs.size();
    jobs_.reserve(total);
    for (Part& part : parts) {
      if (part.error) std::rethrow_exception(part.error);
      r_.candidates_enumerated += part.result.candidates_enumerated;
      for (const auto& [reason, count] : part.result.pruned) r_.pruned[reason] += count;
      auto& least = r_.smallest_infeasible;
      const auto& found = part.result.smallest_infeasible;
      if (found && (!least || found->score.peak_memory_bytes < least->score.peak_memory_bytes))
        least = found;
      std::move(part.jobs.begin(), part.jobs.end(), std::back_inserter(jobs_));
    }
    return std::move(jobs_);
  }

  bool full() const {
    return s_.max_candidates > 0 && static_cast<std::int64_t>(jobs_.size()) >= s_.max_candidates;
  }
  void prune(const std::string& reason) { ++r_.pruned[reason]; }
  std::string reasons() const {
    std::string s;
    for (const auto& [k, v] : r_.pruned) s += (s.empty() ? "" : "; ") + k;
    return s;
  }

  std::vector<int> expert_degrees(int dp) {
    if (!spec::is_moe(s_.model)) return {1};
    std::vector<int> out;
    for (int ep : divisors(dp)) {
      if (s_.model.experts % ep == 0)
        out.push_back(ep);
      else
        prune("ep does not divide the experts");
    }
    return out;
  }

  void enumerate_batches(int tp, int pp, int dp, int ep) {
    const std::int64_t per_replica = s_.global_batch / dp;
    for (int mbs : s_.micro_batch_sizes) {
      if (mbs <= 0 || per_replica % mbs != 0) {
        prune("global batch not divisible by micro-batch x dp");
        continue;
      }
      spec::ParallelPlan p;
      p.tp = tp;
      p.pp = pp;
      p.dp = dp;
      p.ep = ep;
      p.micro_batch_size = mbs;
      p.microbatches = static_cast<int>(per_replica / mbs);
      p.global_batch = s_.global_batch;
      p.sequence_parallel = tp > 1;
      enumerate_schedules(p);
      if (full()) return;
    }
  }

  void enumerate_schedules(const spec::ParallelPlan& base) {
    std::vector<std::string> names = s_.schedules;
    const bool asked = !names.empty();
    if (names.empty())
      for (auto n : schedule::schedule_names()) names.emplace_back(n);
    if (base.pp == 1) names = {"1f1b"};  // no pipeline: every schedule is the same
    for (const std::string& name : names) {
      // Token slices need a dense model (spec::validate): counted only where asked for by name.
      // Skipped stages train another function than the full pipeline: by name only.
      if (schedule::skips_stages(name) && !asked) continue;
      if (schedule::supports_slices(name) && spec::is_moe(s_.model)) {
        if (asked) prune(name + " cuts micro-batches into token slices, which need a dense model");
        continue;
      }
      for (int chunks : chunk_options(name, base.pp)) {
        spec::ParallelPlan p = base;
        p.schedule = name;
        p.chunks = chunks;
        enumerate_vocab(p);
        if (full()) return;
      }
    }
  }

  std::vector<int> chunk_options(const std::string& name, int pp) {
    if (pp == 1) return {1};
    if (is_v_schedule(name)) return {2};
    if (name != "interleaved-1f1b" && name != "layered") return {1};
    std::vector<int> out;
    for (int v = 2; v <= s_.max_chunks; ++v) {
      if (s_.model.layers % (static_cast<std::int64_t>(pp) * v) == 0)
        out.push_back(v);
      else
        prune("interleaved chunks do not split the layers evenly");
    }
    // layered: modular placement too (one layer per group, layer l on rank l mod pp), the
    // paper's pairing of the two, where it is more chunks than the others.
    if (name == "layered" && s_.model.layers % pp == 0 && s_.model.layers / pp > s_.max_chunks)
      out.push_back(static_cast<int>(s_.model.layers / pp));
    return out;
  }

  void enumerate_vocab(const spec::ParallelPlan& base) {
    const bool pipelined = base.pp > 1;
    // Modes asked for by name: a combination that cannot exist is counted with its reason, so
    // that a search that finds nothing says why ("zb-v does not support vocab-1"). Every mode
    // (none asked for) means each where it can exist: the others are not plans to count.
    const bool asked = !s_.vocab_modes.empty();
    const auto impossible = [&](const std::string& reason) {
      if (asked) prune(reason);
    };
    for (const std::string& mode : asked ? s_.vocab_modes : kVocabModes) {
      spec::ParallelPlan p = base;
      if (mode == "none") {
      } else if (!pipelined) {
        impossible(mode + " needs a pipeline (pp > 1)");  // without one, every mode is none
        continue;
      } else if (mode == "redis" || mode == "auto") {
        if (is_v_schedule(p.schedule) || p.chunks > 1) {
          impossible(mode + " needs one layer group per stage (" + p.schedule + " has more)");
          continue;
        }
        // auto: split per recomputation and ZeRO stage (enumerate_memory_knobs), which change
        // the stages' memory.
        if (mode == "redis")
          p.layer_split = redistributed_layer_split(s_.model.layers, p.pp, 0.0,
                                                    output_layer_in_layers(s_.model));
      } else {
        p.vocab = schedule::parse_vocab_mode(mode);
        if (!schedule::supports_vocab(p.schedule, p.vocab)) {
          impossible(p.schedule + " does not support " + mode);
          continue;
        }
      }
      enumerate_memory_knobs(p, mode);
      if (full()) return;
    }
  }

  void enumerate_memory_knobs(const spec::ParallelPlan& base, const std::string& vocab_label) {
    for (spec::Recompute rc : s_.recomputes) {
      for (int zero : s_.zero_stages) {
        if (zero > 0 && base.dp == 1) continue;                    // nothing to shard over
        if (zero == 1 && spec::reduces_per_group(base)) continue;  // refused (validate)
        spec::ParallelPlan p = base;
        p.recompute = rc;
        p.zero_stage = zero;
        add_candidate(p, vocab_label);
        if (full()) return;
        // Whole experts inside the TP group (PPMoE; Tutel's expert- against tensor-style
        // experts): GEMMs tp times wider against the imbalance of ep * tp expert groups.
        std::vector<spec::ParallelPlan> expert_plans = {p};
        if (s_.whole_experts && whole_experts_fit(base)) {
          spec::ParallelPlan whole = p;
          whole.expert_layouts = {spec::ExpertLayout::Whole};
          add_candidate(whole, vocab_label);
          if (full()) return;
          expert_plans.push_back(std::move(whole));
        }
        // Sharded experts deduplicated over TP (Parm): 1/tp of the all-to-all's bytes against
        // an all-gather and a reduce-scatter inside the TP group around the experts' GEMMs.
        if (s_.dedup_experts && spec::is_moe(s_.model) && base.tp > 1 && base.ep > 1) {
          spec::ParallelPlan dedup = p;
          dedup.expert_layouts = {spec::ExpertLayout::Dedup};
          add_candidate(dedup, vocab_label);
          if (full()) return;
          expert_plans.push_back(std::move(dedup));
        }
        // The MoE all-to-all in chunks overlapping the experts' GEMMs (Tutel, FSMoE): each
        // chunk count trades the all-to-all it hides against the latency it adds.
        if (s_.moe_chunks && base.ep > 1 && spec::is_moe(s_.model))
          for (const spec::ParallelPlan& q : expert_plans)
            for (int chunks : kMoeChunkChoices) {
              spec::ParallelPlan chunked = q;
              chunked.moe_chunks = chunks;
              add_candidate(std::move(chunked), vocab_label);
              if (full()) return;
            }
        // Tutel's two-phase all-to-all where the EP group spans nodes: fewer inter-node steps
        // against a phase inside the node in series (in one chunk and the most chunks).
        if (const int g = two_phase_node_ranks(p); g > 0)
          for (const spec::ParallelPlan& q : expert_plans)
            for (int chunks : {1, kMoeChunkChoices[std::size(kMoeChunkChoices) - 1]}) {
              if (chunks > 1 && !s_.moe_chunks) continue;
              spec::ParallelPlan two = q;
              two.moe_chunks = chunks;
              two.moe_a2a_node_ranks = g;
              add_candidate(std::move(two), vocab_label);
              if (full()) return;
            }
        // EmbRace's sparse embedding gradient: the touched rows exchanged (under ZeRO sent to
        // their owners) instead of the table reduced, where that moves fewer bytes (a large
        // vocabulary against the tokens each replica, or each micro-batch, embeds).
        if (s_.sparse_embedding &&
            sparse_embedding_may_pay(s_.model, p, kSparseGradientBytes, s_.embedding_rows_factor)) {
          spec::ParallelPlan sparse = p;
          sparse.sparse_embedding_gradient = true;
          add_candidate(std::move(sparse), vocab_label);
          if (full()) return;
        }
        // Layered gradient reduction (ZeRO 0, 2 and 3): each layer group's all-reduce (or, under
        // ZeRO-2 and 3, its held gradients' one reduce-scatter) as an R op beside the backwards
        // still to come. With one group per rank it is ready only after the last backward, which
        // hides less than the reduction after the pipeline already overlaps.
        if (zero != 1 && base.dp > 1 && base.chunks > 1 && !spec::reduces_per_group(base)) {
          spec::ParallelPlan layered = p;
          layered.layered_reduction = true;
          add_candidate(std::move(layered), vocab_label);
          if (full()) return;
        }
        if (s_.stage_layouts && vocab_label == "none") add_stage_layouts(p, vocab_label);
        if (full()) return;
      }
    }
    enumerate_stage_recompute(base, vocab_label);
  }

  // Whether the plan's experts can sit whole inside its TP group: an MoE model, tp > 1 and each
  // EP rank's experts divisible by tp (spec::validate_expert_layouts), one tp for every stage.
  bool whole_experts_fit(const spec::ParallelPlan& p) const {
    return spec::is_moe(s_.model) && p.tp > 1 && p.stage_tp.empty() &&
           (s_.model.experts / p.ep) % p.tp == 0;
  }

  // The EP ranks a node holds when the plan's EP group spans nodes with the same number on each
  // (its devices are dp_stride apart from the first slot), or 0: no two-phase all-to-all to try.
  int two_phase_node_ranks(const spec::ParallelPlan& p) const {
    if (!s_.two_phase_all_to_all || !spec::is_moe(s_.model) || p.ep <= 2 || !p.stage_tp.empty())
      return 0;
    const GroupLink link = group_link(s_.cluster, 0, spec::device_strides(p).dp_stride, p.ep);
    const int g = link.members_per_node;
    return link.inter_node && g > 1 && g < p.ep && p.ep % g == 0 ? g : 0;
  }

  // Per-stage layouts of a uniform plan (stage_layout_options.hpp), through the same rules,
  // memory check and bounds as every plan.
  void add_stage_layouts(const spec::ParallelPlan& uniform, const std::string& vocab_label) {
    StageLayoutVariants variants = stage_layout_variants(s_.model, s_.cluster, uniform);
    if (variants.spanning_nodes > 0) r_.pruned[kStageLayoutSpansNodes] += variants.spanning_nodes;
    for (spec::ParallelPlan& p : variants.plans) {
      add_candidate(std::move(p), vocab_label);
      if (full()) return;
    }
  }

  // Per-stage recomputation (stage_recompute_choice.hpp) and offload (offload_options.hpp) for
  // each ZeRO stage: only where the plan does not fit without recomputation by the estimate (and
  // each stage's least recomputation that fits is not one mode for all). The estimate takes the
  // base plan's layer split (even for auto: the auto split is then chosen for each plan).
  void enumerate_stage_recompute(const spec::ParallelPlan& base, const std::string& vocab_label) {
    if (base.pp < 2 && !s_.offload) return;
    for (int zero : s_.zero_stages) {
      if (zero > 0 && base.dp == 1) continue;
      if (zero == 1 && spec::reduces_per_group(base)) continue;
      spec::ParallelPlan knobs = base;
      knobs.zero_stage = zero;
      std::vector<spec::ParallelPlan> plans;
      try {
        spec::validate(s_.model, s_.cluster, knobs);
        for (auto& modes : stage_recompute_candidates(s_.model, s_.cluster, knobs, s_.recomputes,
                                                      &stage_parameters_))
          plans.emplace_back(knobs).stage_recompute = std::move(modes);
        if (s_.offload)
          for (auto& p :
               offload_variants(s_.model, s_.cluster, knobs, s_.recomputes, &stage_parameters_))
            plans.push_back(std::move(p));
      } catch (const InputError&) {
        continue;  // the uniform plans above count the rule it breaks
      }
      for (spec::ParallelPlan& p : plans) {
        add_candidate(std::move(p), vocab_label);
        if (full()) return;
      }
    }
  }

  // Counts the plan, prunes it by the plan rules and its static memory, else queues it.
  void add_candidate(spec::ParallelPlan p, const std::string& vocab_label) {
    // The auto split's plan is not a candidate when no split fits or it is the even one.
    if (vocab_label == "auto" && !split_automatically(p)) return;
    ++r_.candidates_enumerated;
    // The rules searches break by the thousand, counted without a throw (validate checks them).
    std::optional<SpecError> broken = spec::token_slice_conflict(s_.model, p);
    if (!broken) broken = spec::layer_group_shortage(s_.model, p);
    if (broken) {
      prune("plan rule: " + reason_key(broken->what()));
      return;
    }
    try {
      spec::validate(s_.model, s_.cluster, p);
    } catch (const SpecError& e) {
      prune("plan rule: " + reason_key(e.what()));
      return;
    }
    const schedule::Placement placement = schedule::schedule_placement(p.schedule);
    const MemoryEstimate fixed = memory_peaks(stage_parameters_.get(s_.model, p, placement),
                                              s_.cluster, p, std::vector<double>(p.pp, 0.0));
    if (!fixed.fits()) {
      prune("weights, gradients and optimizer state exceed device memory");
      note_infeasible(p, vocab_label, fixed.peak_bytes);
      return;
    }
    push_placements(p, vocab_label);
  }

  // The plan in each placement (placement_options.hpp); the first is the default, counted
  // already.
  void push_placements(const spec::ParallelPlan& base, const std::string& vocab_label) {
    bool first = true;
    // Without a pipeline every rank plays the same part: the node groups' order changes nothing.
    const std::vector<std::vector<int>> listed_only = {{}};
    const auto& group_orders = base.pp > 1 ? node_group_orders_ : listed_only;
    for (spec::RankOrder order : rank_orders(s_.cluster, base)) {
      // Per-stage layouts place their stages in tp-dp-pp order only (spec::validate).
      if (spec::stage_tp_varies(base) && order != spec::RankOrder::TpDpPp) continue;
      for (const std::vector<int>& groups : group_orders) {
        if (!first) ++r_.candidates_enumerated;
        first = false;
        spec::ParallelPlan p = base;
        p.rank_order = order;
        p.node_group_order = groups;
        jobs_.push_back({std::move(p), vocab_label});
        if (full()) return;
      }
    }
  }

  // The auto layer split of a plan (auto_layer_split.hpp); false (counted as pruned) when no
  // split fits or the split is the even one (the plan of mode "none").
  bool split_automatically(spec::ParallelPlan& p) {
    std::optional<std::vector<int>> split;
    try {
      split = splitter_.split(s_.model, s_.cluster, p);
    } catch (const InputError& e) {
      prune("plan rule: " + reason_key(e.what()));
      return false;
    }
    if (!split) {
      prune("auto split: no split fits every stage's memory");
      return false;
    }
    p.layer_split = *split;
    if (spec::layer_split(s_.model, p) == spec::even_layer_split(s_.model.layers, p.pp)) {
      prune("auto split is the even split (mode none)");
      return false;
    }
    return true;
  }

  void note_infeasible(const spec::ParallelPlan& p, const std::string& label, double bytes) {
    auto& least = r_.smallest_infeasible;
    if (least && least->score.peak_memory_bytes <= bytes) return;
    CandidateScore score;
    score.infeasible_reason = "weights, gradients and optimizer state exceed device memory";
    score.peak_memory_bytes = bytes;
    least = ScoredPlan{p, label, score};
  }

  const SearchSpace& s_;
  SearchResult& r_;
  std::vector<SearchJob> jobs_;
  std::vector<std::vector<int>> node_group_orders_;
  AutoLayerSplitter splitter_;  // the auto splits of the problems this enumerator met
  StageParameterMemo stage_parameters_;
};

}  // namespace

std::vector<SearchJob> enumerate_plans(const SearchSpace& space, SearchResult& result) {
  return Enumerator(space, result).run();
}

double output_layer_in_layers(const spec::ModelSpec& model) {
  const double h = static_cast<double>(model.hidden), s = static_cast<double>(model.seq_len);
  const double v = static_cast<double>(model.vocab);
  return 6.0 * v / (72.0 * h + 6.0 * s);
}

const std::vector<std::string>& vocab_options() {
  return kVocabModes;
}

std::vector<int> redistributed_layer_split(std::int64_t layers, int pp, double input_layers,
                                           double output_layers) {
  if (pp <= 1) return {static_cast<int>(layers)};
  const double target = (static_cast<double>(layers) + input_layers + output_layers) / pp;
  auto clamp = [&](double x) {
    return static_cast<int>(std::clamp<double>(std::round(x), 0.0, static_cast<double>(layers)));
  };
  std::vector<int> split(static_cast<std::size_t>(pp), 0);
  int first = clamp(target - input_layers), last = clamp(target - output_layers);
  if (first + last > layers) last = static_cast<int>(layers) - first;
  int rest = static_cast<int>(layers) - first - last;
  if (pp == 2) {
    first += rest;  // no middle stage: the first takes what is left
    rest = 0;
  }
  split.front() = first;
  split.back() = last;
  const int middle = pp - 2;
  for (int i = 0; i < middle; ++i)
    split[static_cast<std::size_t>(i + 1)] = rest / middle + (i < rest % middle ? 1 : 0);
  return split;
}

}  // namespace pipetune::tuner
