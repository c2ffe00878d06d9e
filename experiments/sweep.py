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
config.json records it; a folder named `betadefault` by earlier versions is still that cell's
workdir).

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

import datetime
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time

from experiments import exit_codes
from experiments.cli import define_config, one_line, parse_flags, use_all_cpu_cores

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


def _parse(values, kind, field):
    try:
        return [kind(v) for v in values]
    except ValueError:
        raise ValueError(f"--{field}={','.join(values)}: every entry must be a "
                         f"{kind.__name__}") from None


# the grid's own axes: a --grid over one of them is refused, naming its flag
SHORTHANDS = {"algorithm": "--algorithms", "dirichlet_alpha": "--dirichlet_alphas",
              "beta": "--betas", "local_epochs": "--local_epochs",
              "delta_from": "--delta_from", "seed": "--seeds"}


def _value(text: str, like, field):
    """`text` read as the type of the config's value `like` (bool, int, float, str; None:
    a number if it reads as one, else the text)."""
    if isinstance(like, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"--grid {field}={text}: config.{field} is a bool: true or false")
        return text.lower() == "true"
    for kind in ((int,) if isinstance(like, int) else (float,) if isinstance(like, float)
                 else () if isinstance(like, str) else (int, float)):
        try:
            return kind(text)
        except ValueError:
            if like is not None:
                raise ValueError(f"--grid {field}={text}: config.{field} is a "
                                 f"{kind.__name__}") from None
    return text


def grid_axes(base: dict) -> list:
    """[(field, [values])] of the --grid flags, in their order; ValueError naming the flag
    for an unknown field, one of the grid's own axes, an empty or repeated one."""
    axes = []
    for entry in FLAGS.grid:
        field, _, values = entry.partition("=")
        if field in SHORTHANDS:
            raise ValueError(f"--grid {entry}: {field} is an axis of its own: use "
                             f"{SHORTHANDS[field]}")
        if field not in base:
            raise ValueError(f"--grid {entry}: config has no field {field!r} (every field: "
                             "experiments/configs/default.py)")
        if not values or field in dict(axes):
            raise ValueError(f"--grid {entry}: give FIELD=v1,v2,... once per field")
        axes.append((field, [_value(v, base[field], field) for v in values.split(",")]))
    return axes


def cells(base: dict):
    """(name, config) for every cell of the grid, each config resolved and validated
    (experiment.checked: no devices asked; a cell's run plans it where it runs)."""
    import itertools

    from fedinit_jax import experiment
    from fedinit_jax.experiment import tasks

    natural = tasks.family(base["dataset"]).natural_split
    alphas = _parse(FLAGS.dirichlet_alphas, float, "dirichlet_alphas") or [base["dirichlet_alpha"]]
    betas = _parse(FLAGS.betas, float, "betas") or [base["beta"]]
    epochs = _parse(FLAGS.local_epochs, int, "local_epochs") or [base["local_epochs"]]
    deltas = FLAGS.delta_from or [base["delta_from"]]
    axes = grid_axes(base)
    seeds = _parse(FLAGS.seeds, int, "seeds")
    for algorithm, alpha, beta, e, delta, *extra, seed in itertools.product(
            FLAGS.algorithms, alphas, betas, epochs, deltas, *(v for _, v in axes), seeds):
        chosen = dict(zip((f for f, _ in axes), extra))
        config = experiment.checked({
            **base, **chosen, "algorithm": algorithm, "dirichlet_alpha": alpha, "beta": beta,
            "local_epochs": e, "delta_from": delta, "seed": seed})
        yield _cell_name(config, natural, beta is None, chosen), config


def _cell_name(config, natural, default_beta, chosen=None) -> str:
    """<algorithm>-<split>-beta<beta>-E<epochs>-<delta_from>-s<seed> with the resolved beta;
    a default beta's folder named `betadefault` by earlier versions keeps its cell."""
    split = natural or f"dir{config['dirichlet_alpha']:g}"  # the data's own, or alpha

    extra = "".join(f"-{field}{value:g}" if isinstance(value, float) else f"-{field}{value}"
                    for field, value in (chosen or {}).items())

    def name(beta):
        return (f"{config['algorithm']}-{split}-beta{beta}-E{config['local_epochs']}-"
                f"{config['delta_from']}{extra}-s{config['seed']}")

    resolved = name("default" if config["beta"] is None else format(config["beta"], "g"))
    legacy = name("default")
    if (default_beta and FLAGS.results
            and not os.path.isdir(os.path.join(FLAGS.results, resolved))
            and os.path.isdir(os.path.join(FLAGS.results, legacy))):
        return legacy
    return resolved


def _grid():
    """Every (name, config) of the grid, each validated; ValueError for an empty grid."""
    empty = [f"--{f}" for f in ("algorithms", "seeds") if not getattr(FLAGS, f)]
    if empty:
        raise ValueError(f"{' and '.join(empty)} is empty: the grid has no cell")
    base = FLAGS.config.to_dict()
    if base["local_steps"] and len(FLAGS.local_epochs) > 1:
        raise ValueError(f"--local_epochs={','.join(FLAGS.local_epochs)} with "
                         f"--config.local_steps={base['local_steps']}: K > 0 local steps "
                         "replace the local epochs, so these cells would be one run; drop one")
    grid = list(cells(base))  # every cell is checked before the first one runs
    names = [name for name, _ in grid]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"cells share a workdir name: {', '.join(twice)} (values that print "
                         "alike, e.g. --betas=0.1,0.1000001, or --dirichlet_alphas over a "
                         "dataset whose split is its own); give each cell distinct values")
    seen = {}
    for name, config in grid:
        other = seen.setdefault(_fingerprint(config), name)
        if other != name:
            raise ValueError(f"cells {other} and {name} are one run (the same resolved "
                             "config, e.g. an algorithm's default beta also given in --betas)"
                             "; drop one")
    if FLAGS.cell is not None and not 0 <= FLAGS.cell < len(grid):
        raise ValueError(f"--cell={FLAGS.cell}: the grid has cells 0..{len(grid) - 1} "
                         "(see --list)")
    if FLAGS.workers < 1:
        raise ValueError(f"--workers={FLAGS.workers}: must be >= 1")
    return grid


def _fingerprint(config: dict) -> str:
    """A short digest of a cell's resolved config: a status file speaks for it only."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]


def _status_path(results, name):
    return os.path.join(results, "sweep_status", f"{name}.json")


def _recorded(results, name, config):
    """The status file of the cell, when it was written for this config (else {})."""
    try:
        with open(_status_path(results, name)) as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return {}
    return recorded if recorded.get("config") == _fingerprint(config) else {}


def cell_state(results: str, name: str, config: dict) -> tuple[str, str]:
    """(state, detail) of a cell from its files, its lock and its status file: state one of
    'done', 'diverged', 'failed', 'unfinished', 'not started', 'running elsewhere'."""
    from fedinit_jax.experiment import simulation
    from fedinit_jax.experiment import workdir as workdir_lib

    workdir = os.path.join(results, name)
    holder = workdir_lib.holder(workdir)
    if holder:
        return "running elsewhere", holder
    try:
        done = simulation.finished_rounds(workdir, config)
    except (ValueError, OSError) as err:
        return "failed", one_line(err)
    if done >= config["rounds"]:
        return "done", ""
    recorded = _recorded(results, name, config)
    if recorded.get("state") in ("diverged", "failed"):
        return recorded["state"], recorded.get("detail", "")
    if done:
        return "unfinished", f"{done}/{config['rounds']} rounds"
    return "not started", ""


def _describe_state(state, detail):
    return f"{state} ({detail})" if detail else state


def _record(results, name, config, state, detail=""):
    from fedinit_jax.experiment import workdir as workdir_lib

    os.makedirs(os.path.join(results, "sweep_status"), exist_ok=True)
    workdir_lib.write_json(_status_path(results, name), {
        "state": state, "detail": detail, "config": _fingerprint(config),
        "by": f"process {os.getpid()} on {socket.gethostname()}",
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})


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
            _record(results, name, config, "done")
            return "done"
        earlier = _recorded(results, name, config)
        if earlier.get("state") == "diverged" and not FLAGS.rerun_diverged:
            print(f"[{index + 1}/{total}] {name}: diverged earlier, skipped (--rerun_diverged "
                  "runs it again)", flush=True)
            return "diverged"
        print(f"[{index + 1}/{total}] {name}", flush=True)
        simulation.run(plan, workdir, progress=False, log=_cell_log(name))
        _record(results, name, config, "done")
        return "done"
    except simulation.WorkdirBusy as err:
        print(f"  running elsewhere: {name}: {one_line(err)}", flush=True)
        return "running elsewhere"
    except simulation.NonFiniteError as err:
        _record(results, name, config, "diverged", str(err))
        print(f"  diverged: {name}: {err}", flush=True)
        return "diverged"
    except simulation.Stopped as err:
        _record(results, name, config, "unfinished",
                f"stopped after round {err.rounds_done}; rerun to resume")
        raise
    except (ValueError, OSError, simulation.WriteError) as err:
        _record(results, name, config, "failed", one_line(err))
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
            _record(results, name, config, "failed", one_line(err))
            refused.append(f"cell {name}: {one_line(err)}")
    if refused:
        raise ValueError("\n".join(refused))
    return plans


def _in_process(results, grid, plans, stop) -> dict:
    """Run the planned cells one after another; then wait for those running elsewhere."""
    from fedinit_jax.experiment import workdir as workdir_lib

    outcome = {}
    for i, plan in plans.items():
        _stop_if(stop, f"before {grid[i][0]}")
        outcome[i] = _run_cell(results, i, len(grid), grid[i][0], plan)
    while FLAGS.wait and any(v == "running elsewhere" for v in outcome.values()):
        _stop_if(stop, "while waiting for cells running elsewhere")
        for i in [i for i, v in outcome.items() if v == "running elsewhere"]:
            if not workdir_lib.holder(os.path.join(results, grid[i][0])):  # ended: finished?
                outcome[i] = _run_cell(results, i, len(grid), grid[i][0], plans[i])
        time.sleep(POLL_SECONDS)
    return outcome


def _stop_if(stop, where):
    if stop:
        print(f"stopped by {signal.Signals(stop[0]).name} {where}; rerun the same command "
              "to continue", file=sys.stderr)
        sys.exit(exit_codes.REQUEUE)


def _gpu_count() -> int:
    """GPUs this host shows (CUDA_VISIBLE_DEVICES when set, else nvidia-smi), without
    starting JAX in the parent (which would take memory on every GPU)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True,
                                timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listed.splitlines())


def _worker_env(slot: int, workers: int, gpus: int):
    """(environment, CPU set) of worker `slot`: one of the host's `gpus` GPUs each, or (no
    GPU) a share of the cores."""
    env = dict(os.environ)
    if gpus:
        ids = (os.environ.get("CUDA_VISIBLE_DEVICES") or ",".join(map(str, range(gpus))))
        env["CUDA_VISIBLE_DEVICES"] = ids.split(",")[slot % gpus].strip()
        return env, None
    cores = sorted(os.sched_getaffinity(0))
    share = cores[slot * len(cores) // workers:(slot + 1) * len(cores) // workers] or [
        cores[slot % len(cores)]]
    kept = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                    if not f.startswith("--xla_force_host_platform_device_count"))
    env["XLA_FLAGS"] = f"{kept} --xla_force_host_platform_device_count={len(share)}".strip()
    return env, share


def _child_argv(index):
    """This command line for one cell: --workers, --cell and --list dropped, --cell=index."""
    argv, skip = [], False
    for arg in sys.argv[1:]:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0].lstrip("-")
        if name in ("workers", "cell", "list", "nolist"):
            skip = "=" not in arg and name in ("workers", "cell")
            continue
        argv.append(arg)
    return [sys.executable, "-m", "experiments.sweep", *argv, f"--cell={index}", "--nosummary",
            "--prefix_lines"]


def _with_workers(grid, chosen, stop) -> dict:
    """Run the chosen cells in FLAGS.workers processes at once (each `--cell=I`)."""
    pending, running, outcome = list(chosen), {}, {}
    codes = {exit_codes.DONE: "done", exit_codes.DIVERGED: "diverged",
             exit_codes.ELSEWHERE: "running elsewhere", exit_codes.REQUEUE: "stopped"}
    gpus = _gpu_count()  # once: nvidia-smi is a process of its own
    forwarded = False
    try:
        while pending or running:
            if stop and not forwarded:  # every running cell checkpoints and ends now
                forwarded = True
                for _, proc in running.values():
                    if proc.poll() is None:
                        proc.send_signal(stop[0])
            while pending and len(running) < FLAGS.workers and not stop:
                slot = min(set(range(FLAGS.workers)) - {s for s, _ in running.values()})
                env, cores = _worker_env(slot, FLAGS.workers, gpus)
                i = pending.pop(0)
                proc = subprocess.Popen(
                    _child_argv(i), env=env,
                    preexec_fn=(lambda c=cores: os.sched_setaffinity(0, c)) if cores else None)
                running[i] = (slot, proc)
            for i, (_, proc) in list(running.items()):
                if proc.poll() is not None:
                    outcome[i] = codes.get(proc.returncode, "failed")
                    if proc.returncode > 128:
                        outcome[i] = "stopped"
                    del running[i]
            if stop and not running:
                _stop_if(stop, f"with {len(pending)} cells not started")
            time.sleep(0.2)
    finally:
        for _, proc in running.values():  # a stop: every worker checkpoints and ends
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in running.values():
            proc.wait()
    return outcome


def main(argv):
    """Run the chosen cells; the exit code says whether every one finished (module doc)."""
    del argv
    logging.set_verbosity(logging.FATAL)  # orbax's logs; failures are reported per cell
    from fedinit_jax.experiment import simulation

    if not FLAGS.results:
        print("error: --results is required", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)
    try:
        grid = _grid()
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
                print(f"{i}\t{name}\t{_describe_state(*state)}")
        sys.exit(_exit_code(state for state, _ in states))
    os.makedirs(FLAGS.results, exist_ok=True)
    stop = []  # a signal between cells (inside a cell, simulation.run handles it)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: stop.append(number))
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
            outcome = _with_workers(grid, chosen, stop)
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
