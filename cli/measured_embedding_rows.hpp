// The input embedding rows a batch's tokens touch, which EmbRace's sparse embedding gradient
// exchanges, as a stored training run measured them (its counters per step,
// profiler/analysis/embedding_rows.hpp) against the uniform estimate the cost model otherwise
// takes: `pipetune report`'s part, and `--embedding-rows X` / `--embedding-rows-from RUN` of
// predict and tune, the factor ExecutionOptions::embedding_rows_factor prices the rows at.
#pragma once

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/workspace_cli.hpp"

namespace pipetune::cli {

// What a stored run's counters say, summed over its steps and the ranks holding the table: the
// rows touched, and what uniform draws of as many tokens would touch in the same shards.
struct MeasuredEmbeddingRows {
  double touched = 0.0, uniform = 0.0;
  int samples = 0;  // rank-steps
  double factor() const { return touched / uniform; }
};
// None when the run recorded no embedding rows (a simulation, an import, a run before the engine
// counted them). InputError (naming `who`) for counters cut short.
std::optional<MeasuredEmbeddingRows> measured_embedding_rows(const LoadedRun& r,
                                                             const std::string& who);

// `pipetune report`'s part: the rows a step touched against the uniform estimate and the factor
// `--embedding-rows-from` takes; nothing (null) when the run recorded none.
void print_embedding_rows(const LoadedRun& r);
nlohmann::json embedding_rows_json(const LoadedRun& r);

struct EmbeddingRowsArgs {
  std::optional<double> factor;
  std::string from_run;
};

void add_embedding_rows_options(CLI::App* cmd, EmbeddingRowsArgs& a);

// What the flags give (none: the uniform estimate). From a run: the rows its ranks' tokens
// touched, summed over its steps and ranks, over what uniform draws of as many tokens would
// have touched in the same shards. InputError for a factor not above 0 or not finite, both
// flags, or a run without the counters.
std::optional<double> embedding_rows_factor(const EmbeddingRowsArgs& a, const std::string& db);

}  // namespace pipetune::cli
