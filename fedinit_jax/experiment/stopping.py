"""How a run stops: a signal at a round boundary (StopRequest, Stopped), divergence
(NonFiniteError, runaway), and the words the summary line gives the ending.

SIGTERM / SIGINT are remembered, not obeyed mid-round: the loop stops at the next round
boundary after a checkpoint; a stop that takes longer than stop_grace_seconds(), or a second
signal, exits at once keeping the last checkpoint.
"""
import math
import os
import signal
import statistics
import sys
import threading

from fedinit_jax.experiment import distributed
from fedinit_jax.experiment.workdir import WriteError

__all__ = ["REQUEUE_EXIT", "RUNAWAY_FACTOR", "RUNAWAY_ROUNDS", "RUNAWAY_WINDOW",
           "RUNAWAY_FLOOR", "NonFiniteError", "Stopped",
           "GRACE_VARIABLE", "MAX_GRACE_SECONDS", "stop_grace_seconds", "StopRequest", "runaway",
           "ending"]

REQUEUE_EXIT = os.EX_TEMPFAIL  # 75: stopped, rerun to continue (experiments/exit_codes.py)

# A run whose train loss stays above RUNAWAY_FACTOR times its baseline (the lowest median of
# RUNAWAY_WINDOW consecutive rounds before) and above RUNAWAY_FLOOR times its first round's
# train loss for RUNAWAY_ROUNDS rounds in a row has diverged as surely as one that reached NaN
# (Algorithm 1's `global` aggregation with returning clients: train loss 0.92 -> 906 in 100
# rounds). The window's median ignores the rounds whose cohort fits well by luck (one-class
# clients), the floor the spikes of a run whose local steps overshoot while its model holds
# (digits, 5 % participation, 10 local epochs at lr 0.3: up to 6.5x its first loss in rounds
# 40-150 at 74 % test accuracy; its loss then climbs to 1.6e4 and the rule ends it at 183);
# calibrated on every committed run (benchmarks/runaway_calibration.py, RESULTS.md).
RUNAWAY_FACTOR = 30.0
RUNAWAY_FLOOR = 20.0
RUNAWAY_ROUNDS = 5
RUNAWAY_WINDOW = 10

class NonFiniteError(RuntimeError):
    """The run diverged: a round produced a non-finite loss or parameters, or its train loss
    ran away (runaway())."""


class Stopped(RuntimeError):
    """SIGTERM / SIGINT arrived; the run stopped at a round boundary after a checkpoint."""

    def __init__(self, signum, rounds_done):
        self.signum, self.rounds_done = signum, rounds_done
        super().__init__(f"stopped by {signal.Signals(signum).name} after round {rounds_done}; "
                         "checkpoint saved, rerun the same command to resume")


GRACE_VARIABLE = "FEDINIT_STOP_GRACE_SECONDS"
MAX_GRACE_SECONDS = 86400.0


def stop_grace_seconds() -> float:
    """After SIGTERM/SIGINT, how long the round in progress may take before the process exits
    without a new checkpoint: $FEDINIT_STOP_GRACE_SECONDS, default 20 s; ValueError naming
    the variable unless it is a number in (0, 86400]."""
    text = os.environ.get(GRACE_VARIABLE)
    if text is None:
        return 20.0
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_GRACE_SECONDS:  # nan fails too
        raise ValueError(f"{GRACE_VARIABLE}={text!r}: must be a number of seconds in "
                         f"(0, {MAX_GRACE_SECONDS:g}] (unset: 20)")
    return value


class StopRequest:
    """Remembers SIGTERM/SIGINT instead of dying mid-round, so the run stops at the next round
    boundary with a checkpoint; restores the old handlers. A signal that came after the last
    round ends no run; it (any signal it held) is handed to the old handler if that handler
    has `stops_between_runs` set (a sweep's: it stops before its next cell, also after a cell
    that diverged or failed).

    A stop never waits long: when the run has not stopped stop_grace_seconds() after the signal
    (a long round, a stuck host loop) the process exits at once with REQUEUE_EXIT, and at a
    second signal with 128 + signal, one line on stderr, keeping the last checkpoint (a
    batch scheduler's grace period before SIGKILL is typically 30 s)."""

    def __init__(self):
        self.grace = stop_grace_seconds()
        self.signum = None
        self.last_checkpoint = None  # the loop's newest checkpoint, for the forced exit's line
        self.on_force = None  # called with the ending's words before a forced exit (summary)
        self._old = {}
        self._timer = None

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum, _frame):
        if self.signum is not None:  # a second signal: now
            self._force(signum, "a second signal", 128 + signum)
        self.signum = signum
        self._timer = threading.Timer(self.grace, self._force,
                                      (signum, f"no round boundary within {self.grace:g} s",
                                       REQUEUE_EXIT))
        self._timer.daemon = True
        self._timer.start()

    def _force(self, signum, why, code):
        kept = (f"the checkpoint after round {self.last_checkpoint} is kept, rerun the same "
                "command to resume" if self.last_checkpoint else
                "no checkpoint was taken yet, rerunning the same command starts over")
        ending = f"stopped by {signal.Signals(signum).name} ({why}): exiting without a new " \
                 f"checkpoint; {kept}"
        if self.on_force is not None:
            try:  # train.log's summary line, promised whatever ends a run
                self.on_force(ending)
            except Exception:  # noqa: BLE001 - exiting now matters more than the line
                pass
        sys.stderr.write(ending + "\n")
        sys.stderr.flush()
        os._exit(code)

    def __exit__(self, *exc):
        if self._timer is not None:
            self._timer.cancel()
        for sig, handler in self._old.items():
            signal.signal(sig, handler)
        old = self._old.get(self.signum)
        if getattr(old, "stops_between_runs", False):  # however the run ended (done after
            old(self.signum, None)  # its last round, diverged, failed): a sweep's stop


def runaway(rows) -> str | None:
    """Why the run whose metrics rows are `rows` has diverged by its train loss, or None.

    With L_t the train loss of round t, n = len(rows), K = RUNAWAY_ROUNDS, W = RUNAWAY_WINDOW:
    the baseline b = min over windows before the last K rounds of median(L_{i-W+1..i}); the
    run diverged when each of L_{n-K+1..n} exceeds max(RUNAWAY_FACTOR * b, RUNAWAY_FLOOR * L_1).
    """
    losses = [row["train_loss"] for row in rows]
    n, k, w = len(losses), RUNAWAY_ROUNDS, RUNAWAY_WINDOW
    if n < w + k or min(losses[n - k:]) <= RUNAWAY_FLOOR * losses[0]:  # O(K) before O(n W)
        return None
    baseline = min(statistics.median(losses[i - w:i]) for i in range(w, n - k + 1))
    threshold = max(RUNAWAY_FACTOR * baseline, RUNAWAY_FLOOR * losses[0])
    if not all(loss > threshold for loss in losses[n - k:]):
        return None
    return (f"round {rows[-1]['round']}: train loss {losses[-1]:.4g} has stayed above "
            f"{threshold:.4g} for {k} rounds ({RUNAWAY_FACTOR:g}x the lowest median of {w} "
            f"rounds, {baseline:.4g}, and {RUNAWAY_FLOOR:g}x round {rows[0]['round']}'s "
            f"{losses[0]:.4g}): the run diverged")


def ending(err: BaseException) -> str:
    """How a run that raised `err` ended, in a few words (the summary line's)."""
    if isinstance(err, Stopped):
        return (f"stopped by {signal.Signals(err.signum).name} after round {err.rounds_done}, "
                "checkpoint saved (rerun the same command to continue)")
    if isinstance(err, NonFiniteError):
        return "diverged"
    text = " ".join(str(err).split())[:300]
    if isinstance(err, WriteError):
        return f"a write failed: {text}"
    if isinstance(err, distributed.PeerLost):  # its cause in train.log too, not only stderr
        return f"a peer process was lost: {text}"
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        return type(err).__name__
    return f"error: {text}"
