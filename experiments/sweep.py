"""Run a grid of experiments into one results folder, resumable cell by cell, as one job, a
job array, or several workers.

    python -m experiments.sweep --config experiments/configs/default.py --results /tmp/grid \
        --algorithms=fedavg,fedinit --seeds=0,1,2 --betas=0,0.1 --dirichlet_alphas=0.1,0.6
    python -m experiments.sweep ... --list                          # index, name, state per cell
    python -m experiments.sweep ... --cell=$SLURM_ARRAY_TASK_ID     # exactly one cell
    python -m experiments.sweep ... --workers=8                     # 8 cells at once

The grid is algorithms x Dirichlet alphas x betas x local epochs x delta_from x seeds on top of
the config (which --config.FIELD overrides change for every cell), in that order; a cell's
index is its place in it. Each cell is a workdir
<results>/<algorithm>-dir<alpha>-beta<beta>-E<epochs>-<delta_from>-s<seed> (Shakespeare: -roles-
instead of -dir<alpha>-, its partition is natural). A finished cell (the binary's rule:
simulation.finished_rounds) is skipped, an unfinished one resumes from its last checkpoint, a
diverged one is reported and the sweep goes on; a cell whose workdir holds another config
(or is damaged) is an error, one line, and the sweep goes on. A cell that another process
is running (its workdir's lock is held: another sweep, a job array task) is "running
elsewhere", never an error: the sweep runs the other cells first, then waits for it (--wait,
default) and takes it over if its holder ended without finishing it.

Status: <results>/sweep_status/<cell>.json, written only by the process that ran the cell or
found it finished (no file shared by several processes). --workers=P runs P cells at once,
each in its own process (`--cell=I`): on a GPU host each pinned to one GPU
(CUDA_VISIBLE_DEVICES), on CPU each with its share of the cores (its own XLA CPU devices and
CPU affinity). Exit code: 0 when every cell is finished (done or diverged), 1 when a cell
failed, 2 for bad flags, 75 when cells are still running elsewhere (--nowait), 128 + signal
when stopped by SIGTERM / SIGINT (the running cells checkpoint first).
"""
from experiments import early_stop  # noqa: F401, I001 (first: a signal while loading)

import datetime
import os
import signal
import socket
import subprocess
import sys
import time

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
flags.DEFINE_bool("list", False, "Print every cell (index, name, state) and exit.")
flags.DEFINE_integer("cell", None, "Run only the cell of this index (0-based, see --list).")
flags.DEFINE_integer("workers", 1, "Cells run at once, each in its own process.")
flags.DEFINE_bool("wait", True, "After the other cells, wait for cells running elsewhere "
                  "(and take over those whose holder ended unfinished).")
flags.DEFINE_bool("summary", True, "Print the closing 'N/M cells finished' line (--workers' "
                  "children do not).")
FLAGS = flags.FLAGS
ELSEWHERE_EXIT = 75  # EX_TEMPFAIL: cells still running elsewhere (--nowait)
POLL_SECONDS = 2.0


def _parse(values, kind, field):
    try:
        return [kind(v) for v in values]
    except ValueError:
        raise ValueError(f"--{field}={','.join(values)}: every entry must be a "
                         f"{kind.__name__}") from None


def cells(base: dict):
    """(name, config) for every cell of the grid."""
    from fedinit_jax.experiment import tasks

    natural = tasks.family(base["dataset"]).natural_split
    alphas = _parse(FLAGS.dirichlet_alphas, float, "dirichlet_alphas") or [base["dirichlet_alpha"]]
    betas = _parse(FLAGS.betas, float, "betas") or [base["beta"]]
    epochs = _parse(FLAGS.local_epochs, int, "local_epochs") or [base["local_epochs"]]
    deltas = FLAGS.delta_from or [base["delta_from"]]
    seeds = _parse(FLAGS.seeds, int, "seeds")
    for algorithm in FLAGS.algorithms:
        for alpha in alphas:
            for beta in betas:
                for e in epochs:
                    for delta in deltas:
                        for seed in seeds:
                            config = {**base, "algorithm": algorithm, "dirichlet_alpha": alpha,
                                      "beta": beta, "local_epochs": e, "delta_from": delta,
                                      "seed": seed}
                            split = natural or f"dir{alpha:g}"  # the data's own, or alpha
                            name = (f"{algorithm}-{split}-beta"
                                    f"{'default' if beta is None else format(beta, 'g')}"
                                    f"-E{e}-{delta}-s{seed}")
                            yield name, config


def _grid():
    """Every (name, config) of the grid, each validated; ValueError for an empty grid."""
    from fedinit_jax import experiment

    empty = [f"--{f}" for f in ("algorithms", "seeds") if not getattr(FLAGS, f)]
    if empty:
        raise ValueError(f"{' and '.join(empty)} is empty: the grid has no cell")
    base = FLAGS.config.to_dict()
    if base["local_steps"] and len(FLAGS.local_epochs) > 1:
        raise ValueError(f"--local_epochs={','.join(FLAGS.local_epochs)} with "
                         f"--config.local_steps={base['local_steps']}: K > 0 local steps "
                         "replace the local epochs, so these cells would be one run; drop one")
    grid = list(cells(base))
    for _, config in grid:  # every cell is checked before the first one runs
        experiment.validate(config)
    names = [name for name, _ in grid]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"cells share a workdir name: {', '.join(twice)} (values that print "
                         "alike, e.g. --betas=0.1,0.1000001, or --dirichlet_alphas over a "
                         "dataset whose split is its own); give each cell distinct values")
    if FLAGS.cell is not None and not 0 <= FLAGS.cell < len(grid):
        raise ValueError(f"--cell={FLAGS.cell}: the grid has cells 0..{len(grid) - 1} "
                         "(see --list)")
    if FLAGS.workers < 1:
        raise ValueError(f"--workers={FLAGS.workers}: must be >= 1")
    return grid


def cell_state(workdir: str, config: dict) -> str:
    """'done', 'running elsewhere (HOLDER)', 'unfinished (k/R rounds)', 'not started' or
    'error: ...', from the files (and the lock) alone."""
    from fedinit_jax.experiment import simulation
    from fedinit_jax.experiment import workdir as workdir_lib

    holder = workdir_lib.holder(workdir)
    if holder:
        return f"running elsewhere ({holder})"
    try:
        done = simulation.finished_rounds(workdir, config)
    except (ValueError, OSError) as err:
        return f"error: {one_line(err)}"
    if done >= config["rounds"]:
        return "done"
    return f"unfinished ({done}/{config['rounds']} rounds)" if done else "not started"


def _record(results, name, state, **extra):
    from fedinit_jax.experiment import workdir as workdir_lib

    folder = os.path.join(results, "sweep_status")
    os.makedirs(folder, exist_ok=True)
    workdir_lib.write_json(os.path.join(folder, f"{name}.json"), {
        "state": state, "by": f"process {os.getpid()} on {socket.gethostname()}",
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **extra})


def _run_cell(results, index, total, name, config) -> str:
    """Run (or skip) one cell in this process: 'done', 'diverged', 'error' or 'elsewhere'.
    simulation.Stopped propagates (the caller exits)."""
    from fedinit_jax.experiment import simulation

    workdir = os.path.join(results, name)
    try:
        if simulation.finished_rounds(workdir, config) >= config["rounds"]:
            _record(results, name, "done")
            return "done"
        print(f"[{index + 1}/{total}] {name}", flush=True)
        simulation.run(config, workdir, progress=False, log=lambda line: None)
        _record(results, name, "done")
        return "done"
    except simulation.WorkdirBusy as err:
        print(f"  running elsewhere: {name}: {one_line(err)}", flush=True)
        return "elsewhere"
    except simulation.NonFiniteError as err:
        _record(results, name, f"diverged: {err}")
        print(f"  diverged: {name}: {err}", flush=True)
        return "diverged"
    except simulation.Stopped as err:
        _record(results, name, f"stopped after round {err.rounds_done}; rerun to resume")
        raise
    except (ValueError, OSError, simulation.WriteError) as err:
        _record(results, name, f"error: {one_line(err)}")
        print(f"  error: {name}: {one_line(err)}", file=sys.stderr, flush=True)
        return "error"


def _in_process(results, grid, chosen, stop) -> dict:
    """Run the chosen cells one after another; then wait for those running elsewhere."""
    from fedinit_jax.experiment import workdir as workdir_lib

    outcome = {}
    for i in chosen:
        _stop_if(stop, f"before {grid[i][0]}")
        outcome[i] = _run_cell(results, i, len(grid), *grid[i])
    while FLAGS.wait and any(v == "elsewhere" for v in outcome.values()):
        _stop_if(stop, "while waiting for cells running elsewhere")
        for i in [i for i, v in outcome.items() if v == "elsewhere"]:
            if not workdir_lib.holder(os.path.join(results, grid[i][0])):
                outcome[i] = _run_cell(results, i, len(grid), *grid[i])  # ended: finished?
        time.sleep(POLL_SECONDS)
    return outcome


def _stop_if(stop, where):
    if stop:
        print(f"stopped by {signal.Signals(stop[0]).name} {where}", file=sys.stderr)
        sys.exit(128 + stop[0])


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
    return [sys.executable, "-m", "experiments.sweep", *argv, f"--cell={index}", "--nosummary"]


def _with_workers(grid, chosen, stop) -> dict:
    """Run the chosen cells in FLAGS.workers processes at once (each `--cell=I`)."""
    pending, running, outcome = list(chosen), {}, {}
    codes = {0: "done", 1: "error", ELSEWHERE_EXIT: "elsewhere"}
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
                    outcome[i] = codes.get(proc.returncode, "error")
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
        sys.exit(2)
    try:
        grid = _grid()
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if FLAGS.list:
        for i, (name, config) in enumerate(grid):
            print(f"{i}\t{name}\t{cell_state(os.path.join(FLAGS.results, name), config)}")
        return
    os.makedirs(FLAGS.results, exist_ok=True)
    stop = []  # a signal between cells (inside a cell, simulation.run handles it)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: stop.append(number))
    chosen = [FLAGS.cell] if FLAGS.cell is not None else list(range(len(grid)))
    try:
        if FLAGS.workers > 1 and len(chosen) > 1:
            outcome = _with_workers(grid, chosen, stop)
        else:
            outcome = _in_process(FLAGS.results, grid, chosen, stop)
    except simulation.Stopped as err:  # a signal inside a cell: it checkpointed
        print(f"stopped: {err}", file=sys.stderr)
        sys.exit(128 + err.signum)
    finished = sum(v in ("done", "diverged") for v in outcome.values())
    elsewhere = sum(v == "elsewhere" for v in outcome.values())
    if FLAGS.summary:
        print(f"{finished}/{len(chosen)} cells finished in {FLAGS.results}"
              + (f", {elsewhere} running elsewhere" if elsewhere else ""))
    if any(v in ("error", "stopped") for v in outcome.values()):
        sys.exit(1)
    sys.exit(ELSEWHERE_EXIT if elsewhere else 0)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
