#!/usr/bin/env python3
"""Checks compute-only schedule CSVs with torch.distributed.pipelining's own code.

    check_pipelining_csv_with_torch.py --schedule CSV PP STAGES MICROBATCHES [--schedule ...]

Each CSV is read as _PipelineScheduleRuntime._load_csv reads it for format "compute_only"
(torch/distributed/pipelining/schedules.py, pytorch/pytorch 00722e6): csv.reader over the file,
_Action.from_str for every cell, row i being pipeline rank i. Then, as that load does:
  1. _validate_schedule(actions, pp_group_size, num_stages, num_microbatches): every stage has
     every micro-batch's F, then B or I before W, each stage on one rank; it returns the
     stage -> rank mapping, which the runtime uses in place of its default one (so loop or V
     placement needs no argument here: torch infers it from the CSV).
  2. The lowering _PipelineScheduleRuntime._prepare_schedule_with_comms runs: only compute
     actions (_Action.is_compute_op), _add_unshard_reshard and _add_reduce_grad on each rank's
     actions, then _add_send_recv over all ranks, which raises when no rank can take its next
     action (a schedule that would hang).
Then, as torch's own lowering tests do (test/distributed/pipelining/test_schedule.py), the
compute actions with their sends and receives (_add_send_recv) go through
_simulate_comms_compute, which raises when the simulated ranks stop progressing (deadlock).
Helpers this torch does not have are left out and named on the first line.

Prints one line naming torch and the checks, then one line per CSV (OK, or FAIL with the first
line of torch's message; a longer message, and what torch printed, goes to stderr). Exits 0 when every CSV passes, 1 when one fails,
2 on bad arguments, and 77 (a skipped test) with one line "SKIP: <reason>" when python3 has no
torch, or a torch without torch.distributed.pipelining.schedules._validate_schedule (or with
another signature than the one above).
"""

import argparse
import contextlib
import csv
import inspect
import io
import sys

SKIP = 77


def skip(reason):
    print("SKIP: " + " ".join(str(reason).split()))
    sys.exit(SKIP)


def parameter_names(function):
    try:
        return [
            p.name
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return None


class Torch:
    """torch.distributed.pipelining.schedules' names this check uses, or a skip saying why not."""

    MODULE = "torch.distributed.pipelining.schedules"
    VALIDATE_PARAMETERS = ["actions", "pp_group_size", "num_stages", "num_microbatches"]
    # name -> the leading positional parameters expected; torch's parameter names as of 00722e6.
    HELPERS = {
        "_add_unshard_reshard": ["compute_actions"],
        "_add_reduce_grad": ["actions", "n_microbatches"],
        "_add_send_recv": ["compute_actions", "stage_to_rank", "num_stages"],
        "_simulate_comms_compute": ["pipeline_order", "stage_to_rank", "num_stages"],
    }

    def __init__(self):
        try:
            import torch
        except ModuleNotFoundError as e:
            if e.name == "torch":
                skip("python3 has no torch module (%s)" % sys.executable)
            skip("importing torch failed: %s: %s" % (type(e).__name__, e))
        except Exception as e:  # a broken install (a missing shared library, ...)
            skip("importing torch failed: %s: %s" % (type(e).__name__, e))
        self.version = getattr(torch, "__version__", "(no __version__)")
        try:
            import importlib

            schedules = importlib.import_module(self.MODULE)
        except Exception as e:
            skip("torch %s has no %s (%s: %s)" % (self.version, self.MODULE, type(e).__name__, e))
        for name in ("_Action", "_validate_schedule"):
            if not hasattr(schedules, name):
                skip("torch %s has no %s.%s" % (self.version, self.MODULE, name))
        self.Action = schedules._Action
        if not callable(getattr(self.Action, "from_str", None)):
            skip("torch %s has no %s._Action.from_str" % (self.version, self.MODULE))
        self.validate_schedule = schedules._validate_schedule
        names = parameter_names(self.validate_schedule)
        if names != self.VALIDATE_PARAMETERS:
            skip(
                "torch %s's %s._validate_schedule takes (%s), not (%s)"
                % (self.version, self.MODULE, ", ".join(names or ["?"]),
                   ", ".join(self.VALIDATE_PARAMETERS))
            )
        # Lowering and simulation helpers: each used only when present with the expected leading
        # parameters, so that an older or newer torch is checked as far as it can be.
        self.helpers = {}
        self.left_out = []
        for name, expected in self.HELPERS.items():
            function = getattr(schedules, name, None)
            names = parameter_names(function) if callable(function) else None
            if names is None:
                self.left_out.append(name + " (absent)")
            elif names[: len(expected)] != expected:
                self.left_out.append("%s (takes %s)" % (name, ", ".join(names)))
            else:
                self.helpers[name] = function
        self.has_is_compute_op = hasattr(self.Action, "is_compute_op")

    def describe(self):
        lowering = [n for n in ("_add_unshard_reshard", "_add_reduce_grad", "_add_send_recv")
                    if n in self.helpers]
        parts = ["torch %s: _validate_schedule" % self.version]
        if "_add_send_recv" in self.helpers:
            parts.append("load-time lowering (%s)" % ", ".join(lowering))
            if "_simulate_comms_compute" in self.helpers:
                parts.append("_simulate_comms_compute")
        if self.left_out:
            parts.append("not in this torch: " + ", ".join(self.left_out))
        return "; ".join(parts)


class Failure(Exception):
    def __init__(self, step, error, detail=""):
        super().__init__(step)
        self.step = step
        self.error = error
        self.detail = detail


def run_step(step, function, *args, **kwargs):
    """Calls a torch function, turning what it raises into a Failure naming the step. Whatever it
    prints on stdout (_simulate_comms_compute prints the stuck schedule) is kept for the report."""
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed):
            return function(*args, **kwargs)
    except Exception as e:
        raise Failure(step, e, printed.getvalue())


def load_csv(torch, path):
    # As _load_csv: the file opened with newline="", one csv.reader row per rank.
    actions = {}
    with open(path, newline="") as f:
        for rank, row in enumerate(csv.reader(f)):
            actions[rank] = [torch.Action.from_str(cell) for cell in row]
    return actions


def copy_of(actions):
    # _add_send_recv consumes the lists it is given.
    return {rank: list(row) for rank, row in actions.items()}


def check(torch, path, pp, stages, microbatches):
    """Returns what was checked; raises Failure."""
    actions = run_step("reading the CSV as _load_csv does", load_csv, torch, path)
    mapping = run_step("_validate_schedule", torch.validate_schedule, actions, pp, stages,
                       microbatches)
    done = ["valid (%d ranks)" % len(actions)]
    send_recv = torch.helpers.get("_add_send_recv")
    if send_recv is None:
        return done
    if not isinstance(mapping, dict):
        done.append("not lowered: this torch's _validate_schedule returned no stage -> rank "
                    "mapping")
        return done

    def stage_to_rank(stage):
        return mapping[stage]

    if torch.has_is_compute_op:
        for rank, row in actions.items():
            for i, action in enumerate(row):
                if action is not None and not action.is_compute_op:
                    raise Failure("compute-only check",
                                  ValueError("rank %d, cell %d: %s is not a compute action"
                                             % (rank, i + 1, action)))
    lowered = {}
    for rank, row in actions.items():
        lowered[rank] = row
        if "_add_unshard_reshard" in torch.helpers:
            lowered[rank] = run_step("_add_unshard_reshard", torch.helpers["_add_unshard_reshard"],
                                     lowered[rank])
        if "_add_reduce_grad" in torch.helpers:
            lowered[rank] = run_step("_add_reduce_grad", torch.helpers["_add_reduce_grad"],
                                     lowered[rank], microbatches)
    lowered = run_step("_add_send_recv (load-time lowering)", send_recv, copy_of(lowered),
                       stage_to_rank=stage_to_rank, num_stages=stages)
    done.append("lowered with %d sends/receives"
                % sum(1 for row in lowered.values() for a in row
                      if a is not None and ("SEND" in str(a) or "RECV" in str(a))))
    simulate = torch.helpers.get("_simulate_comms_compute")
    if simulate is None:
        return done
    with_comms = run_step("_add_send_recv (compute actions)", send_recv, copy_of(actions),
                          stage_to_rank=stage_to_rank, num_stages=stages)
    simulated = run_step("_simulate_comms_compute", simulate, with_comms, stage_to_rank, stages)
    done.append("simulated in %d steps" % max((len(row) for row in simulated.values()), default=0))
    return done


def positive(text):
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


def main():
    parser = argparse.ArgumentParser(
        description="Check schedule CSVs with torch.distributed.pipelining's _validate_schedule, "
        "the runtime's lowering and its simulation.")
    parser.add_argument("--schedule", nargs=4, action="append", required=True,
                        metavar=("CSV", "PP", "STAGES", "MICROBATCHES"),
                        help="a CSV, its pipeline degree, number of stages and of micro-batches")
    args = parser.parse_args()
    schedules = []
    for path, *numbers in args.schedule:
        try:
            schedules.append((path, *[positive(n) for n in numbers]))
        except ValueError:
            parser.error("%s: PP, STAGES and MICROBATCHES must be positive integers, not %s"
                         % (path, " ".join(numbers)))

    torch = Torch()
    print(torch.describe(), flush=True)
    failures = 0
    for path, pp, stages, microbatches in schedules:
        what = "%s (pp=%d, stages=%d, micro-batches=%d)" % (path, pp, stages, microbatches)
        try:
            done = check(torch, path, pp, stages, microbatches)
            print("OK   %s: %s" % (what, ", ".join(done)), flush=True)
        except Failure as f:
            failures += 1
            message = str(f.error) or repr(f.error)
            first = message.strip().splitlines()[0] if message.strip() else ""
            print("FAIL %s: %s: %s: %s" % (what, f.step, type(f.error).__name__, first),
                  flush=True)
            if f.detail or message.strip() != first:  # the whole message, and what torch printed
                print("---- %s, %s:\n%s%s" % (path, f.step, f.detail, message), file=sys.stderr,
                      flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
