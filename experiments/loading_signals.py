"""SIGTERM / SIGINT while no round runs (loading, after the end): one line and exit 75
(exit_codes.REQUEUE: rerun to continue), at once.

Imported first by the binaries, before absl, JAX or a config is loaded: a signal that arrives
while they load (Ctrl-C in the first second) would otherwise be a KeyboardInterrupt that
JAX's garbage-collection callback swallows ("Exception ignored in _xla_gc_callback"), or a
long traceback. Nothing has been written yet, so there is nothing to save; once the run
starts, simulation.run's own handler takes over (stop at the next round boundary, after a
checkpoint), and restores this one when it ends.
"""
import os
import signal
import sys

from experiments import exit_codes


def _exit_now(signum, _frame):
    sys.stderr.write(f"stopped by {signal.Signals(signum).name} while no round was running: "
                     "nothing to save; rerun the same command to continue\n")
    sys.stderr.flush()
    os._exit(exit_codes.REQUEUE)


def install() -> None:
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _exit_now)


install()
