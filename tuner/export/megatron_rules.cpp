#include "tuner/export/megatron_rules.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <regex>
#include <sstream>
#include <vector>

#include "engine/errors.hpp"

namespace pipetune::tuner {

namespace {

constexpr const char* kArgs =
    "NVIDIA/Megatron-LM megatron/training/arguments.py@d98e8a6 validate_args";
constexpr const char* kMicrobatches =
    "NVIDIA/Megatron-LM megatron/core/num_microbatches_calculator.py@d98e8a6 "
    "ConstantNumMicroBatchesCalculator";
constexpr const char* kTransformer =
    "NVIDIA/Megatron-LM megatron/core/transformer/transformer_config.py@d98e8a6 "
    "TransformerConfig.__post_init__";
constexpr const char* kLayout =
    "NVIDIA/Megatron-LM megatron/core/transformer/pipeline_parallel_layer_layout.py@d98e8a6 "
    "PipelineParallelLayerLayout";
constexpr const char* kModelParallel =
    "NVIDIA/Megatron-LM megatron/core/model_parallel_config.py@d98e8a6 "
    "ModelParallelConfig.__post_init__";
constexpr const char* kOptimizer =
    "NVIDIA/Megatron-LM megatron/core/optimizer/__init__.py@d98e8a6:1057 get_megatron_optimizer";
constexpr const char* kParallelState =
    "NVIDIA/Megatron-LM megatron/core/parallel_state.py@d98e8a6:898-907 "
    "initialize_model_parallel";

// Flags a pipetune launch may carry. Megatron-LM's parser defines each of them: by hand in
// megatron/training/arguments.py, or generated from the TransformerConfig / ModelParallelConfig /
// TrainingConfig dataclass fields (megatron/training/argument_utils.py); argparse rejects any
// other (parse_args without ignore_unknown_args). --use-tp-pp-dp-mapping is the
// DistributedInitConfig.use_tp_pp_dp_mapping field (megatron/training/config/common_config.py
// @d98e8a6), a store_true flag named after the field (argument_utils.py _format_arg_name).
constexpr std::array kKnownFlags = {"--num-layers",
                                    "--hidden-size",
                                    "--ffn-hidden-size",
                                    "--num-attention-heads",
                                    "--kv-channels",
                                    "--seq-length",
                                    "--max-position-embeddings",
                                    "--group-query-attention",
                                    "--num-query-groups",
                                    "--swiglu",
                                    "--normalization",
                                    "--position-embedding-type",
                                    "--disable-bias-linear",
                                    "--untie-embeddings-and-output-weights",
                                    "--num-experts",
                                    "--moe-router-topk",
                                    "--moe-ffn-hidden-size",
                                    "--moe-router-load-balancing-type",
                                    "--moe-aux-loss-coeff",
                                    "--moe-grouped-gemm",
                                    "--moe-token-dispatcher-type",
                                    "--moe-layer-freq",
                                    "--tensor-model-parallel-size",
                                    "--pipeline-model-parallel-size",
                                    "--context-parallel-size",
                                    "--sequence-parallel",
                                    "--use-tp-pp-dp-mapping",
                                    "--num-virtual-stages-per-pipeline-rank",
                                    "--num-layers-per-virtual-pipeline-stage",
                                    "--pipeline-model-parallel-layout",
                                    "--decoder-first-pipeline-num-layers",
                                    "--decoder-last-pipeline-num-layers",
                                    "--account-for-embedding-in-pipeline-split",
                                    "--account-for-loss-in-pipeline-split",
                                    "--expert-model-parallel-size",
                                    "--expert-tensor-parallel-size",
                                    "--use-distributed-optimizer",
                                    "--overlap-grad-reduce",
                                    "--overlap-param-gather",
                                    "--use-megatron-fsdp",
                                    "--data-parallel-sharding-strategy",
                                    "--ckpt-format",
                                    "--no-overlap-p2p-communication",
                                    "--recompute-granularity",
                                    "--recompute-method",
                                    "--recompute-num-layers",
                                    "--recompute-activations",
                                    "--cpu-offloading-num-layers",
                                    "--optimizer-cpu-offload",
                                    "--optimizer-offload-fraction",
                                    "--use-precision-aware-optimizer",
                                    "--micro-batch-size",
                                    "--global-batch-size",
                                    "--train-iters",
                                    "--bf16",
                                    "--fp16",
                                    "--lr",
                                    "--min-lr",
                                    "--lr-decay-style",
                                    "--lr-warmup-fraction",
                                    "--lr-warmup-iters",
                                    "--weight-decay",
                                    "--clip-grad",
                                    "--adam-beta1",
                                    "--adam-beta2",
                                    "--init-method-std",
                                    "--attention-backend",
                                    "--transformer-impl",
                                    "--mock-data",
                                    "--tokenizer-type",
                                    "--vocab-size",
                                    "--make-vocab-size-divisible-by",
                                    "--split",
                                    "--log-interval",
                                    "--eval-interval",
                                    "--eval-iters"};

class Checker {
 public:
  explicit Checker(const MegatronLaunch& l) : l_(l) {}

  bool has(const char* flag) const { return l_.flags.count(flag) > 0; }
  std::string str(const char* flag) const {
    auto it = l_.flags.find(flag);
    return it == l_.flags.end() ? "" : it->second;
  }
  // The flag's integer value, `fallback` when absent; a non-integer value is itself a violation.
  std::optional<std::int64_t> integer(const char* flag, std::optional<std::int64_t> fallback) {
    auto it = l_.flags.find(flag);
    if (it == l_.flags.end()) return fallback;
    try {
      std::size_t used = 0;
      const std::int64_t v = std::stoll(it->second, &used);
      if (used == it->second.size()) return v;
    } catch (const std::exception&) {
    }
    fail("argparse type=int", kArgs, std::string(flag) + " has value '" + it->second + "'");
    return fallback;
  }
  void require(bool ok, const char* rule, const char* source, const std::string& detail) {
    if (!ok) fail(rule, source, detail);
  }
  void fail(const char* rule, const char* source, const std::string& detail) {
    out_.push_back({rule, source, detail});
  }
  RuleViolations take() { return std::move(out_); }

 private:
  const MegatronLaunch& l_;
  RuleViolations out_;
};

std::string n(std::int64_t v) {
  return std::to_string(v);
}

// The launch's parallel sizes as Megatron-LM derives them from the flags and the world size.
struct ParallelSizes {
  std::int64_t tp = 1;
  std::int64_t pp = 1;
  std::int64_t cp = 1;
  std::int64_t dp = 0;
};

// argparse: every flag is one Megatron-LM defines; validate_args: the arguments every model needs.
void check_flags_known_and_required(Checker& c, const MegatronLaunch& l) {
  for (const auto& [flag, value] : l.flags) {
    bool known = false;
    for (const char* k : kKnownFlags) known = known || flag == k;
    // argparse (allow_abbrev=False) rejects a flag no argument group defines.
    c.require(known, "every flag is one Megatron-LM defines", kArgs, "unknown flag " + flag);
  }
  for (const char* req : {"--num-layers", "--hidden-size", "--num-attention-heads",
                          "--max-position-embeddings", "--micro-batch-size"})
    c.require(c.has(req), "required argument is set", kArgs, std::string(req) + " is missing");
}

// validate_args: world_size % (TP x PP x CP) == 0; DP = world_size / (TP x PP x CP).
ParallelSizes check_parallel_sizes(Checker& c, const MegatronLaunch& l) {
  const std::int64_t world = l.world_size();
  ParallelSizes s;
  s.tp = c.integer("--tensor-model-parallel-size", 1).value_or(1);
  s.pp = c.integer("--pipeline-model-parallel-size", 1).value_or(1);
  s.cp = c.integer("--context-parallel-size", 1).value_or(1);
  const std::int64_t model_size = s.tp * s.pp * s.cp;
  c.require(model_size > 0 && world % model_size == 0, "world size divisible by TP x PP x CP",
            kArgs,
            "world " + n(world) + " (GPUS_PER_NODE x NNODES), TP x PP x CP = " + n(model_size));
  s.dp = model_size > 0 ? world / model_size : 0;
  return s;
}

// Batch: micro-batch > 0; global batch (default micro x DP) > 0 and divisible by micro x DP,
// giving at least one micro-batch (validate_args; ConstantNumMicroBatchesCalculator).
void check_batch(Checker& c, std::int64_t dp) {
  const std::int64_t mbs = c.integer("--micro-batch-size", 0).value_or(0);
  c.require(mbs > 0, "micro-batch size > 0", kArgs, "--micro-batch-size " + n(mbs));
  const std::int64_t gbs = c.integer("--global-batch-size", mbs * dp).value_or(0);
  c.require(gbs > 0, "global batch size > 0", kArgs, "--global-batch-size " + n(gbs));
  if (mbs > 0 && dp > 0)
    c.require(gbs % (mbs * dp) == 0 && gbs / (mbs * dp) >= 1,
              "global batch divisible by micro-batch x data-parallel size (>= 1 micro-batch)",
              kMicrobatches,
              "global batch " + n(gbs) + ", micro-batch " + n(mbs) + ", DP " + n(dp));
}

// Model shape (TransformerConfig): heads divisible by TP; query groups a multiple or divisor
// of TP (this version; older ones required a multiple); kv_channels derivable
// (validate_args: hidden % heads when --kv-channels is not given). Returns the layer count.
std::int64_t check_model_shape(Checker& c, std::int64_t tp) {
  const std::int64_t layers = c.integer("--num-layers", 0).value_or(0);
  const std::int64_t hidden = c.integer("--hidden-size", 0).value_or(0);
  const std::int64_t heads = c.integer("--num-attention-heads", 0).value_or(0);
  if (heads > 0) {
    c.require(heads % tp == 0, "attention heads divisible by TP", kTransformer,
              "heads " + n(heads) + ", TP " + n(tp));
    if (!c.has("--kv-channels"))
      c.require(hidden % heads == 0, "hidden size divisible by attention heads", kArgs,
                "hidden " + n(hidden) + ", heads " + n(heads));
  }
  const std::int64_t groups =
      c.has("--group-query-attention") ? c.integer("--num-query-groups", 1).value_or(1) : heads;
  if (groups > 0)
    c.require(groups % tp == 0 || tp % groups == 0, "query groups a multiple or divisor of TP",
              kTransformer, "query groups " + n(groups) + ", TP " + n(tp));
  const std::int64_t seq = c.integer("--seq-length", 0).value_or(0);
  const std::int64_t max_pos = c.integer("--max-position-embeddings", 0).value_or(0);
  c.require(seq <= 0 || max_pos >= seq, "max position embeddings >= sequence length", kArgs,
            "max positions " + n(max_pos) + ", seq length " + n(seq));
  return layers;
}

bool has_uneven_stages(const Checker& c) {
  return c.has("--decoder-first-pipeline-num-layers") ||
         c.has("--decoder-last-pipeline-num-layers");
}

bool accounts_embedding_or_loss(const Checker& c) {
  return c.has("--account-for-embedding-in-pipeline-split") ||
         c.has("--account-for-loss-in-pipeline-split");
}

// PipelineParallelLayerLayout.parse_str_to_list: commas dropped, "(...)*n" then "x*n" unrolled
// (one left-to-right pass each, as re.sub makes), then split at '|' into stages of layer
// characters. nullopt with `problem` set for a character that is not a layer's.
std::optional<std::vector<std::string>> parse_layout(std::string text, std::string& problem) {
  text.erase(std::remove(text.begin(), text.end(), ','), text.end());
  const auto unroll = [](const std::string& in, const std::regex& pattern) {
    std::string out;
    auto last = in.cbegin();
    for (std::sregex_iterator it(in.begin(), in.end(), pattern), end; it != end; ++it) {
      out.append(last, in.cbegin() + it->position(0));
      const std::string part = (*it)[1].str();
      const long long times = std::stoll((*it)[2].str().substr(0, 9));
      for (long long k = 0; k < times && out.size() < (1u << 20); ++k) out += part;
      last = in.cbegin() + it->position(0) + it->length(0);
    }
    out.append(last, in.cend());
    return out;
  };
  text = unroll(text, std::regex(R"(\(([^)]+)\)\*(\d+))"));
  text = unroll(text, std::regex(R"((.)\*(\d+))"));
  std::vector<std::string> stages(1);
  for (char ch : text) {
    if (ch == '|') {
      stages.emplace_back();
    } else if (ch == 'E' || ch == 'L' || ch == 't' || ch == 'm') {
      stages.back() += ch;
    } else {
      problem = std::string("invalid layer character '") + ch + "' (known: E, L, t, m)";
      return std::nullopt;
    }
  }
  return stages;
}

// --pipeline-model-parallel-layout (validate_args, TransformerConfig, validate_layer_layout):
// its stages a multiple of PP (the quotient is the virtual stages), not with the first/last or
// account-for flags, the embedding first and the loss last (once each), as many decoder layers
// as --num-layers and no MTP layers (pipetune's launches have none). Returns the virtual stages.
std::int64_t check_layout(Checker& c, std::int64_t layers, std::int64_t pp) {
  std::string problem;
  const std::optional<std::vector<std::string>> stages =
      parse_layout(c.str("--pipeline-model-parallel-layout"), problem);
  if (!stages) {
    c.fail("layout of layer characters", kLayout, problem);
    return 1;
  }
  const auto count = static_cast<std::int64_t>(stages->size());
  c.require(pp > 0 && count % pp == 0, "layout stages divisible by PP", kArgs,
            n(count) + " stages, PP " + n(pp));
  c.require(!has_uneven_stages(c) && !accounts_embedding_or_loss(c),
            "layout excludes the other pipeline layout flags", kTransformer,
            "--pipeline-model-parallel-layout with --decoder-first/last-pipeline-num-layers or "
            "--account-for-*-in-pipeline-split");
  std::string flat;
  for (const std::string& stage : *stages) flat += stage;
  c.require(!flat.empty() && flat.front() == 'E', "layout starts with the embedding", kLayout,
            "first layer '" + flat.substr(0, 1) + "'");
  c.require(!flat.empty() && flat.back() == 'L', "layout ends with the loss", kLayout,
            "last layer '" + (flat.empty() ? std::string() : flat.substr(flat.size() - 1)) + "'");
  const auto times = [&](char ch) { return std::count(flat.begin(), flat.end(), ch); };
  c.require(times('E') == 1 && times('L') == 1, "embedding and loss exactly once", kLayout,
            n(times('E')) + " embedding, " + n(times('L')) + " loss");
  c.require(times('t') == layers, "layout decoder layers = --num-layers", kLayout,
            n(times('t')) + " decoder layers, --num-layers " + n(layers));
  c.require(times('m') == 0, "no MTP layers without --mtp-num-layers", kLayout,
            n(times('m')) + " MTP layers");
  return pp > 0 && count % pp == 0 ? count / pp : 1;
}

// Pipeline layout (validate_args): at most one of the three virtual-pipeline flags, and the
// layers divide over the pipeline (and its virtual stages) the way the given flag asks.
// Returns the virtual stages per pipeline rank.
std::int64_t check_virtual_stages(Checker& c, std::int64_t layers, std::int64_t pp) {
  const int vp_flags = c.has("--num-layers-per-virtual-pipeline-stage") +
                       c.has("--num-virtual-stages-per-pipeline-rank") +
                       c.has("--pipeline-model-parallel-layout");
  c.require(vp_flags <= 1, "at most one virtual-pipeline flag", kArgs,
            n(vp_flags) +
                " of --num-layers-per-virtual-pipeline-stage, "
                "--num-virtual-stages-per-pipeline-rank, --pipeline-model-parallel-layout");
  const bool uneven = has_uneven_stages(c);
  std::int64_t vpp = 1;
  if (c.has("--num-virtual-stages-per-pipeline-rank")) {
    vpp = c.integer("--num-virtual-stages-per-pipeline-rank", 1).value_or(1);
  } else if (c.has("--num-layers-per-virtual-pipeline-stage")) {
    // validate_args: no uneven first/last flags; (layers [+1 embedding] [+1 loss]) divisible by
    // PP, and layers per stage divisible by layers per virtual stage.
    c.require(!uneven, "uneven first/last stage needs --num-virtual-stages-per-pipeline-rank",
              kArgs, "--num-layers-per-virtual-pipeline-stage with uneven stages");
    const std::int64_t counted = layers + c.has("--account-for-embedding-in-pipeline-split") +
                                 c.has("--account-for-loss-in-pipeline-split");
    const std::int64_t per_virtual =
        c.integer("--num-layers-per-virtual-pipeline-stage", 1).value_or(1);
    c.require(counted % pp == 0, "layers divisible by PP", kArgs,
              "layers " + n(counted) + ", PP " + n(pp));
    if (pp > 0 && per_virtual > 0) {
      c.require((counted / pp) % per_virtual == 0,
                "layers per stage divisible by layers per virtual stage", kArgs,
                n(counted / pp) + " layers per stage, " + n(per_virtual) + " per virtual stage");
      vpp = (counted / pp) / per_virtual;
    }
  } else if (c.has("--pipeline-model-parallel-layout")) {
    vpp = check_layout(c, layers, pp);
  } else if (!uneven) {
    // validate_args: without virtual stages or uneven stages, (layers [+1] [+1]) % PP == 0.
    const std::int64_t counted = layers + c.has("--account-for-embedding-in-pipeline-split") +
                                 c.has("--account-for-loss-in-pipeline-split");
    c.require(pp <= 0 || counted % pp == 0, "layers divisible by PP", kArgs,
              "layers " + n(counted) + ", PP " + n(pp));
  }
  return vpp;
}

// The interleaved schedule (more than one virtual stage per pipeline rank).
void check_interleaved(Checker& c, std::int64_t layers, std::int64_t pp, std::int64_t vpp) {
  // validate_args: the interleaved schedule needs PP > 1, or PP > 2 without p2p overlap.
  const bool overlap_p2p = !c.has("--no-overlap-p2p-communication");
  c.require(overlap_p2p ? pp > 1 : pp > 2,
            "interleaved schedule needs PP > 1 (> 2 without "
            "p2p overlap)",
            kArgs, "PP " + n(pp) + ", virtual stages " + n(vpp));
  // Each virtual stage holds whole layers: layers per rank divisible by the virtual stages
  // (TransformerConfig checks it for uneven stages; the even split divides the same way).
  if (!has_uneven_stages(c) && !accounts_embedding_or_loss(c) &&
      !c.has("--pipeline-model-parallel-layout"))
    c.require(pp > 0 && layers % pp == 0 && (layers / pp) % vpp == 0,
              "layers per pipeline rank divisible by virtual stages", kTransformer,
              "layers " + n(layers) + ", PP " + n(pp) + ", virtual stages " + n(vpp));
}

// TransformerConfig (uneven PP): not with --account-for-*; first / last > 0 and divisible
// by the virtual stages; the middle stages hold the rest evenly (whole virtual stages too),
// and there are middle layers exactly when there are middle stages.
void check_uneven_stages(Checker& c, std::int64_t layers, std::int64_t pp, std::int64_t vpp) {
  c.require(!accounts_embedding_or_loss(c),
            "uneven first/last stages exclude --account-for-*-in-pipeline-split", kTransformer,
            "both given");
  std::int64_t rest = layers;
  std::int64_t middle = pp;
  for (const char* f :
       {"--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"}) {
    if (!c.has(f)) continue;
    const std::int64_t k = c.integer(f, 0).value_or(0);
    c.require(k > 0, "first/last stage layers > 0", kTransformer, std::string(f) + " " + n(k));
    c.require(vpp <= 1 || k % vpp == 0, "first/last stage layers divisible by virtual stages",
              kTransformer, std::string(f) + " " + n(k) + ", virtual stages " + n(vpp));
    rest -= k;
    middle -= 1;
  }
  c.require((rest != 0) == (middle != 0), "middle layers exist exactly when middle stages do",
            kTransformer, n(rest) + " middle layers, " + n(middle) + " middle stages");
  if (middle > 0 && rest > 0) {
    c.require(rest % middle == 0, "middle layers divisible by middle stages", kTransformer,
              n(rest) + " layers over " + n(middle) + " stages");
    c.require(vpp <= 1 || (rest / middle) % vpp == 0,
              "middle stage layers divisible by virtual stages", kTransformer,
              n(rest / middle) + " layers per middle stage, virtual stages " + n(vpp));
  }
}

// Expert parallelism and MoE layers, then the precision flags.
void check_experts_and_precision(Checker& c, std::int64_t tp) {
  // validate_args: EP needs experts, experts divisible by EP.
  const std::int64_t ep = c.integer("--expert-model-parallel-size", 1).value_or(1);
  const std::int64_t experts = c.integer("--num-experts", 0).value_or(0);
  if (ep > 1) {
    c.require(experts > 0, "expert parallelism needs --num-experts", kArgs, "EP " + n(ep));
    c.require(experts <= 0 || experts % ep == 0, "experts divisible by EP", kArgs,
              "experts " + n(experts) + ", EP " + n(ep));
    // ModelParallelConfig: EP with TP needs sequence parallelism (a warning in this version,
    // an error in earlier ones).
    c.require(tp <= 1 || c.has("--sequence-parallel"),
              "expert parallelism with tensor parallelism needs --sequence-parallel",
              kModelParallel, "EP " + n(ep) + ", TP " + n(tp));
  }
  // TransformerConfig: MoE layers with linear biases need expert TP = 1.
  if (experts > 0 && !c.has("--disable-bias-linear")) {
    const std::int64_t etp = c.integer("--expert-tensor-parallel-size", tp).value_or(tp);
    c.require(etp == 1, "MoE with linear biases needs expert tensor parallel size 1", kTransformer,
              "expert TP " + n(etp) + " without --disable-bias-linear");
  }
  // (validate_args asks of --moe-grouped-gemm only a device of compute capability 8 or more.)
  c.require(!(c.has("--bf16") && c.has("--fp16")), "--bf16 and --fp16 exclude each other", kArgs,
            "both given");
}

// --use-tp-pp-dp-mapping orders ranks tp-cp-ep-pp-dp, the expert grid's too; with a pipeline,
// initialize_model_parallel asserts both grids' pipeline groups and data-parallel sizes match:
// expert TP x EP = TP x CP.
void check_rank_order(Checker& c, const ParallelSizes& s) {
  if (!c.has("--use-tp-pp-dp-mapping") || s.pp <= 1) return;
  const std::int64_t ep = c.integer("--expert-model-parallel-size", 1).value_or(1);
  const std::int64_t etp = c.integer("--expert-tensor-parallel-size", s.tp).value_or(s.tp);
  c.require(etp * ep == s.tp * s.cp,
            "tp-pp-dp rank order with a pipeline needs expert TP x EP = TP x CP", kParallelState,
            "expert TP " + n(etp) + " x EP " + n(ep) + ", TP " + n(s.tp) + " x CP " + n(s.cp));
}

// Distributed optimizer / FSDP (validate_args), and the CUDA_DEVICE_MAX_CONNECTIONS FSDP needs.
void check_optimizer_sharding(Checker& c, const MegatronLaunch& l) {
  if (c.has("--overlap-param-gather")) {
    c.require(c.has("--use-distributed-optimizer") || c.has("--use-megatron-fsdp"),
              "--overlap-param-gather needs the distributed optimizer or Megatron-FSDP", kArgs,
              "neither given");
    c.require(c.has("--overlap-grad-reduce"), "--overlap-param-gather needs --overlap-grad-reduce",
              kArgs, "not given");
  }
  const bool fsdp = c.has("--use-megatron-fsdp");
  if (fsdp) {
    c.require(l.cuda_device_max_connections != "1",
              "Megatron-FSDP needs CUDA_DEVICE_MAX_CONNECTIONS other than 1", kArgs,
              "the script exports CUDA_DEVICE_MAX_CONNECTIONS=1");
    c.require(c.str("--ckpt-format") == "fsdp_dtensor",
              "Megatron-FSDP needs --ckpt-format fsdp_dtensor", kArgs,
              "--ckpt-format '" + c.str("--ckpt-format") + "'");
    const std::string strategy = c.str("--data-parallel-sharding-strategy");
    c.require(strategy.empty() || strategy == "no_shard" || strategy == "optim" ||
                  strategy == "optim_grads" || strategy == "optim_grads_params",
              "sharding strategy is one of Megatron-FSDP's", kArgs, "'" + strategy + "'");
  }
  // TP or CP without FSDP with CUDA_DEVICE_MAX_CONNECTIONS other than 1 is only warned about
  // (tensor_parallel/layers.py, before Blackwell): the export sets it to 1 for speed.
}

// Recomputation (validate_args, TransformerConfig): selective takes no method or layer
// count; full needs a method (uniform or block) and a layer count.
void check_recompute(Checker& c) {
  const std::string gran = c.str("--recompute-granularity");
  if (gran == "selective") {
    c.require(!c.has("--recompute-method"), "selective recompute takes no --recompute-method",
              kArgs, "--recompute-method " + c.str("--recompute-method"));
    c.require(!c.has("--recompute-num-layers"),
              "selective recompute takes no --recompute-num-layers", kTransformer,
              "--recompute-num-layers " + c.str("--recompute-num-layers"));
  } else if (gran == "full") {
    const std::string method = c.str("--recompute-method");
    c.require(method == "uniform" || method == "block",
              "full recompute needs --recompute-method uniform|block", kTransformer,
              "--recompute-method '" + method + "'");
    c.require(c.has("--recompute-num-layers"), "full recompute needs --recompute-num-layers",
              kTransformer, "not given");
  } else {
    c.require(gran.empty(), "recompute granularity is full or selective", kTransformer,
              "'" + gran + "'");
  }
}

// Offload. Activations: --cpu-offloading-num-layers N > 0 turns cpu_offloading on
// (validate_args), which TransformerConfig allows for N < num_layers, without a pipeline and
// without recomputation. Optimizer: --optimizer-cpu-offload needs the precision-aware optimizer
// (validate_args), which needs the distributed optimizer (get_megatron_optimizer; Megatron-FSDP
// v1, the default, sets it itself).
void check_offload(Checker& c, std::int64_t layers, std::int64_t pp) {
  const std::int64_t offloaded = c.integer("--cpu-offloading-num-layers", 0).value_or(0);
  if (offloaded > 0) {
    c.require(offloaded < layers, "CPU offloading of fewer layers than --num-layers", kTransformer,
              "--cpu-offloading-num-layers " + n(offloaded) + ", --num-layers " + n(layers));
    c.require(pp == 1, "CPU offloading without pipeline parallelism", kTransformer,
              "--pipeline-model-parallel-size " + n(pp));
    c.require(!c.has("--recompute-granularity"), "CPU offloading without recomputation",
              kTransformer, "--recompute-granularity " + c.str("--recompute-granularity"));
  }
  c.require(offloaded >= 0, "--cpu-offloading-num-layers >= 0", kTransformer, n(offloaded));
  if (c.has("--optimizer-cpu-offload"))
    c.require(c.has("--use-precision-aware-optimizer"),
              "--optimizer-cpu-offload needs --use-precision-aware-optimizer", kArgs, "not given");
  if (c.has("--use-precision-aware-optimizer"))
    c.require(c.has("--use-distributed-optimizer") || c.has("--use-megatron-fsdp"),
              "--use-precision-aware-optimizer needs the distributed optimizer", kOptimizer,
              "neither --use-distributed-optimizer nor --use-megatron-fsdp");
}

// validate_args: min-lr <= lr.
void check_learning_rates(Checker& c) {
  if (c.has("--lr") && c.has("--min-lr")) {
    const double lr = std::stod(c.str("--lr"));
    const double min_lr = std::stod(c.str("--min-lr"));
    c.require(min_lr <= lr, "--min-lr <= --lr", kArgs, c.str("--min-lr") + " > " + c.str("--lr"));
  }
}

}  // namespace

MegatronLaunch parse_megatron_script(std::string_view script) {
  MegatronLaunch l;
  std::istringstream in{std::string(script)};
  std::string line;
  bool in_block = false;
  bool any_block = false;
  while (std::getline(in, line)) {
    if (in_block) {
      if (line == ")") {
        in_block = false;
        continue;
      }
      const std::size_t start = line.find_first_not_of(' ');
      if (start == std::string::npos || line.compare(start, 2, "--") != 0) continue;
      const std::size_t space = line.find(' ', start);
      const std::string flag =
          line.substr(start, space == std::string::npos ? space : space - start);
      std::string value = space == std::string::npos ? "" : line.substr(space + 1);
      // A single-quoted word (the layout's '|' would be a pipe to the shell) is its inside.
      if (value.size() >= 2 && value.front() == '\'' && value.back() == '\'' &&
          value.find('\'', 1) == value.size() - 1)
        value = value.substr(1, value.size() - 2);
      l.flags[flag] = value;
      continue;
    }
    if (line.size() > 2 && line.compare(line.size() - 2, 2, "=(") == 0) {
      in_block = any_block = true;
    } else if (line.rfind("GPUS_PER_NODE=", 0) == 0) {
      l.gpus_per_node = std::stoi(line.substr(14));
    } else if (line.rfind("NNODES=", 0) == 0) {
      l.nodes = std::stoi(line.substr(7));
    } else if (line.rfind("export CUDA_DEVICE_MAX_CONNECTIONS=", 0) == 0) {
      l.cuda_device_max_connections = line.substr(35);
    } else if (line.rfind("unset CUDA_DEVICE_MAX_CONNECTIONS", 0) == 0) {
      l.cuda_device_max_connections.clear();
    }
  }
  if (!any_block || l.gpus_per_node <= 0 || l.nodes <= 0)
    throw InputError(
        "not a Megatron-LM launch script of pipetune's shape (flag blocks, "
        "GPUS_PER_NODE and NNODES)");
  return l;
}

RuleViolations check_megatron_script(std::string_view script) {
  return check_megatron_launch(parse_megatron_script(script));
}

RuleViolations check_megatron_launch(const MegatronLaunch& l) {
  // Each group of rules in turn; the violations are listed in this order.
  Checker c(l);
  check_flags_known_and_required(c, l);
  const ParallelSizes sizes = check_parallel_sizes(c, l);
  check_batch(c, sizes.dp);
  const std::int64_t layers = check_model_shape(c, sizes.tp);
  const std::int64_t vpp = check_virtual_stages(c, layers, sizes.pp);
  if (vpp > 1) check_interleaved(c, layers, sizes.pp, vpp);
  if (has_uneven_stages(c)) check_uneven_stages(c, layers, sizes.pp, vpp);
  check_experts_and_precision(c, sizes.tp);
  check_rank_order(c, sizes);
  check_optimizer_sharding(c, l);
  check_recompute(c);
  check_offload(c, layers, sizes.pp);
  check_learning_rates(c);
  return c.take();
}

}  // namespace pipetune::tuner
