#include "cli/measured_embedding_rows.hpp"

#include <cstdio>

#include "cli/workspace_cli.hpp"
#include "engine/errors.hpp"
#include "engine/spec/run_spec.hpp"
#include "profiler/analysis/analysis_error.hpp"
#include "profiler/analysis/embedding_rows.hpp"
#include "tuner/cost/sparse_embedding_cost.hpp"

namespace pipetune::cli {

void add_embedding_rows_options(CLI::App* cmd, EmbeddingRowsArgs& a) {
  cmd->add_option("--embedding-rows", a.factor,
                  "Sparse embedding gradient: the input embedding rows a batch touches over what "
                  "uniformly drawn tokens would touch (> 0; default 1, the uniform estimate, an "
                  "upper bound for text)");
  cmd->add_option("--embedding-rows-from", a.from_run,
                  "The same measured by a stored training run (id or name, in --db): its "
                  "touched rows per step against the uniform estimate for its tokens");
}

std::optional<MeasuredEmbeddingRows> measured_embedding_rows(const LoadedRun& r,
                                                             const std::string& who) {
  profiler::analysis::EmbeddingRows rows;
  try {
    rows = profiler::analysis::embedding_rows(r.stored.trace);
  } catch (const profiler::analysis::AnalysisError& e) {
    throw InputError(who + ": " + e.what());
  }
  MeasuredEmbeddingRows m;
  for (const profiler::analysis::EmbeddingRowsSample& s : rows.samples) {
    m.touched += s.touched;
    m.uniform += tuner::expected_touched_rows(s.shard_rows, s.vocab, s.tokens);
    ++m.samples;
  }
  if (rows.empty() || !(m.uniform > 0.0)) return std::nullopt;
  return m;
}

void print_embedding_rows(const LoadedRun& r) {
  const std::optional<MeasuredEmbeddingRows> m = measured_embedding_rows(r, "embedding rows");
  if (!m) return;
  const double n = m->samples;
  std::printf(
      "\nembedding rows: %.1f touched a step per rank holding the input table, %.1f for uniform "
      "tokens: factor %.3f (predict and tune --embedding-rows-from)\n",
      m->touched / n, m->uniform / n, m->factor());
}

nlohmann::json embedding_rows_json(const LoadedRun& r) {
  const std::optional<MeasuredEmbeddingRows> m = measured_embedding_rows(r, "embedding rows");
  if (!m) return nullptr;
  const double n = m->samples;
  return {{"touched_per_step", m->touched / n},
          {"uniform_per_step", m->uniform / n},
          {"factor", m->factor()},
          {"samples", m->samples}};
}

std::optional<double> embedding_rows_factor(const EmbeddingRowsArgs& a, const std::string& db) {
  if (a.factor && !a.from_run.empty())
    throw InputError("--embedding-rows and --embedding-rows-from exclude each other");
  if (a.factor) {
    if (const std::string problem = spec::embedding_rows_problem(*a.factor); !problem.empty())
      throw InputError("--embedding-rows " + problem);
    return a.factor;
  }
  if (a.from_run.empty()) return std::nullopt;
  const std::string who = "--embedding-rows-from " + a.from_run;
  const std::optional<MeasuredEmbeddingRows> m =
      measured_embedding_rows(load_run(db, a.from_run), who);
  if (!m) throw InputError(who + ": the run recorded no embedding rows (train with --db)");
  return m->factor();
}

}  // namespace pipetune::cli
