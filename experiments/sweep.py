"""Run a grid of experiments into one results folder, resumable cell by cell.

    python -m experiments.sweep --config experiments/configs/default.py --results /tmp/grid \
        --algorithms=fedavg,fedinit --seeds=0,1,2 --betas=0,0.1 --dirichlet_alphas=0.1,0.6

The grid is algorithms x Dirichlet alphas x betas x local epochs x delta_from x seeds on top of
the config (which --config.FIELD overrides change for every cell). Each cell is a workdir
<results>/<algorithm>-dir<alpha>-beta<beta>-E<epochs>-<delta_from>-s<seed> (Shakespeare: -roles-
instead of -dir<alpha>-, its partition is natural); a finished cell of
the same config is skipped, an unfinished one resumes from its last checkpoint, a diverged one
is reported and the sweep goes on; a cell whose workdir holds another config (or is in use,
or damaged) is reported as an error, one line, and the sweep goes on. <results>/sweep_status.json
says what each cell is, rewritten after every cell. Empty --betas keeps each algorithm's
default beta.
"""
import os
import signal
import sys

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
FLAGS = flags.FLAGS


def _parse(values, kind, field):
    try:
        return [kind(v) for v in values]
    except ValueError:
        raise ValueError(f"--{field}={','.join(values)}: every entry must be a "
                         f"{kind.__name__}") from None


def cells(base: dict):
    """(name, config) for every cell of the grid."""
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
                            split = ("roles" if base["dataset"] == "shakespeare"
                                     else f"dir{alpha:g}")  # the natural partition
                            name = (f"{algorithm}-{split}-beta"
                                    f"{'default' if beta is None else format(beta, 'g')}"
                                    f"-E{e}-{delta}-s{seed}")
                            yield name, config


def main(argv):
    """Run every cell; exit 0 when each is done or diverged, 1 when a cell failed (each
    failure is one line naming the cell), 128 + signal when stopped by SIGTERM / SIGINT."""
    del argv
    logging.set_verbosity(logging.FATAL)  # orbax's logs; failures are reported per cell
    from fedinit_jax import experiment, simulation
    from fedinit_jax import workdir as workdir_lib

    if not FLAGS.results:
        print("error: --results is required", file=sys.stderr)
        sys.exit(2)
    try:
        grid = list(cells(FLAGS.config.to_dict()))
        for _, config in grid:  # every cell is checked before the first one runs
            experiment.validate(config)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    os.makedirs(FLAGS.results, exist_ok=True)
    status_path = os.path.join(FLAGS.results, "sweep_status.json")
    status = {}

    def record(name, state):
        status[name] = state
        workdir_lib.write_json(status_path, status)  # after every cell: a kill loses none

    stop = []  # a signal between cells (inside a cell, simulation.run handles it)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: stop.append(number))
    for i, (name, config) in enumerate(grid):
        if stop:
            print(f"stopped by {signal.Signals(stop[0]).name} before {name}", file=sys.stderr)
            sys.exit(128 + stop[0])
        workdir = os.path.join(FLAGS.results, name)
        try:
            if simulation.rounds_done(workdir, config) >= config["rounds"]:
                record(name, "done")
                continue
            print(f"[{i + 1}/{len(grid)}] {name}", flush=True)
            simulation.run(config, workdir, progress=False, log=lambda line: None)
            record(name, "done")
        except simulation.NonFiniteError as err:
            record(name, f"diverged: {err}")
            print(f"  diverged: {err}", flush=True)
        except simulation.Stopped as err:
            record(name, f"stopped after round {err.rounds_done}; rerun the sweep to resume")
            print(f"stopped: {err}", file=sys.stderr)
            sys.exit(128 + err.signum)
        except (ValueError, OSError, simulation.WriteError) as err:
            record(name, f"error: {one_line(err)}")
            print(f"  error: {name}: {one_line(err)}", file=sys.stderr, flush=True)
    done = sum(v == "done" for v in status.values())
    print(f"{done}/{len(grid)} cells done in {FLAGS.results}")
    sys.exit(1 if any(v.startswith("error") for v in status.values()) else 0)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
