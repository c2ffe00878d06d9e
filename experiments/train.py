"""Train one federated experiment from a config file; rerun the same command to resume.

    python -m experiments.train --config experiments/configs/default.py --workdir /tmp/run \
        --config.algorithm=scaffold --config.beta=0.1

Bad flags or config values print one line naming the field and exit with code 2; a divergence
exits with 3, a failed write with 4, a missing or dead peer process of a multi-process run
with 5 (experiments/supervise.py), SIGTERM / SIGINT with 75 after a checkpoint (rerun to
continue): experiments/exit_codes.py lists them all. Every line also goes to
<workdir>/train.log; the last one is the run's summary.
"""
from experiments import loading_signals  # noqa: F401, I001 (first: a signal while loading)

import os
import signal
import sys

from experiments.cli import check_xla_flags, use_all_cpu_cores

use_all_cpu_cores()  # before JAX is imported: one XLA CPU device per core

from absl import app, flags, logging  # noqa: E402

from experiments import exit_codes, supervise  # noqa: E402
from experiments.cli import define_config, one_line, parse_flags, refuse_epochs_beside_steps  # noqa: E402

define_config("experiments/configs/default.py", "Experiment config file (ml_collections).")
flags.DEFINE_string("workdir", None, "Output directory: metrics, checkpoints, config.")
flags.DEFINE_bool("distributed", False, "Multi-process run: jax.distributed.initialize() from "
                  "the environment (TPU pod slice, SLURM, Open MPI); see fedinit_jax/experiment/distributed.py.")
flags.DEFINE_string("coordinator_address", None, "Multi-process by hand: host:port of process 0.")
flags.DEFINE_integer("num_processes", None, "Multi-process by hand: number of processes.")
flags.DEFINE_integer("process_id", None, "Multi-process by hand: this process's index.")
flags.DEFINE_integer("distributed_timeout", 180, "Multi-process: seconds to wait for every "
                     "process to join, and for a silent one (dead, preempted) before every "
                     "process stops with exit code 5 (experiments/supervise.py).")
FLAGS = flags.FLAGS
MAX_TIMEOUT = 86400  # a day; JAX's runtime overflows past 2^31 ms


def _drop_closed_loop_noise(unraisable):
    """After a failed checkpoint write, tensorstore's callbacks may still reach orbax's closed
    asyncio loop and print "Event loop is closed" tracebacks, and after an unreadable
    checkpoint orbax's abandoned read coroutines print their errors when collected; the
    failure itself is reported in one line. Everything else goes to Python's default hook."""
    code = getattr(unraisable.object, "cr_code", None)
    orbax_read = code is not None and "orbax" in code.co_filename
    closed_loop = (isinstance(unraisable.exc_value, RuntimeError)
                   and "Event loop is closed" in str(unraisable.exc_value))
    if not (orbax_read or closed_loop):
        sys.__unraisablehook__(unraisable)


def main(argv):
    del argv
    sys.unraisablehook = _drop_closed_loop_noise
    # orbax logs every checkpoint step at INFO, and a failed write at ERROR with tracebacks;
    # the binary reports every failure itself, in one line
    logging.set_verbosity(logging.FATAL)
    if not FLAGS.workdir:
        print("error: --workdir is required", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)
    refuse_epochs_beside_steps(sys.argv, FLAGS.config)
    check_xla_flags()
    config = FLAGS.config.to_dict()
    by_hand = (FLAGS.coordinator_address, FLAGS.num_processes, FLAGS.process_id)
    multi_process = FLAGS.distributed or any(v is not None for v in by_hand)
    if multi_process and not supervise.is_child():
        if not 1 <= FLAGS.distributed_timeout <= MAX_TIMEOUT:
            print(f"error: --distributed_timeout={FLAGS.distributed_timeout}: must be in "
                  f"[1, {MAX_TIMEOUT}] (seconds)", file=sys.stderr)
            sys.exit(exit_codes.BAD_INPUT)
        sys.exit(supervise.run_child(FLAGS.distributed_timeout,
                                     FLAGS.num_processes or "all"))
    # after flag parsing and in the trainer only: neither a bad flag nor a multi-process run's
    # supervisor pays for JAX's import
    from fedinit_jax import experiment
    from fedinit_jax.experiment import distributed as distributed_lib
    from fedinit_jax.experiment import simulation

    try:
        if multi_process:
            distributed_lib.initialize(*by_hand, timeout=FLAGS.distributed_timeout)
        # its last line is the run's summary
        simulation.run(experiment.plan(config), FLAGS.workdir)
        for sig in (signal.SIGTERM, signal.SIGINT):  # finished: a late signal changes nothing
            signal.signal(sig, signal.SIG_IGN)
    except (ValueError, OSError) as err:  # bad config or workdir, missing or damaged data
        print(f"error: {one_line(err)}", file=sys.stderr)
        sys.exit(exit_codes.BAD_INPUT)
    except simulation.NonFiniteError as err:
        print(f"error: diverged: {err}", file=sys.stderr)
        sys.exit(exit_codes.DIVERGED)
    except simulation.WriteError as err:
        print(f"error: {err}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(exit_codes.WRITE_FAILED)  # now: a checkpoint writer may still be failing
    except distributed_lib.PeerLost as err:
        print(f"error: distributed: {err}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(exit_codes.PEER_LOST)  # now: collectives with the lost peer may never return
    except simulation.Stopped as err:
        print(str(err), file=sys.stderr)
        sys.exit(exit_codes.REQUEUE)


if __name__ == "__main__":
    app.run(main, flags_parser=parse_flags)
