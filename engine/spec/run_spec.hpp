// RunSpec: a run file, naming a model, a cluster and a parallel plan.
//
// Run file format (TOML; presets/runs/*.toml are examples):
//
//   description = "Llama-3-8B on one DGX H100"  # optional; `name` defaults to the file name
//   model = "llama3-8b"        # a models/ preset name or a path to a model file
//   cluster = "dgx-h100-8"     # a clusters/ preset name or a path to a cluster file
//   moe_imbalance = 1.0        # MoE: busiest expert-parallel rank's tokens / the mean's (1)
//
//   [plan]                     # every key optional; defaults in parentheses
//   tp = 2                     # tensor parallel                            (1)
//   pp = 4                     # pipeline stages                            (1)
//   dp = 1                     # data parallel              (devices / (tp*pp))
//   ep = 1                     # expert parallel, divides dp                (1)
//   chunks = 1                 # layer groups per stage (1; 2 for zb-v, v-half, v-min, dualpipe-v)
//   micro_batch_size = 1       # sequences per micro-batch                  (1)
//   microbatches = 16          # per iteration   (global_batch / (micro_batch_size*dp), else pp)
//   global_batch = 16          # sequences per iteration (micro_batch_size*microbatches*dp)
//   schedule = "1f1b"          # gpipe, 1f1b, interleaved-1f1b, zb-h1, ...   ("1f1b")
//   vocab = "none"             # none, vocab-1, vocab-2, interlaced          ("none")
//   layer_split = [9, 8, 8, 7] # layers per layer group, model order   (even, see parallel_plan)
//   recompute = "none"         # none, selective, full                       ("none")
//   stage_recompute = ["full", "selective", "none", "none"]  # per pipeline rank ([] = recompute)
//   sequence_parallel = false  #                                             (false)
//   zero_stage = 0             # 0..3                                        (0)
//   group_size = 0             # interleaved-1f1b micro-batch group G        (0 = default)
//   slices = 4                 # terapipe token slices per micro-batch       (0 = default, 4)
//   slice_tokens = [96, 64, 48, 48]  # terapipe uneven slices, sum = seq_len ([] = equal)
//   skip_ratio = 0.33          # skippipe: share of stages a micro-batch skips  (1/3)
//   layered_reduction = false  # reduce each layer group's gradients as its backward ends (false)
//   moe_chunks = 1             # MoE all-to-all in chunks overlapped with the experts      (1)
//   moe_a2a_node_ranks = 0     # Tutel 2DH: EP ranks per node, all-to-all in node then across (0)
//   expert_layout = "sharded"  # sharded, whole (PPMoE), dedup (Parm), adaptive (Tutel), or one
//                              # per MoE layer   ("sharded")
//   sparse_embedding_gradient = false  # EmbRace: exchange the embedding's touched rows (false)
//
// `model` and `cluster` may instead be tables holding the keys of a model or cluster file
// (load.hpp), optionally starting from a preset whose keys they override:
//
//   [model]                    # the 256k-vocabulary model at a longer sequence
//   preset = "vp-4b-256k"
//   seq_len = 4096
//
//   [cluster]                  # no cluster preset: a hardware preset and a size
//   hardware = "h100-sxm"      # or a [cluster.hardware] table of a hardware file's keys
//   nodes = 2                  # or devices = 16
//
// run_file_writer.hpp writes a RunSpec in this format.
// Relative paths are relative to the run file's folder.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"

namespace pipetune::spec {

// Where the engine computes a run (`backend` in a run file, `train --backend`).
enum class EngineBackend { cpu, cuda };
std::string_view engine_backend_name(EngineBackend b);
// Inverse of engine_backend_name; SpecError naming the valid ones otherwise.
EngineBackend parse_engine_backend(std::string_view name);

// The CUDA engine's GEMM inputs (`precision` in a run file, `train --precision`): fp32, or bf16
// with fp32 accumulation and master weights. Everything else computes in fp32.
enum class EnginePrecision { fp32, bf16 };
std::string_view engine_precision_name(EnginePrecision p);
EnginePrecision parse_engine_precision(std::string_view name);  // SpecError naming the valid ones

// The engine's attention kernel (`attention` in a run file, `train --attention`): stored keeps the
// T x T probabilities for the backward; flash keeps none (fp32); flash-tc is flash with its
// products as bf16 tensor-core tiles (WMMA, fp32 accumulation); flash-mma is flash with bf16
// mma.sync products and the scores kept in registers (FlashAttention-2's manner). The last two run
// on cuda with bf16 only.
enum class EngineAttention { stored, flash, flash_tc, flash_mma };
std::string_view engine_attention_name(EngineAttention a);
EngineAttention parse_engine_attention(std::string_view name);  // SpecError naming the valid ones
// "stored, flash, flash-tc, flash-mma": the valid names, for messages.
std::string engine_attention_names();
// The kernel a run gets when it names none: stored on the cpu, flash on cuda in fp32, flash-mma
// on cuda in bf16 (measured fastest: GPT-2 124M at batch 64 on an H100, 244.6k tokens/s against
// 208.1k with flash-tc, which had beaten flash on an H200, 129.7k against 122.6k).
EngineAttention default_engine_attention(EngineBackend backend, EnginePrecision precision);
// Why `attention` cannot run with this backend and precision (flash-tc or flash-mma outside cuda
// bf16), or empty when it can.
std::string engine_attention_problem(EngineAttention attention, EngineBackend backend,
                                     EnginePrecision precision);

// Why `u` is not an MoE routing imbalance ("must be a finite number >= 1 (...), got 0.5"), or
// empty when it is one: the rule of RunSpec::moe_imbalance and of every front end's field.
std::string moe_imbalance_problem(double u);
// Why `factor` is not an embedding rows factor (the touched rows over the uniform estimate:
// finite, above 0), or empty when it is one: the rule of every front end's field.
std::string embedding_rows_problem(double factor);

struct RunSpec {
  std::string name;
  std::string description;
  std::string source;  // the file (or text source name) it was read from
  ModelSpec model;
  ClusterSpec cluster;
  ParallelPlan plan;
  // Whether the file states plan.global_batch (else it is derived): a front end that changes the
  // batch's factors (micro-batches, micro-batch size, dp) keeps a stated one, and validation then
  // refuses a mismatch, never trains another batch silently.
  bool global_batch_given = false;
  // What `train` runs on, and in what precision (bf16 needs cuda). With cuda, predict and tune
  // cost the plan as the CUDA engine executes it (tuner::engine_execution).
  EngineBackend backend = EngineBackend::cpu;
  EnginePrecision precision = EnginePrecision::fp32;
  // The attention kernel; none given: default_engine_attention(backend, precision).
  std::optional<EngineAttention> attention;
  // MoE routing imbalance the cost model prices (`moe_imbalance` in a run file, `predict
  // --moe-imbalance`): the busiest expert-parallel rank's tokens over the mean rank's, >= 1.
  double moe_imbalance = 1.0;
};

// The attention kernel a run trains with: its own, else the default for its backend and
// precision.
EngineAttention engine_attention(const RunSpec& run);

// Full: validate(model, cluster, plan) before returning. KeysOnly: only the per-file checks
// (keys, types, sizes; the model and cluster alone), for callers that override plan fields
// first (a CLI flag) and call validate(run) afterwards.
enum class RunCheck { Full, KeysOnly };

// A runs/ preset name or a path to a run file.
RunSpec load_run(std::string_view name_or_path, RunCheck check = RunCheck::Full);
// The same from TOML text; relative paths inside resolve against base_dir.
RunSpec parse_run(std::string_view toml_text, std::string_view source = "run",
                  const std::filesystem::path& base_dir = {}, RunCheck check = RunCheck::Full);

// validate(run.model, run.cluster, run.plan).
void validate(const RunSpec& run);

}  // namespace pipetune::spec
