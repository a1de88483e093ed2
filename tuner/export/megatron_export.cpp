// Megatron-LM launch script: torchrun over pretrain_gpt.py with the plan's flags (flag names and
// rules: reference/engine_and_style.md A2, from megatron/training/arguments.py).
#include <algorithm>
#include <numeric>
#include <sstream>

#include "tuner/export/export_common.hpp"
#include "tuner/export/megatron_rules.hpp"

namespace pipetune::tuner {

using export_detail::require;

namespace {

constexpr std::string_view kFw = "megatron";

// The plan's layer groups as a Megatron-LM pipeline layout (pipeline_parallel_layer_layout.py):
// one stage per group in model order, which is Megatron's order too (stage i is virtual stage
// i / pp of pipeline rank i % pp, the interleaved schedule's placement); the embedding opens the
// first and the loss closes the last; "t*n" for n decoder layers. Single-quoted for the script.
std::string megatron_layout(const std::vector<int>& split) {
  std::string layout;
  for (std::size_t g = 0; g < split.size(); ++g) {
    if (g > 0) layout += "|";
    if (g == 0) layout += "E";
    if (split[g] == 1) layout += "t";
    if (split[g] > 1) layout += "t*" + std::to_string(split[g]);
    if (g + 1 == split.size()) layout += "L";
  }
  return "'" + layout + "'";
}

// Megatron's flags for the plan's layer split: none when even (the virtual stages flag says the
// rest); the first / last stage's layer counts when only those differ; else the whole layout.
std::vector<std::string> pipeline_split_flags(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  if (p.pp == 1) return {};
  const std::vector<int> split = spec::layer_split(r.model, p);
  const bool even = std::all_of(split.begin(), split.end(), [&](int n) { return n == split[0]; });
  if (even) return {};
  const bool middle_even = p.pp < 3 || std::all_of(split.begin() + 1, split.end() - 1,
                                                   [&](int n) { return n == split[1]; });
  const bool ends_hold_layers = split.front() > 0 && split.back() > 0;
  if (p.chunks == 1 && middle_even && ends_hold_layers)
    return {"--decoder-first-pipeline-num-layers " + std::to_string(split.front()),
            "--decoder-last-pipeline-num-layers " + std::to_string(split.back())};
  return {"--pipeline-model-parallel-layout " + megatron_layout(split)};
}

bool has_layout(const std::vector<std::string>& split_flags) {
  return !split_flags.empty() && split_flags[0].starts_with("--pipeline-model-parallel-layout");
}

// The plan's schedule, vocabulary and parallel layout as Megatron-LM can run them.
void check_megatron_plan(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  const bool pipelined = p.pp > 1;
  require(!pipelined || p.schedule == "1f1b" || p.schedule == "interleaved-1f1b", kFw,
          "schedule " + p.schedule + " is not one of Megatron-LM's (1f1b, interleaved-1f1b)");
  require(p.vocab == schedule::VocabMode::None, kFw,
          "vocabulary parallelism (" + std::string(schedule::vocab_mode_name(p.vocab)) +
              ") is not in Megatron-LM; export the plan with vocab none");
  require(!(p.tp > 1 && p.ep > 1) || p.sequence_parallel, kFw,
          "tensor parallelism with expert parallelism needs sequence parallelism");
  require(p.moe_chunks == 1, kFw,
          "moe_chunks=" + std::to_string(p.moe_chunks) +
              " (each MoE layer's all-to-all in chunks overlapped with the experts' GEMMs) is "
              "not among Megatron-LM's settings; export the plan with moe_chunks 1");
  export_detail::refuse_pipetune_only_settings(p, kFw);
  // Layers that do not divide over the virtual stages go in a pipeline layout.
  if (pipelined && p.schedule == "interleaved-1f1b")
    require(p.chunks >= 2, kFw, "interleaved-1f1b needs at least 2 chunks per stage");
  // --use-tp-pp-dp-mapping builds the expert grid in the same order, and with a pipeline both
  // grids must have the same data-parallel size (parallel_state.py initialize_model_parallel).
  const int expert_grid = export_detail::expert_tensor_parallel(r.model, p) * p.ep;
  require(p.rank_order != spec::RankOrder::TpPpDp || !pipelined || !spec::is_moe(r.model) ||
              expert_grid == p.tp,
          kFw,
          "rank_order tp-pp-dp (--use-tp-pp-dp-mapping) with a pipeline needs expert tp x ep = "
          "tp (" +
              std::to_string(expert_grid) + " != " + std::to_string(p.tp) +
              "): Megatron-LM asserts the expert and dense data-parallel sizes match "
              "(megatron/core/parallel_state.py@d98e8a6 initialize_model_parallel)");
}

// Offload (KARMA) as Megatron-LM can run it. Activations: its CPU offloading refuses a pipeline
// and recomputation (megatron/core/transformer/transformer_config.py@d98e8a6:1884-1899
// TransformerConfig.__post_init__) and offloads at most num_layers - 1 layers. Optimizer:
// --optimizer-cpu-offload needs --use-precision-aware-optimizer (megatron/training/arguments.py
// @d98e8a6:1884-1888 validate_args), which runs only in the distributed optimizer
// (megatron/core/optimizer/__init__.py@d98e8a6:1057 get_megatron_optimizer): ZeRO-1 over dp.
void check_offload(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  if (p.offload_activations) {
    require(p.pp == 1, kFw,
            "offload_activations with pipeline parallelism (pp=" + std::to_string(p.pp) +
                "): Megatron-LM's activation CPU offloading (--cpu-offloading-num-layers) has no "
                "pipeline support (megatron/core/transformer/transformer_config.py@d98e8a6:1891 "
                "TransformerConfig.__post_init__)");
    require(p.recompute == spec::Recompute::None, kFw,
            "offload_activations with recompute " + std::string(spec::recompute_name(p.recompute)) +
                ": Megatron-LM's activation CPU offloading does not work with recomputation "
                "(megatron/core/transformer/transformer_config.py@d98e8a6:1896 "
                "TransformerConfig.__post_init__)");
    require(r.model.layers >= 2, kFw,
            "offload_activations of a 1-layer model: Megatron-LM offloads at most num_layers - 1 "
            "layers (megatron/core/transformer/transformer_config.py@d98e8a6:1884)");
  }
  if (p.offload_optimizer)
    require(p.zero_stage >= 1 || p.dp == 1, kFw,
            "offload_optimizer with zero_stage 0 over dp=" + std::to_string(p.dp) +
                ": Megatron-LM's --optimizer-cpu-offload needs --use-precision-aware-optimizer "
                "(megatron/training/arguments.py@d98e8a6:1884 validate_args), which runs only in "
                "the distributed optimizer, ZeRO-1 over dp "
                "(megatron/core/optimizer/__init__.py@d98e8a6:1057 get_megatron_optimizer); export "
                "with zero_stage 1 or more");
}

// The ZeRO stage the script runs: the plan's, but at least the distributed optimizer (ZeRO-1)
// when the optimizer is offloaded (check_offload allows that only over one replica, where
// ZeRO-1 shards nothing).
int megatron_zero_stage(const spec::ParallelPlan& p) {
  return p.offload_optimizer ? std::max(p.zero_stage, 1) : p.zero_stage;
}

// The script's comment lines on offload: what Megatron-LM offloads, where it differs from the plan.
std::string offload_comment(const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  std::string out;
  if (p.offload_activations)
    out += "# Offload: layers 1-" + std::to_string(r.model.layers - 1) +
           " send their activations to host memory after their forward and get\n"
           "# them back for their backward (--cpu-offloading-num-layers); Megatron-LM keeps the "
           "last\n# layer's, whose backward comes first.\n";
  if (p.offload_optimizer)
    out += std::string(
               "# Offload: the optimizer state and its update on the host (--optimizer-cpu-offload,"
               "\n# HybridDeviceOptimizer with CPU Adam)") +
           (p.zero_stage == 0 ? ", in the distributed optimizer, which over one replica\n"
                                "# shards nothing.\n"
                              : ".\n");
  return out;
}

// Megatron-LM's offload flags. Activations: Transformer Engine's CPU offload context offloads
// the first N layers (megatron/core/transformer/transformer_block.py@d98e8a6:304-318
// get_cpu_offload_context); the flag comes from ModelParallelConfig.cpu_offloading_num_layers
// (megatron/core/model_parallel_config.py@d98e8a6:461, made a flag by ArgumentGroupFactory,
// megatron/training/arguments.py@d98e8a6:2373) and turns cpu_offloading on (arguments.py
// @d98e8a6:1950). Optimizer: arguments.py@d98e8a6:2918, 2922 and 3667; every state on the host
// (fraction 1.0), the update in CPU Adam (megatron/core/optimizer/__init__.py@d98e8a6:504-545).
std::vector<std::string> offload_flags(const ExportRequest& r) {
  std::vector<std::string> out;
  if (r.plan.offload_activations)
    out.push_back("--cpu-offloading-num-layers " + std::to_string(r.model.layers - 1));
  if (r.plan.offload_optimizer)
    out.insert(out.end(), {"--optimizer-cpu-offload", "--optimizer-offload-fraction 1.0",
                           "--use-precision-aware-optimizer"});
  return out;
}

// Processes torchrun starts on each node: torchrun starts the same number on every node, and
// Megatron-LM takes DP from their total (world / (TP x PP)), so as many GPUs per node as divide
// the world evenly.
int processes_per_node(const ExportRequest& r) {
  const int node_size = std::min(r.cluster.devices_per_node, std::max(1, r.cluster.devices));
  return std::gcd(r.plan.world_size(), std::max(1, node_size));
}

// Which nodes take which NODE_RANK, when the cluster's nodes differ (node groups). The launch's
// nodes are the cluster's only when it runs a whole node's GPUs on each.
std::string placement_lines(const ExportRequest& r) {
  if (r.cluster.node_groups.empty()) return export_detail::placement_comment(r, kFw, "# ", "");
  require(processes_per_node(r) == r.cluster.devices_per_node, kFw,
          "node_group_order: the launch runs " + std::to_string(processes_per_node(r)) +
              " GPUs per node, not the cluster's " + std::to_string(r.cluster.devices_per_node) +
              ", so its node ranks are not the cluster's nodes");
  return export_detail::placement_comment(
      r, kFw, "# ", "Start the script on each node with NODE_RANK set to that node's rank above.");
}

// The script's opening: what it launches, where each node goes, and the environment and launch
// size torchrun reads.
void write_header(std::ostream& o, const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  const spec::ModelSpec& m = r.model;
  const int per_node = processes_per_node(r);
  const int nodes = p.world_size() / per_node;
  // Megatron-FSDP (ZeRO 2/3) refuses CUDA_DEVICE_MAX_CONNECTIONS=1; TP without it needs 1
  // (megatron/training/arguments.py validate_args).
  const bool fsdp = megatron_zero_stage(p) >= 2;
  o << "#!/usr/bin/env bash\n"
    << "# Megatron-LM launch script written by `pipetune export --format megatron`,\n"
    << "# for " << kMegatronTarget << ".\n";
  if (!r.description.empty()) o << "# " << r.description << "\n";
  o << "# Model " << m.name << " on " << p.world_size() << " GPUs (" << r.cluster.name
    << "): tp=" << p.tp << " pp=" << p.pp << " dp=" << p.dp << " ep=" << p.ep
    << " schedule=" << p.schedule << ", " << export_detail::accumulation_steps(p)
    << " micro-batches of " << p.micro_batch_size << " per replica.\n"
    << "# Run on every node with NODE_RANK set; mock data (NullTokenizer) unless you edit\n"
    << "# DATA_ARGS. MEGATRON_DIR is the Megatron-LM checkout.\n"
    << offload_comment(r) << placement_lines(r) << "set -euo pipefail\n\n"
    << (fsdp ? "unset CUDA_DEVICE_MAX_CONNECTIONS  # Megatron-FSDP needs more than 1\n"
             : "export CUDA_DEVICE_MAX_CONNECTIONS=1\n")
    << "MEGATRON_DIR=${MEGATRON_DIR:-.}\n"
    << "GPUS_PER_NODE=" << per_node << "\n"
    << "NNODES=" << nodes << "\n"
    << "NODE_RANK=${NODE_RANK:-0}\n"
    << "MASTER_ADDR=${MASTER_ADDR:-localhost}\n"
    << "MASTER_PORT=${MASTER_PORT:-6000}\n\n";
}

// A bash array of flags, one a line.
void write_block(std::ostream& o, const char* name, const std::vector<std::string>& flags) {
  o << name << "=(\n";
  for (const std::string& f : flags) o << "  " << f << "\n";
  o << ")\n";
}

bool is_gated(const spec::ModelSpec& m) {
  return m.activation == spec::Activation::Swiglu;
}

// The model's shape, its flavour (Llama-style when gated) and its experts.
std::vector<std::string> model_flags(const spec::ModelSpec& m) {
  std::vector<std::string> model = {"--num-layers " + std::to_string(m.layers),
                                    "--hidden-size " + std::to_string(m.hidden),
                                    "--ffn-hidden-size " + std::to_string(m.ffn_hidden),
                                    "--num-attention-heads " + std::to_string(m.heads),
                                    "--seq-length " + std::to_string(m.seq_len),
                                    "--max-position-embeddings " + std::to_string(m.seq_len)};
  if (m.kv_heads != m.heads) {
    model.push_back("--group-query-attention");
    model.push_back("--num-query-groups " + std::to_string(m.kv_heads));
  }
  // Gated-MLP models are Llama-style (RMSNorm, rotary positions, no linear biases).
  if (is_gated(m)) {
    model.insert(model.end(), {"--swiglu", "--normalization RMSNorm",
                               "--position-embedding-type rope", "--disable-bias-linear"});
  } else {
    model.insert(model.end(),
                 {"--normalization LayerNorm", "--position-embedding-type learned_absolute"});
  }
  if (!m.tied_embeddings) model.push_back("--untie-embeddings-and-output-weights");
  if (spec::is_moe(m)) {
    model.insert(model.end(),
                 {"--num-experts " + std::to_string(m.experts),
                  "--moe-router-topk " + std::to_string(m.top_k),
                  "--moe-ffn-hidden-size " + std::to_string(m.ffn_hidden),
                  "--moe-router-load-balancing-type aux_loss", "--moe-aux-loss-coeff 1e-2",
                  "--moe-grouped-gemm", "--moe-token-dispatcher-type alltoall"});
    if (m.moe_every > 1) model.push_back("--moe-layer-freq " + std::to_string(m.moe_every));
  }
  return model;
}

// The plan's parallel sizes and layout, its ZeRO stage and its recomputation.
std::vector<std::string> parallel_flags(const ExportRequest& r,
                                        const std::vector<std::string>& split_flags) {
  const spec::ParallelPlan& p = r.plan;
  const spec::ModelSpec& m = r.model;
  std::vector<std::string> parallel = {"--tensor-model-parallel-size " + std::to_string(p.tp),
                                       "--pipeline-model-parallel-size " + std::to_string(p.pp)};
  if (p.sequence_parallel && p.tp > 1) parallel.push_back("--sequence-parallel");
  // Megatron's rank order is tp-cp-ep-dp-pp unless this flag makes it tp-cp-ep-pp-dp
  // (megatron/training/initialize.py).
  if (p.rank_order == spec::RankOrder::TpPpDp) parallel.push_back("--use-tp-pp-dp-mapping");
  // A layout gives the virtual stages itself (its stages / pp); Megatron takes one of the two.
  if (p.pp > 1 && p.schedule == "interleaved-1f1b" && !has_layout(split_flags))
    parallel.push_back("--num-virtual-stages-per-pipeline-rank " + std::to_string(p.chunks));
  parallel.insert(parallel.end(), split_flags.begin(), split_flags.end());
  if (spec::is_moe(m)) {
    parallel.push_back("--expert-model-parallel-size " + std::to_string(p.ep));
    // Megatron-LM allows linear biases in MoE layers only with expert TP 1
    // (transformer_config.py TransformerConfig.__post_init__): non-gated (GPT-style, biased)
    // MoE models keep their experts whole on each rank.
    parallel.push_back("--expert-tensor-parallel-size " +
                       std::to_string(export_detail::expert_tensor_parallel(m, p)));
  }
  switch (megatron_zero_stage(p)) {
    case 0:
      parallel.push_back("--overlap-grad-reduce");
      break;
    case 1:
      parallel.insert(parallel.end(), {"--use-distributed-optimizer", "--overlap-grad-reduce",
                                       "--overlap-param-gather"});
      break;
    default:
      parallel.insert(parallel.end(),
                      {"--use-megatron-fsdp",
                       std::string("--data-parallel-sharding-strategy ") +
                           (megatron_zero_stage(p) == 2 ? "optim_grads" : "optim_grads_params"),
                       "--ckpt-format fsdp_dtensor"});
  }
  if (p.recompute == spec::Recompute::Selective)
    parallel.push_back("--recompute-granularity selective");
  if (p.recompute == spec::Recompute::Full)
    parallel.insert(parallel.end(), {"--recompute-granularity full", "--recompute-method uniform",
                                     "--recompute-num-layers 1"});
  const std::vector<std::string> offload = offload_flags(r);
  parallel.insert(parallel.end(), offload.begin(), offload.end());
  return parallel;
}

// The training, data and logging blocks, and the torchrun line that passes every block.
void write_training_and_launch(std::ostream& o, const ExportRequest& r) {
  const spec::ParallelPlan& p = r.plan;
  const spec::ModelSpec& m = r.model;
  write_block(
      o, "TRAINING_ARGS",
      {"--micro-batch-size " + std::to_string(p.micro_batch_size),
       "--global-batch-size " + std::to_string(p.global_batch),
       "--train-iters " + std::to_string(r.train_iters), "--bf16", "--lr 3.0e-4", "--min-lr 3.0e-5",
       "--lr-decay-style cosine", "--lr-warmup-fraction 0.01", "--weight-decay 0.1",
       "--clip-grad 1.0", "--adam-beta1 0.9", "--adam-beta2 0.95", "--init-method-std 0.02",
       "--attention-backend auto", "--transformer-impl transformer_engine"});
  write_block(
      o, "DATA_ARGS",
      {"--mock-data", "--tokenizer-type NullTokenizer", "--vocab-size " + std::to_string(m.vocab),
       // Explicit: Megatron's default (128) would pad a model that has none.
       "--make-vocab-size-divisible-by " + std::to_string(m.vocab_divisible_by),
       "--split 949,50,1"});
  write_block(o, "LOGGING_ARGS", {"--log-interval 1", "--eval-interval 1000", "--eval-iters 0"});
  o << "\ntorchrun --nproc_per_node \"$GPUS_PER_NODE\" --nnodes \"$NNODES\" "
       "--node_rank \"$NODE_RANK\" \\\n"
    << "  --master_addr \"$MASTER_ADDR\" --master_port \"$MASTER_PORT\" \\\n"
    << "  \"$MEGATRON_DIR/pretrain_gpt.py\" \\\n"
    << "  \"${MODEL_ARGS[@]}\" \"${PARALLEL_ARGS[@]}\" \"${TRAINING_ARGS[@]}\" \"${DATA_ARGS[@]}\" "
       "\"${LOGGING_ARGS[@]}\" \"$@\"\n";
}

}  // namespace

std::string_view megatron_export_target() {
  return kMegatronTarget;
}

// Per-stage layouts: Megatron-LM takes one tensor-parallel size for the whole job, and
// parallel_state.initialize_model_parallel cuts the world into one tp x pp x dp grid from it.
constexpr const char* kOneTensorParallelSize =
    "--tensor-model-parallel-size is one value for every pipeline stage "
    "(megatron/core/parallel_state.py@d98e8a6 initialize_model_parallel: one tp x pp x dp grid)";

std::string export_megatron(const ExportRequest& request) {
  const ExportRequest r = export_detail::with_uniform_recompute(
      export_detail::with_uniform_stage_tp(request, kFw, kOneTensorParallelSize), kFw,
      "--recompute-granularity and --recompute-num-layers are one setting for every stage");
  export_detail::check_common(r, kFw);
  check_megatron_plan(r);
  check_offload(r);
  const std::vector<std::string> split_flags = pipeline_split_flags(r);
  if (split_flags.empty() && r.plan.pp > 1)
    require(r.model.layers % r.plan.pp == 0, kFw,
            "layers=" + std::to_string(r.model.layers) +
                " are not divisible by pp=" + std::to_string(r.plan.pp));

  std::ostringstream o;
  write_header(o, r);
  write_block(o, "MODEL_ARGS", model_flags(r.model));
  write_block(o, "PARALLEL_ARGS", parallel_flags(r, split_flags));
  write_training_and_launch(o, r);
  return o.str();
}

}  // namespace pipetune::tuner
