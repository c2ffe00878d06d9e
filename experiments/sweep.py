"""Run a grid of experiments into one results folder, resumable cell by cell, as one job, a
job array, or several workers.

    python -m experiments.sweep --config experiments/configs/default.py --results /tmp/grid \
        --algorithms=fedavg,fedinit --seeds=0,1,2 --betas=0,0.1 --dirichlet_alphas=0.1,0.6
    python -m experiments.sweep ... --list                          # index, name, state per cell
    python -m experiments.sweep ... --cell=$SLURM_ARRAY_TASK_ID     # exactly one cell
    python -m experiments.sweep ... --workers=8                     # 8 cells at once

The grid is algorithms x Dirichlet alphas x betas x local epochs x delta_from x the --grid
axes x seeds on top of the config (which --config.FIELD overrides change for every cell), in
that order; a cell's index is its place in it. `--grid FIELD=v1,v2` (repeatable) adds an axis
over any other config field, each value read as the field's type (`--grid
ri_offset=next,momentum --grid first_visit=global`). Each cell is a workdir
<results>/<algorithm>-dir<alpha>-beta<beta>-E<epochs>-<delta_from>[-<FIELD><value>...]-s<seed>
(Shakespeare: -roles- instead of -dir<alpha>-, its partition is natural), named with the
resolved values (no --betas: each algorithm's default beta, e.g. beta0.1 for FedInit, as
config.json records it).

A cell is in one of six states, the same in --list, the status files and the exit code:
done, diverged (not rerun unless --rerun_diverged), failed (an error: its line says which),
unfinished (k/R rounds: resumes from its last checkpoint), not started, running elsewhere
(its workdir's lock is held: another sweep, a job array task; the sweep runs the other cells
first, then waits for it (--wait, default) and takes it over if its holder ended without
finishing it). Every cell's lines are printed (prefixed by the cell's name under --workers)
and kept in its workdir's train.log; the sweep ends with a table of its cells (state, final
test accuracy, rounds, training time).

Status: <results>/sweep_status/<cell>.json, written only by the process that ran the cell or
found it finished (no file shared by several processes), with the config it was for.
--workers=P runs P cells at once, each in its own process (`--cell=I`): on a GPU host each
pinned to one GPU (CUDA_VISIBLE_DEVICES), on CPU each with its share of the cores (its own XLA
CPU devices and CPU affinity). `--list --unfinished` prints the indices still to run (not
started, unfinished, failed) as an array spec (`sbatch --array=$(...)`).

Exit code (experiments/exit_codes.py), of a run and of --list alike, the first that applies:
2 bad flags or a cell that cannot run on this process's devices (every cell is planned
before the first runs; such a cell is recorded failed, so a --workers sweep's table says
why), 1 a cell failed, 75 stopped by SIGTERM / SIGINT (the running cells checkpoint
first) or (--list) cells unfinished or not started, 6 cells running elsewhere (--nowait;
--list), 3 a cell diverged, 0 every cell done; 128 + N at a second signal N.
"""
from experiments import loading_signals  # noqa: F401, I001 (first: a signal while loading)

import os
import signal
import sys
import time

from experiments import exit_codes
from experiments.cell_states import cell_state, describe_state, record, recorded
from experiments.cli import (check_xla_flags, define_config, one_line, parse_flags,
                             use_all_cpu_cores)
from experiments.grid import cells_of_flags
from experiments.sweep_workers import stop_if, with_workers

use_all_cpu_cores()  # before JAX is imported: one XLA CPU device per core

from absl import app, flags, logging  # noqa: E402

define_config("experiments/configs/default.py", "Base experiment config (ml_collections).")
flags.DEFINE_string("results", None, "Results folder: one workdir per cell.")
flags.DEFINE_list("algorithms", ["fedavg", "fedinit"], "Registered algorithm names.")
flags.DEFINE_list("dirichlet_alphas", [], "Dirichlet alphas (empty: the config's).")
flags.DEFINE_list("betas", [], "RI coefficients (empty: each algorithm's default).")
flags.DEFINE_list("local_epochs", [], "Local epochs (empty: the config's).")
flags.DEFINE_list("delta_from", [], "global and/or start (empty: the config's).")
flags.DEFINE_list("seeds", ["0"], "Seeds.")
flags.DEFINE_multi_string("grid", [], "FIELD=v1,v2: one more axis of the grid over any config "
                          "field but those above (repeatable).")
flags.DEFINE_bool("list", False, "Print every cell (index, name, state) and exit; the exit "
                  "code says the grid's state (module doc).")
flags.DEFINE_bool("unfinished", False, "With --list: print only the indices of the cells still "
                  "to run (not started, unfinished, failed) as an array spec, e.g. 0,3-5.")
flags.DEFINE_bool("rerun_diverged", False, "Run the cells that diverged again (by default a "
                  "diverged cell is reported and skipped).")
flags.DEFINE_integer("cell", None, "Run only the cell of this index (0-based, see --list).")
flags.DEFINE_integer("workers", 1, "Cells run at once, each in its own process.")
flags.DEFINE_bool("wait", True, "After the other cells, wait for cells running elsewhere "
                  "(and take over those whose holder ended unfinished).")
flags.DEFINE_bool("summary", True, "Print the closing table of the cells (--workers' "
                  "children do not).")
flags.DEFINE_bool("prefix_lines", False, "Prefix every line of a cell with its name (set for "
                  "--workers' children, which share a terminal).")
FLAGS = flags.FLAGS
POLL_SECONDS = 2.0
# a run's outcome per cell -> the sweep's exit code, the first that applies
EXIT_ORDER = (("failed", exit_codes.CELL_FAILED), ("stopped", exit_codes.REQUEUE),
              ("unfinished", exit_codes.REQUEUE), ("not started", exit_codes.REQUEUE),
              ("running elsewhere", exit_codes.ELSEWHERE), ("diverged", exit_codes.DIVERGED))


def _cell_log(name):
    """Where a cell's lines go: stdout, prefixed by its name when cells share a terminal."""
    prefix = f"{name}: " if FLAGS.prefix_lines else ""
    return lambda line: print(f"{prefix}{line}", flush=True)


def _run_cell(results, index, total, name, plan) -> str:
    """Run (or skip) one cell, planned for this process (experiment.plan), here: 'done',
    'diverged', 'failed' or 'running elsewhere' (cell_state's words).
    simulation.Stopped propagates (the caller exits)."""
    from fedinit_jax.experiment import simulation

    config = plan.config
    workdir = os.path.join(results, name)
    try:
        if simulation.finished_rounds(workdir, config) >= config["rounds"]:
            record(results, name, config, "done")
            return "done"
        earlier = recorded(results, name, config)
        if earlier.get("state") == "diverged" and not FLAGS.rerun_diverged:
            print(f"[{index + 1}/{total}] {name}: diverged earlier, skipped (--rerun_diverged "
                  "runs it again)", flush=True)
            return "diverged"
        print(f"[{index + 1}/{total}] {name}", flush=True)
        simulation.run(plan, workdir, progress=False, log=_cell_log(name))
        record(results, name, config, "done")
        return "done"
    except simulation.WorkdirBusy as err:
        print(f"  running elsewhere: {name}: {one_line(err)}", flush=True)
        return "running elsewhere"
    except simulation.NonFiniteError as err:
        record(results, name, config, "diverged", str(err))
        print(f"  diverged: {name}: {err}", flush=True)
        return "diverged"
    except simulation.Stopped as err:
        record(results, name, config, "unfinished",
                f"stopped after round {err.rounds_done}; rerun to resume")
        raise
    except (ValueError, OSError, simulation.WriteError) as err:
        record(results, name, config, "failed", one_line(err))
        print(f"  error: {name}: {one_line(err)}", file=sys.stderr, flush=True)
        return "failed"


def plan_cells(results, grid, chosen) -> dict:
    """{index: experiment.plan} of the chosen cells, on this process's devices, before the
    first one runs. A cell whose config cannot run here (e.g. more devices than a worker
    has) is recorded 'failed' with the reason, and a ValueError names every such cell."""
    from fedinit_jax import experiment

    plans, refused = {}, []
    for i in chosen:
        name, config = grid[i]
        try:
            plans[i] = experiment.plan(config)
        except ValueError as err:
            record(results, name, config, "failed", one_line(err))
            refused.append(f"cell {name}: {one_line(err)}")
    if refused:
        raise ValueError("\n".join(refused))
    return plans


def _in_process(results, grid, plans, stop) -> dict:
    """Run the planned cells one after another; then wait for those running elsewhere."""
    from fedinit_jax.experiment import workdir as workdir_lib

    outcome = {}
    for i, plan in plans.items():
        stop_if(stop, f"before {grid[i][0]}")
        outcome[i] = _run_cell(results, i, len(grid), grid[i][0], plan)
    while FLAGS.wait and any(v == "running elsewhere" for v in outcome.values()):
        stop_if(stop, "while waiting for cells running elsewhere")
        for i in [i for i, v in outcome.items() if v == "running elsewhere"]:
            if not workdir_lib.holder(os.path.join(results, grid[i][0])):  # ended: finished?
                outcome[i] = _run_cell(results, i, len(grid), grid[i][0], plans[i])
        time.sleep(POLL_SECONDS)
    return outcome


def main(argv):
    """Run the chosen cells; the exit code says whether every one finished (module doc)."""
    del argv
    logging.set_verbosity(logging.FATAL)  # orbax's logs; failures are reported per cell
    from fedinit_jax.experiment import simulation

    if not FLAGS.results:
        print("error: --results is required", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)
    check_xla_flags()
    try:
        grid = cells_of_flags()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)
    if FLAGS.unfinished and not FLAGS.list:
        print("error: --unfinished goes with --list", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)
    if FLAGS.list:
        states = [cell_state(FLAGS.results, name, config) for name, config in grid]
        if FLAGS.unfinished:
            todo = [i for i, (state, _) in enumerate(states)
                    if state in ("not started", "unfinished", "failed")]
            if todo:
                print(array_spec(todo))
            else:  # stdout stays empty: the recipe's `[ -n "$TODO" ]` submits nothing
                print("nothing left to run: every cell is done, diverged or running "
                      "elsewhere (--list says which)", file=sys.stderr)
        else:
            for i, ((name, _), state) in enumerate(zip(grid, states)):
                print(f"{i}\t{name}\t{describe_state(*state)}")
        sys.exit(_exit_code(state for state, _ in states))
    os.makedirs(FLAGS.results, exist_ok=True)
    stop = []  # a signal between cells (inside a cell, simulation.run's StopRequest holds
    #            it and hands it to remember when the cell ends, however it ended)

    def remember(number, _frame):
        stop.append(number)
    remember.stops_between_runs = True
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, remember)
    chosen = [FLAGS.cell] if FLAGS.cell is not None else list(range(len(grid)))
    workers = FLAGS.workers > 1 and len(chosen) > 1  # else the cells run here: plan them
    try:
        plans = None if workers else plan_cells(FLAGS.results, grid, chosen)
    except ValueError as err:
        for line in str(err).splitlines():
            print(f"error: {line}", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)
    try:
        if workers:  # each worker plans its cells on its own devices
            outcome = with_workers(grid, chosen, stop)
        else:
            outcome = _in_process(FLAGS.results, grid, plans, stop)
    except simulation.Stopped as err:  # a signal inside a cell: it checkpointed
        print(f"stopped: {err}", file=sys.stderr)
        sys.exit(exit_codes.REQUEUE)
    if FLAGS.summary:
        print_table(FLAGS.results, grid, chosen)
    sys.exit(_exit_code(outcome.values()))


def _exit_code(states) -> int:
    """The sweep's exit code for its cells' states or outcomes: the first of EXIT_ORDER
    that any of them is, else 0 (every cell done)."""
    states = set(states)
    return next((code for state, code in EXIT_ORDER if state in states), exit_codes.DONE)


def array_spec(indices) -> str:
    """Sorted indices as a job array spec: [0, 1, 2, 5, 7, 8] -> '0-2,5,7-8'."""
    parts, run = [], []
    for i in sorted(indices):
        if run and i != run[-1] + 1:
            parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = []
        run.append(i)
    if run:
        parts.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(parts)


def print_table(results, grid, chosen) -> None:
    """The sweep's last lines: each chosen cell's state, final test accuracy, rounds and
    training time (from its files), and the count of finished cells."""
    from fedinit_jax.experiment import workdir as workdir_lib

    lines = [("cell", "state", "test_accuracy", "rounds", "time", "name")]
    finished = 0
    for i in chosen:
        name, config = grid[i]
        state, _ = cell_state(results, name, config)
        finished += state == "done"
        try:
            rows = workdir_lib.read_metrics(os.path.join(results, name))
        except (ValueError, OSError):
            rows = []
        evaluated = [r for r in rows if "test_accuracy" in r]
        seconds = sum(r.get("train_seconds", 0) + r.get("eval_seconds", 0) for r in rows)
        lines.append((str(i), state,
                      f"{evaluated[-1]['test_accuracy']:.4f}" if evaluated else "-",
                      f"{rows[-1]['round'] if rows else 0}/{config['rounds']}",
                      f"{seconds:.1f}s", name))
    widths = [max(len(row[k]) for row in lines) for k in range(5)]
    for row in lines:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths)) + "  " + row[5])
    print(f"{finished}/{len(chosen)} cells done in {results}")


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
