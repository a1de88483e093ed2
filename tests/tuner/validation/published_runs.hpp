// Published training runs as (model, cluster, plan, framework facts, measured throughput) for the
// cost model's validation: the rows of shared/reference/published_runs_dev.csv and the 8-GPU
// table of the Vocabulary Parallelism paper (reference/schedules.md d.1). Header-only: the test
// folders compile *_test.cpp files only.
//
// Each row is compared on its own utilisation definition (reference/tuners.md section 1): the
// predicted iteration time is turned into TFLOP/s per GPU (or MFU, or tokens/s) with the FLOP
// formula the source used, so the error is the error of the predicted throughput.
//
// Facts not in the CSV come from the sources named where they are used; nothing here is fitted
// per row. Rows whose configuration is incomplete are kept with a skip reason.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine/spec/cluster_spec.hpp"
#include "engine/spec/load.hpp"
#include "engine/spec/model_spec.hpp"
#include "engine/spec/parallel_plan.hpp"
#include "tuner/cost/execution.hpp"

namespace pipetune::validation {

// The FLOP formulas the sources count with (per token, forward + backward).
enum class FlopFormula {
  // Megatron SC21 Eq. 3 (2104.04473), which includes full recomputation; also Megatron-
  // DeepSpeed's throughput counter used for BLOOM: 96 l h^2 (1 + s/(6h) + V/(16 l h)).
  MegatronSc21,
  // Megatron-Core r0.8.0 num_floating_point_operations (non-causal attention, GQA and gated MLP
  // generalised): 12 l h^2 ((1 + g/a + s/h) q/h + f/h k gate + V/(2 l h)).
  MegatronCore,
  // Vocabulary Parallelism paper (2411.05288 Table 4): l h (72h + 12s) + 3h + 6hV.
  VocabularyPaper,
  // torchtitan get_num_flop_per_token: 6 N + 12 l h s, N = parameters without the embedding.
  Torchtitan,
};

enum class Metric { TflopsPerGpu, Mfu, TokensPerGpu };

inline const char* metric_name(Metric m) {
  switch (m) {
    case Metric::TflopsPerGpu:
      return "TFLOP/s";
    case Metric::Mfu:
      return "MFU";
    case Metric::TokensPerGpu:
      return "tok/s/GPU";
  }
  return "?";
}

struct PublishedRun {
  std::string group;  // source and hardware, e.g. "SC21 (A100)"
  std::string name;   // model name and what varies
  spec::ModelSpec model;
  spec::ClusterSpec cluster;
  spec::ParallelPlan plan;
  tuner::ExecutionOptions execution;
  FlopFormula formula = FlopFormula::MegatronCore;
  Metric metric = Metric::TflopsPerGpu;
  double measured = 0.0;    // in the metric's unit (TFLOP/s, fraction, tokens/s per GPU)
  double peak_flops = 0.0;  // the source's peak for MFU
  // Knobs the source does not state (micro-batch size, interleaving, recomputation): the plan is
  // then the best feasible prediction among `candidates` (the published runs were tuned).
  std::vector<spec::ParallelPlan> candidates;
  std::string skip_reason;  // non-empty: not predicted
};

inline double flops_per_token(FlopFormula formula, const spec::ModelSpec& m) {
  const double l = static_cast<double>(m.layers), h = static_cast<double>(m.hidden);
  const double s = static_cast<double>(m.seq_len), v = static_cast<double>(m.vocab);
  const double f = static_cast<double>(m.ffn_hidden);
  switch (formula) {
    case FlopFormula::MegatronSc21:
      return 96.0 * l * h * h * (1.0 + s / (6.0 * h) + v / (16.0 * l * h));
    case FlopFormula::MegatronCore: {
      const double g = static_cast<double>(m.kv_heads), a = static_cast<double>(m.heads);
      const double gate = m.activation == spec::Activation::Swiglu ? 1.5 : 1.0;
      const double k = spec::is_moe(m) ? static_cast<double>(m.top_k) : 1.0;
      return 12.0 * l * h * h * ((1.0 + g / a + s / h) + f / h * k * gate + v / (2.0 * l * h));
    }
    case FlopFormula::VocabularyPaper:
      return l * h * (72.0 * h + 12.0 * s) + 3.0 * h + 6.0 * h * v;
    case FlopFormula::Torchtitan: {
      const double n =
          static_cast<double>(spec::total_parameters(m) - spec::embedding_parameters(m));
      return 6.0 * n + 12.0 * l * h * s;
    }
  }
  return 0.0;
}

// The metric's value for an iteration time of `seconds`.
inline double metric_value(const PublishedRun& run, double seconds) {
  const double gpus = run.plan.tp * run.plan.pp * run.plan.dp;
  const double tokens_per_gpu = static_cast<double>(run.plan.global_batch) *
                                static_cast<double>(run.model.seq_len) / seconds / gpus;
  const double flops = tokens_per_gpu * flops_per_token(run.formula, run.model);
  switch (run.metric) {
    case Metric::TflopsPerGpu:
      return flops / 1e12;
    case Metric::Mfu:
      return flops / run.peak_flops;
    case Metric::TokensPerGpu:
      return tokens_per_gpu;
  }
  return 0.0;
}

namespace detail {

// One CSV record (RFC 4180: quoted fields may hold commas and doubled quotes).
inline std::vector<std::string> split_csv(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (std::size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        out.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        out.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.emplace_back();
    } else if (c != '\r') {
      out.back() += c;
    }
  }
  return out;
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline std::int64_t integer(const std::string& v) {
  return v.empty() ? 0 : std::stoll(v);
}

inline double number(const std::string& v) {
  return v.empty() ? 0.0 : std::stod(v);
}

inline spec::ClusterSpec cluster_of(const std::string& hardware, int gpus) {
  return spec::make_cluster(spec::load_hardware(hardware), gpus);
}

// Megatron SC21 Table 1 configurations: NVIDIA/Megatron-LM examples/sc21/run_table_1.sh gives the
// micro-batch size (MBS), --num-layers-per-virtual-pipeline-stage and the DDP implementation
// ("torch" overlaps the gradient all-reduce with the backward, "local" reduces after it).
struct Sc21Script {
  const char* model;
  int micro_batch;
  int layers_per_virtual_stage;  // 0: not interleaved
  bool torch_ddp;
};
inline constexpr Sc21Script kSc21Scripts[] = {
    {"GPT-1.7B", 16, 0, true},    {"GPT-3.6B", 16, 0, true},   {"GPT-7.5B", 16, 0, true},
    {"GPT-18.4B", 8, 0, true},    {"GPT-39.1B", 4, 0, false},  {"GPT-76.1B", 2, 5, false},
    {"GPT-145.6B", 2, 5, false},  {"GPT-310.1B", 1, 3, false}, {"GPT-529.6B", 1, 1, false},
    {"GPT-1008.0B", 1, 0, false},
};

// Megatron-Core weak-scaling rows leave the micro-batch size, interleaving and recomputation
// unstated: every Megatron-typical choice that validates is a candidate.
inline std::vector<spec::ParallelPlan> megatron_core_candidates(const spec::ModelSpec& m,
                                                                spec::ParallelPlan base) {
  std::vector<spec::ParallelPlan> out;
  const std::int64_t per_replica = base.global_batch / base.dp;
  for (int mb : {1, 2, 4, 8}) {
    if (per_replica % mb != 0) continue;
    const int micro = static_cast<int>(per_replica / mb);
    for (int v = 1; v <= 8; ++v) {
      if (m.layers % (static_cast<std::int64_t>(base.pp) * v) != 0) continue;
      if (v > 1 && (base.pp == 1 || micro % base.pp != 0)) continue;
      if (micro < base.pp) continue;
      for (spec::Recompute rc : {spec::Recompute::None, spec::Recompute::Selective}) {
        spec::ParallelPlan p = base;
        p.micro_batch_size = mb;
        p.microbatches = micro;
        p.chunks = v;
        p.schedule = v > 1 ? "interleaved-1f1b" : "1f1b";
        p.recompute = rc;
        out.push_back(p);
      }
    }
  }
  return out;
}

inline spec::Recompute recompute_of(const std::string& text) {
  if (contains(text, "full")) return spec::Recompute::Full;
  if (contains(text, "selective")) return spec::Recompute::Selective;
  return spec::Recompute::None;
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace detail

// Rows of published_runs_dev.csv (skipped ones included, with their reason). Throws
// std::runtime_error when the file cannot be read or lacks a column.
inline std::vector<PublishedRun> load_published_runs(const std::string& csv_path) {
  using namespace detail;
  std::ifstream in(csv_path);
  if (!in) throw std::runtime_error("cannot read " + csv_path);
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split_csv(line);
  std::map<std::string, std::size_t> column;
  for (std::size_t i = 0; i < header.size(); ++i) column[header[i]] = i;
  for (const char* need : {"source",
                           "model_name",
                           "layers",
                           "hidden",
                           "ffn_hidden",
                           "heads",
                           "kv_heads",
                           "vocab",
                           "seq_len",
                           "gpu_type",
                           "num_gpus",
                           "tp",
                           "pp",
                           "vpp",
                           "dp",
                           "micro_batch",
                           "global_batch",
                           "recompute",
                           "measured_tflops_per_gpu",
                           "measured_mfu",
                           "measured_tokens_per_s_or_iter_time"})
    if (!column.count(need)) throw std::runtime_error(csv_path + ": no column '" + need + "'");

  std::vector<PublishedRun> runs;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<std::string> f = split_csv(line);
    f.resize(header.size());
    const auto get = [&](const char* name) -> const std::string& { return f[column.at(name)]; };
    PublishedRun run;
    const std::string& source = get("source");
    const std::string& gpu = get("gpu_type");
    run.name = get("model_name");
    spec::ModelSpec& m = run.model;
    m.name = run.name;
    m.layers = integer(get("layers"));
    m.hidden = integer(get("hidden"));
    m.heads = integer(get("heads"));
    m.kv_heads = integer(get("kv_heads"));      // blank: no GQA (0 = heads)
    m.ffn_hidden = integer(get("ffn_hidden"));  // blank: 4h for GELU models
    m.vocab = integer(get("vocab"));
    m.seq_len = integer(get("seq_len"));
    // Llama models use SwiGLU and untied embeddings (Llama 2/3 papers); GPT-style models GELU.
    const bool llama = contains(run.name, "Llama");
    m.activation = llama ? spec::Activation::Swiglu : spec::Activation::Gelu;
    spec::ParallelPlan& p = run.plan;
    p.tp = static_cast<int>(integer(get("tp")));
    p.pp = static_cast<int>(integer(get("pp")));
    p.dp = static_cast<int>(integer(get("dp")));
    p.micro_batch_size = static_cast<int>(integer(get("micro_batch")));
    p.global_batch = integer(get("global_batch"));
    p.recompute = recompute_of(get("recompute"));
    const int gpus = static_cast<int>(integer(get("num_gpus")));
    const double tflops = number(get("measured_tflops_per_gpu"));
    const double mfu = number(get("measured_mfu"));
    tuner::ExecutionOptions& x = run.execution;

    if (contains(source, "Narayanan")) {
      run.group = "SC21 (A100)";
      // Megatron GPT ties the output layer to the embedding by default; fp16 training (SC21
      // Sec 5), attention without fused kernels (2021), no TP overlap, fp16 gradients.
      m.tied_embeddings = true;
      x.flash_attention = false;
      x.tp_comm_overlap = false;
      x.gradient_reduce_bytes = 2;
      x.overlap_param_gather = false;
      for (const Sc21Script& sc : kSc21Scripts) {
        if (run.name != sc.model) continue;
        p.micro_batch_size = sc.micro_batch;
        x.overlap_grad_reduce = sc.torch_ddp;
        if (sc.layers_per_virtual_stage > 0) {
          p.chunks = static_cast<int>(m.layers / p.pp / sc.layers_per_virtual_stage);
          if (p.chunks > 1) p.schedule = "interleaved-1f1b";
        }
      }
      p.recompute = spec::Recompute::Full;  // --recompute-method uniform (every layer)
      run.cluster = cluster_of("a100-80gb", gpus);
      run.formula = FlopFormula::MegatronSc21;
      run.metric = Metric::TflopsPerGpu;
      run.measured = tflops;
    } else if (contains(source, "NVIDIA/Megatron-LM")) {
      run.group = "Megatron-Core (H100), unstated knobs tuned";
      m.tied_embeddings = true;
      // README: --overlap-grad-reduce --overlap-param-gather (which needs the distributed
      // optimizer) --tp-comm-overlap (which needs sequence parallelism); TE fused attention.
      x.tp_comm_overlap = true;
      p.zero_stage = 1;
      p.sequence_parallel = p.tp > 1;
      run.cluster = cluster_of("h100-sxm", gpus);
      run.formula = FlopFormula::MegatronCore;
      run.metric = Metric::TflopsPerGpu;
      run.measured = tflops;
      spec::apply_defaults(m);
      run.candidates = megatron_core_candidates(m, p);
      if (!run.candidates.empty()) p = run.candidates.front();
    } else if (contains(source, "bigscience")) {
      run.group = "BLOOM (A100)";
      // tr11-176B-ml README: tied embeddings partitioned as layers (embedding + 5 layers on
      // the first stage, 5 layers + output on the last, 6 elsewhere), ZeRO-1 with BF16Optimizer
      // (fp32 gradient accumulation), DeepSpeed's pipeline engine (gradients reduced after the
      // flush; every TP rank sends whole activations), fused softmax (no flash attention). Jean
      // Zay A100 nodes: 8 GPUs and 4 x 100 Gb/s Omni-Path = 6.25 GB/s per GPU.
      m.tied_embeddings = true;
      p.zero_stage = 1;
      p.layer_split.assign(static_cast<std::size_t>(p.pp), 6);
      p.layer_split.front() = 5;
      p.layer_split.back() = 5;
      x.flash_attention = false;
      x.overlap_grad_reduce = false;
      x.overlap_param_gather = false;
      x.pp_scatter_gather = false;
      run.cluster = cluster_of("a100-80gb", gpus);
      run.cluster.inter_node_bandwidth = 4 * 100e9 / 8 / 8;
      run.formula = FlopFormula::MegatronSc21;
      run.metric = Metric::TflopsPerGpu;
      run.measured = tflops;
    } else if (contains(source, "OPT")) {
      run.group = "OPT (A100)";
      run.skip_reason = "TP/DP degrees, micro-batch and global batch not in the row";
    } else if (contains(source, "torchtitan")) {
      // FSDP2 = ZeRO-3 over the data-parallel group, bf16 compute with fp32 gradient reduction
      // (torchtitan's mixed_precision_reduce default), SDPA flash attention; TP with sequence
      // parallelism (torchtitan's Llama TP plan shards the norms' sequence dimension).
      const bool a100 = contains(gpu, "A100");
      run.group = a100 ? "torchtitan (A100)" : "torchtitan (H100)";
      p.zero_stage = 3;
      p.sequence_parallel = p.tp > 1;
      run.formula = FlopFormula::Torchtitan;
      if (a100) {
        run.cluster = cluster_of("a100-80gb", gpus);
        run.peak_flops = 312e12;
      } else {
        // Meta's Grand Teton H100s: 96 GB HBM2e at 2.4 TB/s, 500 W, 400 Gb/s per GPU
        // (torchtitan docs/performance.md); the 405B row's "94GB" is taken as the same part.
        run.cluster = cluster_of("h100-sxm", gpus);
        run.cluster.hardware.hbm_bytes =
            static_cast<std::int64_t>((contains(gpu, "94") ? 94 : 96) * kGiB);
        run.cluster.hardware.hbm_bandwidth = 2.4e12;
        run.peak_flops = 989e12;
      }
      if (mfu > 0.0) {
        run.metric = Metric::Mfu;
        run.measured = mfu;
      } else {
        run.metric = Metric::TokensPerGpu;
        run.measured = number(get("measured_tokens_per_s_or_iter_time"));  // "5762 tokens/s/GPU"
      }
    } else if (contains(source, "Yeung")) {
      run.group = "Vocabulary Parallelism (A100)";
      // Pure pipeline (PP = GPUs), 128 micro-batches of 1; Megatron fork with flash attention.
      if (contains(run.name, "Vocab-1")) p.vocab = schedule::VocabMode::Vocab1;
      if (contains(run.name, "Vocab-2")) p.vocab = schedule::VocabMode::Vocab2;
      run.cluster = cluster_of("a100-80gb", gpus);
      run.formula = FlopFormula::VocabularyPaper;
      run.metric = Metric::Mfu;
      run.measured = mfu;
      run.peak_flops = 312e12;
    } else {
      run.group = "other";
      run.skip_reason = "unknown source";
    }
    if (run.skip_reason.empty() && (p.tp * p.pp * p.dp != gpus || p.micro_batch_size <= 0 ||
                                    p.global_batch <= 0 || !(run.measured > 0.0)))
      run.skip_reason = "incomplete configuration";
    if (run.skip_reason.empty()) {
      spec::apply_defaults(m);
      p.microbatches = 0;
      spec::apply_defaults(p);
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

// The Vocabulary Parallelism paper's 8-GPU table (sail-sg/VocabularyParallelism
// artifact/README.md "Full Experiment", = the 8-GPU rows of the paper's Table 5; transcribed in
// reference/schedules.md d.1): ~4B GPT, 32 layers, hidden 3072, 24 heads, FFN 12288,
// micro-batch 1, 128 micro-batches, 8 x A100 in one server, PP = 8, MFU on 312 TFLOP/s.
struct VocabularyCell {
  std::int64_t seq_len = 0, vocab = 0;
  std::string method;  // baseline, redis, vocab-1, vocab-2, interlaced
  PublishedRun run;
};

inline std::vector<VocabularyCell> vocabulary_paper_table() {
  struct Row {
    std::int64_t seq, vocab;
    double mfu[5];  // baseline, redis, vocab-2, vocab-1, interlaced (%)
    int redis_last_stage_layers;
  };
  // --final-stage-num-layers of the artifact's redistribution baseline: 0 / 2 / 3 / 4 layers on
  // the last stage for 256k / 128k / 64k / 32k (schedules.md b.6).
  const Row rows[] = {
      {2048, 32768, {47.52, 47.52, 52.56, 53.10, 54.01}, 4},
      {2048, 65536, {40.82, 49.15, 52.36, 52.74, 53.81}, 3},
      {2048, 131072, {33.70, 44.12, 51.95, 52.22, 53.55}, 2},
      {2048, 262144, {17.29, 38.21, 51.20, 51.73, 53.14}, 0},
      {4096, 32768, {52.82, 52.81, 58.23, 58.52, 59.39}, 4},
      {4096, 65536, {45.78, 53.81, 57.94, 58.22, 59.01}, 3},
      {4096, 131072, {37.13, 49.56, 57.40, 57.87, 58.61}, 2},
      {4096, 262144, {27.63, 42.45, 56.61, 57.31, 58.04}, 0},
  };
  const char* methods[] = {"baseline", "redis", "vocab-2", "vocab-1", "interlaced"};
  const schedule::VocabMode modes[] = {schedule::VocabMode::None, schedule::VocabMode::None,
                                       schedule::VocabMode::Vocab2, schedule::VocabMode::Vocab1,
                                       schedule::VocabMode::Interlaced};
  std::vector<VocabularyCell> out;
  for (const Row& row : rows) {
    for (int k = 0; k < 5; ++k) {
      VocabularyCell c;
      c.seq_len = row.seq;
      c.vocab = row.vocab;
      c.method = methods[k];
      PublishedRun& run = c.run;
      run.group = "Vocabulary Parallelism 8-GPU table (A100)";
      run.name = "4B s=" + std::to_string(row.seq) + " V=" + std::to_string(row.vocab / 1024) +
                 "k " + methods[k];
      spec::ModelSpec& m = run.model;
      m.name = "vp-4b";
      m.layers = 32;
      m.hidden = 3072;
      m.heads = 24;
      m.ffn_hidden = 12288;
      m.vocab = row.vocab;
      m.seq_len = row.seq;
      spec::apply_defaults(m);
      spec::ParallelPlan& p = run.plan;
      p.pp = 8;
      p.micro_batch_size = 1;
      p.microbatches = 128;
      p.vocab = modes[k];
      if (k == 1) {
        // The remaining layers spread over the first 7 stages, the first ones taking the rest.
        const int last = row.redis_last_stage_layers;
        p.layer_split = spec::even_layer_split(32 - last, 7);
        p.layer_split.push_back(last);
      }
      spec::apply_defaults(p);
      run.cluster = spec::make_cluster(spec::load_hardware("a100-80gb"), 8);
      run.formula = FlopFormula::VocabularyPaper;
      run.metric = Metric::Mfu;
      run.measured = row.mfu[k] / 100.0;
      run.peak_flops = 312e12;
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace pipetune::validation
