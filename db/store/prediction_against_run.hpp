// A run file's prediction against a measured or imported run of the same plan, stage by stage:
// each stage's compute time and bubble (averaged over its tp * dp ranks, the stage's own tp with
// per-stage layouts), its peak memory (the largest of its ranks') and the iteration, with the
// relative errors. What `pipetune predict --config RUN --against STORED` prints.
#pragma once

#include <vector>

#include "db/store/run_iteration.hpp"
#include "tuner/run_setup.hpp"

namespace pipetune::db {

struct StageAgainstPrediction {
  int stage = 0;
  int ranks = 0;                   // the run's ranks of this stage (0: none measured)
  double predicted_compute = 0.0;  // seconds
  double measured_compute = 0.0;   // seconds, mean over the stage's ranks
  double compute_error = 0.0;      // (measured - predicted) / predicted; 0 when nothing predicted
  double predicted_bubble_ratio = 0.0;
  double measured_bubble_ratio = 0.0;
  // Memory per device (bytes): the memory model's total and activations at the simulated peak
  // (with the stage's own recomputation), against the largest peak of the stage's ranks in the
  // compared iteration (total over categories, and activations alone; 0 when the run recorded no
  // memory). peak_error as compute_error.
  double predicted_peak_bytes = 0.0;
  double measured_peak_bytes = 0.0;
  double peak_error = 0.0;
  double predicted_activation_bytes = 0.0;
  double measured_activation_bytes = 0.0;
};

struct PredictionAgainstRun {
  std::vector<StageAgainstPrediction> stages;  // one per pipeline stage of the plan
  double predicted_iteration = 0.0;            // seconds
  double measured_iteration = 0.0;             // seconds: the compared iteration's window
  double iteration_error = 0.0;
  // A run of the CUDA engine whose ranks shared GPUs (streams of one device): its stages' compute
  // compares with the prediction, its iteration does not (the simulation gives each rank a GPU).
  bool ranks_shared_gpus = false;
  int measured_gpus = 0;  // the GPUs the run trained on (the plan's world when each had one)
};

// `setup` from tuner::setup_from_run_file (with its run and iteration). InputError naming both
// when the stored run is a simulation, has no plan, is not a run of the run file's model, plan
// and hardware (db/store/run_match.hpp), has no complete iteration, or groups its ranks
// otherwise than the plan.
PredictionAgainstRun compare_prediction_with_run(const tuner::SimulationSetup& setup,
                                                 const RunIteration& run);

}  // namespace pipetune::db
