// A session's ranks as processes of a job that mpirun or srun started: one rank per process over
// MPI's own collectives, K rank threads per process over a router, or one GPU per process over
// NCCL. Rank 0's process stores and reports the run; any failure ends every process of the job.
#include <chrono>
#include <memory>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/errors.hpp"
#include "engine/session/sink_wiring.hpp"
#include "engine/session/training_session.hpp"
#ifdef PIPETUNE_HAVE_MPI
#include "engine/comm/topology.hpp"
#include "engine/mpi/mpi_communicator.hpp"
#include "engine/mpi/mpi_failure_notice.hpp"
#include "engine/mpi/mpi_hybrid_communicator.hpp"
#include "engine/mpi/mpi_session.hpp"
#include "engine/spec/parallel_plan.hpp"
#endif
#ifdef PIPETUNE_HAVE_NCCL
#include "engine/nccl/nccl_rank_device.hpp"
#include "engine/session/cuda_choices.hpp"
#endif

namespace pipetune::session {

#ifndef PIPETUNE_HAVE_MPI
TrainingOutcome TrainingSession::run_processes() {
  // rank_layout refuses a launcher's processes in a build without MPI.
  throw std::logic_error("ranks as processes in a build without MPI");
}
#else

namespace {

// How long a failed process waits for rank 0's process to record its failure and end the job.
constexpr int kRootGraceSeconds = 10;

// Ends every process of the job after this process failed: exit 2 for input errors, 1
// otherwise. Another process than rank 0's first tells rank 0's (`notice`, when it has one),
// which stores its run as failed and ends the job when it next waits; if it never comes to a
// wait, this process ends the job after the grace period and the run is left interrupted.
[[noreturn]] void end_job(const mpi::MpiSession& mpi, mpi::MpiFailureNotice* notice,
                          const std::string& what, int code,
                          const std::function<void(const ProcessFailure&)>& report) {
  if (report) {
    try {
      report(ProcessFailure{mpi.rank(), what, code, std::current_exception()});
    } catch (...) {  // the job ends whatever the report does
    }
  }
  if (code != 2 && mpi.rank() != 0 && notice != nullptr && notice->tell_root(what, 5.0))
    std::this_thread::sleep_for(std::chrono::seconds(kRootGraceSeconds));
  mpi.abort(code);
}

// This process's ranks' communicators, alive while they train: MPI's own collectives over a
// communicator per group (one rank per process), or a router of the process's rank threads
// (several: a process is one member of an MPI communicator).
struct ProcessCommunicators {
  std::optional<mpi::MpiCommunicator> single;
  std::optional<mpi::MpiRankRouter> router;
  std::vector<std::unique_ptr<mpi::MpiHybridCommunicator> > hybrid;

  // with_channel: the plan reduces layer groups on a thread of each rank's own (one rank a
  // process: MpiCommunicator's channel; hybrid processes reduce on the rank's thread).
  runtime::TrainOptions::Processes make(const std::vector<comm::ProcessGroup>& groups,
                                        int ranks_per_process, double watchdog_seconds,
                                        mpi::MpiFailureNotice& failures, bool with_channel) {
    runtime::TrainOptions::Processes processes;
    if (ranks_per_process == 1) {
      single.emplace(groups, watchdog_seconds, with_channel);
      single->watch_failures(&failures);
      processes.ranks = {&*single};
      processes.gather_to_root = [this](comm::Communicator&, const std::string& bytes) {
        return single->gather_bytes(bytes, 0);
      };
      return processes;
    }
    router.emplace(ranks_per_process, watchdog_seconds);
    router->watch_failures(&failures);
    for (int k = 0; k < ranks_per_process; ++k) {
      hybrid.push_back(
          std::make_unique<mpi::MpiHybridCommunicator>(*router, router->first_rank() + k, groups));
      processes.ranks.push_back(hybrid.back().get());
    }
    processes.gather_to_root = [](comm::Communicator& c, const std::string& bytes) {
      return static_cast<mpi::MpiHybridCommunicator&>(c).gather_bytes(bytes, 0);
    };
    processes.on_rank_failure = [this](int rank, const std::string& reason) {
      router->fail(rank, reason);
    };
    return processes;
  }
};

}  // namespace

TrainingOutcome TrainingSession::run_processes() {
  mpi::MpiSession mpi(nullptr, nullptr);
  const bool root = mpi.rank() == 0;
  const auto& report = request_.on_process_failure;
  // Made first, in every process (a collective); outside the try, so that a process failing
  // anywhere in it can tell rank 0's process (end_job).
  std::optional<mpi::MpiFailureNotice> failures;
  TrainingOutcome outcome;
  outcome.reports = root;
  try {
    failures.emplace();
    runtime::TrainOptions o = request_.train;
    const comm::Topology topology(o.plan);
    const std::vector<comm::ProcessGroup> groups = comm::every_group(topology);
#ifdef PIPETUNE_HAVE_NCCL
    if (o.rank_device) {  // cuda: each process's rank on its own GPU, over NCCL
      const spec::TrainingEngine& engine = request_.engine;
      o.rank_device = nccl::nccl_rank_devices(
          {groups, cuda_precision(engine), o.watchdog_seconds, flash_variant(engine.attention),
           bf16_operands(engine), engine.gelu_epilogue, &*failures});
      if (o.device_memory) o.device_memory->name = "each process's GPU";
    }
#endif
    ProcessCommunicators communicators;
    const bool with_channel =
        o.overlap_reductions && !o.rank_device &&
        (spec::reduces_per_group(o.plan) || spec::overlaps_moe_all_to_all(o.plan));
    o.processes = communicators.make(groups, layout_.ranks_per_process, o.watchdog_seconds,
                                     *failures, with_channel);
    o.record_trace = false;  // a trace of every rank is the stored run's
    std::unique_ptr<profiler::RunSink> sink;
    if (root) {
      if (request_.open_run) sink = request_.open_run(run_start(o, request_.engine));
      wire_sink(o, sink.get(), request_.on_trace_part);
      outcome.run_id = sink ? sink->run_id() : -1;
      if (request_.on_start) request_.on_start(outcome.run_id, layout_);
    } else {
      o.on_step = nullptr;
      o.kernel_sink = nullptr;
      // Every process streams (a collective per step) when rank 0's does; only rank 0's sink
      // receives the parts.
      o.trace_sink = nullptr;
      if (request_.open_run || request_.on_trace_part) o.trace_sink = [](profiler::Trace) {};
    }
    // A failed run ends the job here, before this scope's communicators are destroyed: their
    // destructors would wait (up to the watchdog) for sends no process will take now.
    try {
      outcome.result = train_into(std::move(o), sink.get());
    } catch (const InputError& e) {
      end_job(mpi, nullptr, e.what(), 2, report);
    } catch (const std::exception& e) {
      end_job(mpi, &*failures, e.what(), 1, report);
    }
  } catch (const InputError& e) {
    end_job(mpi, nullptr, e.what(), 2, report);
  } catch (const std::exception& e) {
    end_job(mpi, failures ? &*failures : nullptr, e.what(), 1, report);
  }
  return outcome;
}

#endif

}  // namespace pipetune::session
