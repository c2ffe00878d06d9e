"""The host loop: sample clients, build the round input, run the jit-compiled round,
evaluate, log, checkpoint; resume exactly where a killed run stopped.

Per round t (0-based), everything random is derived from (seed, t):
    client ids   np.random.default_rng([seed, 1, t])   uniform, without replacement (fixed),
                                                        or each with probability p (bernoulli)
    batch order  np.random.default_rng([seed, 2, t])   each local epoch reshuffles
    PRNG key     fold_in(key(seed), t)                  folded with each client's id, then
                                                        split per step
    local lr     eta_l * decay ** t
so a resumed run recomputes rounds after its last checkpoint bit for bit.

Outputs in the workdir (workdir.py): config.json (the resolved config), metrics.jsonl (one
JSON object per round, flushed each round; the paper's Delta^t, divergence_all, reads every
client and is taken on evaluation rounds only), TensorBoard events under tb/, checkpoints/
(orbax). One process at a time writes a workdir (a lock); a failed write ends the run with
WriteError naming the file and the last good checkpoint.
"""
import math
import os
import resource
import signal
import sys
import threading
import time

import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax import algorithms, client_store, data, experiment
from fedinit_jax.checks import check_round_input, check_state
from fedinit_jax.experiment import checkpoint as checkpoint_lib
from fedinit_jax.experiment import distributed
from fedinit_jax.experiment import workdir as workdir_lib
from fedinit_jax.experiment.checkpoint import Checkpointer
from fedinit_jax.experiment.workdir import WorkdirBusy, WorkdirError, WriteError, read_metrics  # noqa: F401 (API)
from fedinit_jax.federated_round import divergence_all, offset_reference

REQUEUE_EXIT = os.EX_TEMPFAIL  # 75: stopped, rerun to continue (experiments/exit_codes.py)
RESUMABLE_CHANGES = ("rounds",)  # fields that may differ when a run is resumed (extended)
EVALUATION_ONLY = ("eval_seconds", "divergence_all")  # besides test_*: evaluation rounds


def _no_fault(point: str, rounds_done: int) -> None:
    del point, rounds_done


# A run whose train loss stays above RUNAWAY_FACTOR times its lowest so far for
# RUNAWAY_ROUNDS rounds in a row has diverged as surely as one that reached NaN (Algorithm 1's
# `global` aggregation with returning clients: train loss 0.92 -> 906 in 100 rounds).
RUNAWAY_FACTOR = 100.0
RUNAWAY_ROUNDS = 5


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


class _StopRequest:
    """Remembers SIGTERM/SIGINT instead of dying mid-round, so the run stops at the next round
    boundary with a checkpoint; restores the old handlers.

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


def prepare_workdir(workdir: str, config: dict) -> None:
    """Refuse a workdir of another config, or one whose rounds exceed config.rounds; then
    write config.json (resolved). The caller holds the workdir's lock."""
    config = experiment.resolve(config)
    path = os.path.join(workdir, "config.json")
    done = rounds_done(workdir, config)
    if done:
        if config["rounds"] < done:
            raise WorkdirError(f"config.rounds={config['rounds']} is below the {done} rounds "
                               f"already done in {workdir!r}; a run is extended, never cut: "
                               f"use --config.rounds>={done} or a new workdir")
    workdir_lib.write_json(path, config)


def rounds_done(workdir: str, config: dict) -> int:
    """Rounds a workdir already holds for `config` (0 if it holds none). WorkdirError when it
    holds rounds of another config (any field but `rounds`) by its config.json or by the
    config its newest checkpoint records, when it holds rounds whose config is unknown (no
    config.json, no config in the checkpoint), or damaged metrics. Configs are compared
    resolved (experiment.resolve: a default written out equals the default left None)."""
    config = experiment.resolve(config)
    path = os.path.join(workdir, "config.json")
    saved = [(path, experiment.saved_config(path))] if os.path.exists(path) else []
    done = max([0] + [r["round"] for r in read_metrics(workdir)[-1:]]
               + checkpoint_lib.checkpoint_rounds(workdir))
    if not done:  # a workdir with no finished round holds no results: it takes the new
        return 0  # config (e.g. the corrected command after a run that failed in round 1)
    recorded = checkpoint_lib.saved_config(workdir)
    if recorded is not None:
        saved.append(("its newest checkpoint",
                      experiment.resolve({**experiment.ADDED_FIELDS, **recorded})))
    if not saved:
        raise WorkdirError(f"workdir={workdir!r} holds {done} rounds but no config.json, and "
                           "no checkpoint records its config: which config made them is "
                           "unknown; restore config.json, or use a new workdir")
    for source, old in saved:
        diff = sorted(k for k in set(old) | set(config)
                      if k not in RESUMABLE_CHANGES and old.get(k) != config.get(k))
        if diff:
            details = ", ".join(f"{k}: {old.get(k)!r} -> {config.get(k)!r}" for k in diff)
            raise WorkdirError(f"workdir={workdir!r} holds a run of a different config "
                               f"({details}; by {source}); use a new workdir or the same "
                               "config to resume")
    return done


def finished_rounds(workdir: str, config: dict) -> int:
    """The rounds that rerunning `config` in workdir would not recompute: all of them when
    its metrics cover config.rounds (finished, whatever its checkpoints hold: _resume), else
    its newest checkpoint's round. WorkdirError, as the binary's, when the workdir holds
    another config, damaged metrics, or a checkpoint whose rounds metrics.jsonl lacks (so a
    sweep never calls "done" a cell the binary would refuse)."""
    rounds_done(workdir, config)
    written = len(read_metrics(workdir))
    if written >= config["rounds"]:
        return written
    start = max([0] + checkpoint_lib.checkpoint_rounds(workdir))
    _rows_up_to(workdir, start)
    return start


def _rows_up_to(workdir, start):
    """Metrics rows 1..start; WorkdirError when any of them is missing (never a silent hole)."""
    rows = read_metrics(workdir, upto_round=start)
    if len(rows) < start:
        raise WorkdirError(
            f"{os.path.join(workdir, workdir_lib.METRICS)} holds rounds 1..{len(rows)} but "
            f"the checkpoint is after round {start}: rounds {len(rows) + 1}..{start} are "
            "missing; restore the file, or move checkpoints/ away to recompute every round")
    return rows


def _make_workdir(workdir: str) -> None:
    """Create the workdir and prove it is writable (ValueError naming it when not)."""
    try:
        os.makedirs(workdir, exist_ok=True)
        probe = os.path.join(workdir, f".write_test_{os.getpid()}")
        with open(probe, "w") as f:
            f.write("ok")
        os.remove(probe)
    except OSError as err:
        raise WorkdirError(f"workdir={workdir!r} is not writable: {err.strerror}") from None


@jax.jit
def _all_finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def _progress(total, initial, enabled):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="round", dynamic_ncols=True)


def run(plan, workdir: str, *, log=print, progress=None, fault=None) -> list[dict]:
    """Train (or resume) the experiment of `plan` (experiment.plan(config), or a config,
    planned here); returns all metrics rows.

    Every line goes to `log` and to <workdir>/train.log (workdir.TrainLog): first one naming
    the processes, devices, execution and client store, then one per slow step (loading,
    compiling) with its time, the rounds, and a last "summary:" line (how the run ended,
    its rounds, final metrics and time) whatever ends it.

    In a multi-process run (distributed.py) every process calls this with the same config and
    workdir; process 0 holds the workdir's lock, writes the files and logs, all take part in
    the checkpoints. fault(point, round), if given, is called at the points where the
    reliability tests break a run ("round_start", "eval", "metrics_written", "rows_saved"
    (a client store's rows of a checkpoint, before its server state), "checkpoint_saved");
    an exception it raises ends the run there.
    """
    fault = fault or _no_fault
    started = time.perf_counter()
    planned = isinstance(plan, experiment.Plan)
    config = plan.config if planned else experiment.resolve(plan)  # as config.json records
    with _StopRequest() as stop:  # from the start: a signal while loading or compiling
        distributed.agree(config, workdir)  # every process: the same run, before any work
        if not planned:
            plan = experiment.plan(config)  # validated, and what follows from it: once
        primary = distributed.is_primary()
        if primary:  # a workdir in use: refused before loading and compiling
            workdir_lib.refuse_if_busy(workdir)
        early = workdir_lib.EarlyLog(log if primary else _silent)  # train.log's first lines
        recorded = _recorded_store(workdir)  # auto resumes where the run kept its clients
        early(_start_line(plan, workdir, recorded))
        exp = experiment.build(plan, recorded, log=early)  # loads, compiles: timed lines
        lock = train_log = None
        log = _silent
        if primary:  # a bad config or data is refused above, before anything is written
            _make_workdir(workdir)
            lock = workdir_lib.Lock(workdir, early)  # before anything is read for resuming
            train_log = log = workdir_lib.TrainLog(workdir, early)
        done = {"rows": [], "start": 0}  # what the summary line reports
        ending = "error"
        if train_log is not None:
            stop.on_force = lambda words: _log_summary(log, words, done, config,
                                                       time.perf_counter() - started)
        try:
            distributed.check_shared_workdir(workdir)
            rows = _run_locked(exp, config, workdir, primary, log, progress, fault, stop, done)
            ending = "done"
            return rows
        except BaseException as err:
            ending = _ending(err)
            raise
        finally:
            if train_log is not None:
                stop.on_force = None  # the summary is written: a forced exit adds none
                _log_summary(log, ending, done, config, time.perf_counter() - started)
                train_log.close()
            if lock is not None:
                lock.release()


def _start_line(plan, workdir, recorded) -> str:
    """The run's first line: processes, devices, execution, client store, workdir."""
    config = plan.config
    backend = jax.default_backend()
    store = config["client_store"]
    if store == "auto":
        store = (f"{recorded} (as the run so far)" if recorded else
                 "auto (device if the tables and the compiled round fit: decided after "
                 "compiling)")
    return (f"fedinit_jax: {jax.process_count()} process(es), {len(jax.devices())} {backend} "
            f"device(s), the round on {plan.runtime.num_devices}; execution "
            f"{plan.runtime.execution}; client store {store}; "
            f"{config['algorithm']} on {config['dataset']}, {config['rounds']} rounds; "
            f"workdir {os.path.abspath(workdir)}")


def _ending(err: BaseException) -> str:
    """How a run that raised `err` ended, in a few words (the summary line's)."""
    if isinstance(err, Stopped):
        return (f"stopped by {signal.Signals(err.signum).name} after round {err.rounds_done}, "
                "checkpoint saved (rerun the same command to continue)")
    if isinstance(err, NonFiniteError):
        return "diverged"
    if isinstance(err, WriteError):
        return "a write failed"
    if isinstance(err, distributed.PeerLost):
        return "a peer process was lost"
    if isinstance(err, (KeyboardInterrupt, SystemExit)):
        return type(err).__name__
    text = " ".join(str(err).split())
    return f"error: {text[:300]}"


def _log_summary(log, ending, done, config, seconds) -> None:
    try:
        log(summary_line(ending, done["rows"], done["start"], config["rounds"], seconds))
    except WriteError:
        pass  # the failure that ended the run is reported by the caller


def summary_line(ending, rows, start, rounds, seconds) -> str:
    """A run's last line: how it ended, its rounds (those of this run), the final test
    accuracy and train loss, and the seconds this run took."""
    last = rows[-1]["round"] if rows else 0
    ran = f" (rounds {start + 1}-{last} in this run)" if last > start else ""
    parts = [f"summary: {ending}; round {last}/{rounds}{ran}"]
    evaluated = [r for r in rows if "test_accuracy" in r]
    if evaluated:
        parts.append(f"test_accuracy {evaluated[-1]['test_accuracy']:.4f} at round "
                     f"{evaluated[-1]['round']}")
    if rows:
        parts.append(f"train_loss {rows[-1]['train_loss']:.4f}")
    return "; ".join(parts + [f"{seconds:.1f} s"])


def _run_locked(exp, config, workdir, primary, log, progress, fault, stop, done):
    if primary:
        prepare_workdir(workdir, config)
        _write_run_info(exp, config, workdir, log)
    log(f"client store: {exp.client_store} ({exp.store_reason})")
    clients = None  # the per-client rows, when a ClientStore holds them (not FedState)
    if exp.client_store == "device":
        state = exp.algorithm.init(exp.init_params, num_clients=config["num_clients"])
        log(_state_memory_line(state, config["num_clients"]))
    else:
        state = client_store.server_state(exp.algorithm, exp.init_params)
        clients = _open_store(exp, config, workdir, primary)
        log(f"per-client state: rows created when a client is first sampled, in "
            f"{getattr(clients, 'path', 'host memory')}; the cohort "
            "round compiles in the first round")
    checkpointer = Checkpointer(workdir, keep=config["keep_checkpoints"], log=log)
    try:
        start, state, rows = _resume(checkpointer, state, config, workdir, log)
        if clients is None:
            check_state(exp.algorithm, state)  # the restored state is this algorithm's
        else:  # the rows as they were after round `start` (process 0 rewrites them)
            if primary and start < config["rounds"]:  # a finished run reads no row
                with workdir_lib.reporting(clients.folder):
                    clients.restore(start, checkpointer.client_rows(start) if start else None)
            distributed.barrier("the client rows are restored")
    except (WorkdirError, ValueError):
        checkpointer.close()
        raise
    done.update(rows=rows, start=start)
    stop.last_checkpoint = checkpointer.latest_round()
    decay = exp.plan.local_lr_decay
    rounds = config["rounds"]
    root_key = jax.random.fold_in(jax.random.key(config["seed"]), 1)
    outputs = None
    failed_save = False
    try:
        if primary:
            outputs = _Outputs(workdir, rows, start, rounds, log, progress)
        seen_steps = set()  # the masked-epoch round lengths K compiled so far
        for t in range(start, rounds):
            fault("round_start", t + 1)
            state, row = _train_round(exp, config, state, clients, t, root_key, decay,
                                      checkpointer.latest_round(), log, seen_steps)
            if (t + 1) % config["eval_every"] == 0 or t + 1 == rounds:
                t1 = time.perf_counter()
                row.update({k: float(v) for k, v in exp.evaluate(state.params).items()})
                reference = offset_reference(exp.algorithm.spec, state.params)
                row["divergence_all"] = (
                    float(divergence_all(state.client_params, reference))
                    if clients is None else clients.divergence_all(reference))
                fault("eval", t + 1)
                row["eval_seconds"] = time.perf_counter() - t1
            rows.append(row)
            if outputs is not None:
                outputs.write(row)
                fault("metrics_written", t + 1)
            why = runaway(rows)
            if why:
                last = checkpointer.latest_round()
                raise NonFiniteError(f"{why}. The last checkpoint ("
                                     f"{'round ' + str(last) if last else 'none'}) and "
                                     "metrics.jsonl are kept.")
            stopping = distributed.any_process(stop.signum is not None)
            if _checkpoint_due(config, t + 1, stopping):
                try:
                    keeps_rows = clients is not None and primary  # process 0's record
                    manifest = None
                    if keeps_rows:  # the rows of this checkpoint first (a delta)
                        with workdir_lib.reporting(clients.folder):
                            manifest = clients.checkpoint(t + 1)
                        fault("rows_saved", t + 1)
                    _save(checkpointer, t + 1, state, config, manifest)
                    if keeps_rows:
                        clients.committed(t + 1)
                except WriteError:
                    failed_save = True
                    raise
                stop.last_checkpoint = t + 1
                fault("checkpoint_saved", t + 1)
            if stopping and t + 1 < rounds:  # a signal on any process stops all of them
                raise Stopped(stop.signum or signal.SIGTERM, t + 1)  # (a finished run: done)
        if clients is not None:  # what a federation kept in a store cost this process
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
            log(f"client store: {clients.rows_held:,} of {config['num_clients']:,} clients "
                f"hold a row; peak RSS {peak:,.0f} MiB")
    except distributed.PeerLost:
        failed_save = True  # orbax's threads may be waiting for the lost peer
        raise
    except jax.errors.JaxRuntimeError as err:  # a round's or a stop check's collective
        lost = distributed.peer_lost(err)
        if lost is None:
            raise
        failed_save = True
        raise lost from None
    except WriteError as err:
        last = checkpointer.latest_round()
        raise WriteError(f"{err}; last good checkpoint: "
                         f"{'round ' + str(last) if last else 'none'}; the complete rows of "
                         "metrics.jsonl are kept; rerun the same command to resume") from None
    finally:
        if outputs is not None:
            outputs.close()
        if not failed_save:  # after a failed save orbax's writer threads may still be
            checkpointer.close()  # failing: closing now makes them print tracebacks
    return rows


def runaway(rows) -> str | None:
    """Why the run whose metrics rows are `rows` has diverged by its train loss, or None:
    each of its last RUNAWAY_ROUNDS rounds' train loss above RUNAWAY_FACTOR times the lowest
    train loss of the rounds before it."""
    losses = [row["train_loss"] for row in rows]
    n = len(losses)
    if n <= RUNAWAY_ROUNDS or not all(losses[i] > RUNAWAY_FACTOR * min(losses[:i])
                                      for i in range(n - RUNAWAY_ROUNDS, n)):
        return None
    return (f"round {rows[-1]['round']}: train loss {losses[-1]:.4g} has stayed above "
            f"{RUNAWAY_FACTOR:g}x the run's lowest ({min(losses):.4g}) for {RUNAWAY_ROUNDS} "
            "rounds: the run diverged")


def _checkpoint_due(config, rounds_done, stopping) -> bool:
    """The checkpoint policy: every checkpoint_every rounds, after the last, and on a stop."""
    every = config["checkpoint_every"]
    return bool(every and rounds_done % every == 0) or rounds_done == config["rounds"] or stopping


def _write_run_info(exp, config, workdir, log):
    """run_info.json: what the run ran on; a change of device count is recorded and warned."""
    info_path = os.path.join(workdir, "run_info.json")
    before = workdir_lib.read_json(info_path) if os.path.exists(info_path) else {}
    devices = exp.algorithm.runtime.num_devices
    history = before.get("num_devices_history", [])
    if before and before.get("num_devices") != devices:  # sharding decides the last bits
        history.append({"after_round": rounds_done(workdir, config), "num_devices": devices,
                        "before": before.get("num_devices")})
        log(f"warning: resuming on {devices} devices, the run so far used "
            f"{before.get('num_devices')}: results may differ in the last bits from an "
            "uninterrupted run (set --config.num_devices to pin it)")
    if exp.data_info:
        brief = {k: v for k, v in exp.data_info.items() if not isinstance(v, list)}
        log("data: " + ", ".join(f"{k} {v}" for k, v in brief.items()))
    not_applicable = experiment.options_not_applicable(config)
    for field, value in not_applicable.items():
        log(f"note: config.{field}={value!r} does not apply to {config['algorithm']} (its "
            "server replaces w, it takes no step along an update); it changes nothing and is "
            "recorded as such in run_info.json")
    recorded = before.get("client_store", "device") if before else None
    if recorded and recorded != exp.client_store and rounds_done(workdir, config):
        raise WorkdirError(f"{workdir!r}: the run so far kept its clients in the "
                           f"{recorded} store, this one would use {exp.client_store}; resume "
                           f"it with --config.client_store={recorded}")
    workdir_lib.write_json(info_path, {
        "client_store": exp.client_store, "client_store_reason": exp.store_reason,
        "options_not_applicable": not_applicable, "data": exp.data_info,
        "num_devices_history": history,
        "num_params": sum(int(x.size) for x in jax.tree.leaves(exp.init_params)),
        "num_classes": exp.num_classes,
        "clients_per_round": exp.plan.expected_clients,
        "client_slots": exp.plan.client_slots,
        "participation_mode": config["participation_mode"],
        "local_steps": exp.steps_per_round, "backend": jax.default_backend(),
        "execution": exp.algorithm.runtime.execution,
        "num_devices": exp.algorithm.runtime.num_devices,
        "num_processes": jax.process_count(),
        "costs": algorithms.REGISTRY[config["algorithm"]].costs._asdict()})


def _resume(checkpointer, state, config, workdir, log):
    """(rounds done, state, metrics rows 1..rounds done) from the newest good checkpoint.

    Rows already written are never dropped for want of a checkpoint: a run whose rows cover
    config.rounds is finished whatever its checkpoints hold (no state is needed), and an
    unfinished run whose every checkpoint is unreadable is refused, nothing moved, rather
    than started over. Past a damaged checkpoint the previous one is used, and the rounds
    after it recomputed (bit for bit: module doc)."""
    written = read_metrics(workdir)
    if len(written) >= config["rounds"]:  # finished: the rows are the results
        return len(written), state, written
    start, restored = checkpointer.restore(state, keep_damaged=True)
    if checkpointer.damaged and not start and written:
        rounds = ", ".join(f"round {step}" for step, _ in checkpointer.damaged)
        why = checkpointer.damaged[0][1]
        raise WorkdirError(
            f"{workdir!r}: the checkpoint after {rounds} is unreadable ({why}) and no other is "
            f"left, but {workdir_lib.METRICS} holds rounds 1..{len(written)}: resuming would start "
            "over and rewrite them. Nothing was changed; to recompute every round, move "
            f"{workdir_lib.METRICS} and checkpoints/ aside and rerun")
    for step, why in checkpointer.damaged:
        checkpointer.set_aside(step, why)
    if start:
        state = restored
        log(f"resumed from the checkpoint after round {start}")
    rows = _rows_up_to(workdir, start)
    if rows and start < config["rounds"] and start % config["eval_every"]:
        # the evaluation taken because `start` was the last round of a shorter run: an
        # uninterrupted run of config.rounds has none there
        rows[-1] = {k: v for k, v in rows[-1].items()
                    if not k.startswith("test_") and k not in EVALUATION_ONLY}
    return start, state, rows


class _Outputs:
    """Process 0's per-round outputs: metrics.jsonl (rewritten to the resumed rows first),
    TensorBoard scalars, and a progress bar or a log line."""

    def __init__(self, workdir, rows, start, rounds, log, progress):
        workdir_lib.rewrite_metrics(workdir, rows)
        self.log = log
        self.last_accuracy = rows[-1].get("test_accuracy") if rows else None
        self.metrics = self.scalars = self.bar = None
        try:
            self.metrics = workdir_lib.MetricsLog(workdir)
            self.scalars = workdir_lib.ScalarLog(os.path.join(workdir, "tb"), start)
            self.bar = _progress(rounds, start,
                                 sys.stderr.isatty() if progress is None else progress)
        except BaseException:
            self.close()
            raise

    def write(self, row):
        self.metrics.write(row)
        self.scalars.write(row["round"], {k: v for k, v in row.items() if k != "round"})
        self.last_accuracy = row.get("test_accuracy", self.last_accuracy)
        self.log(_line(row), echo=self.bar is None)  # train.log gets every round's line
        if self.bar is None:
            return
        self.bar.set_postfix(loss=f"{row['train_loss']:.4f}", acc="-" if self.last_accuracy
                             is None else f"{self.last_accuracy:.4f}")
        self.bar.update(1)

    def close(self):
        for output in (self.metrics, self.scalars, self.bar):
            if output is not None:
                output.close()


def _save(checkpointer, rounds_done, state, config, client_rows=None):
    """A checkpoint (with the client store's manifest, if any), or WriteError naming its
    folder (orbax raises many kinds); PeerLost when a multi-process save's collective failed
    because another process is gone."""
    try:
        checkpointer.save(rounds_done, state, config, client_rows)
    except Exception as err:  # noqa: BLE001 - disk full, quota, I/O errors, as orbax wraps them
        raise (distributed.peer_lost(err) or WriteError(
            workdir_lib.describe_write_error(checkpointer.directory, err))) from None


def _silent(_line):
    pass


def _sample(exp, config, t, log):
    """Round t's (client ids, mask): mask None for fixed participation (unless its N clients
    are padded to a multiple of config.num_devices); for Bernoulli the sampled ids padded to
    the static bound (data/participation.py)."""
    rng = np.random.default_rng([config["seed"], 1, t])
    if config["participation_mode"] == "fixed":
        ids = data.sample_clients(rng, config["num_clients"], exp.plan.expected_clients)
        if ids.size == exp.plan.client_slots:
            return ids, None
        return data.pad(ids, exp.plan.client_slots)  # slots to a multiple of the devices
    ids = data.sample_bernoulli(rng, config["num_clients"], config["participation"],
                                config["participation_draw"])
    if ids.size > exp.plan.client_slots:
        log(f"round {t + 1}: {ids.size} clients sampled, more than the static bound "
            f"{exp.plan.client_slots}; this round is padded further (one more compilation)")
    return data.pad(ids, exp.plan.client_slots)


def _train_round(exp, config, state, clients, t, root_key, decay, last_checkpoint, log,
                 seen_steps):
    """Round t (0-based): its inputs from (seed, t), the jitted round, the divergence guard."""
    t0 = time.perf_counter()
    ids, mask = _sample(exp, config, t, log)
    batches, step_mask = exp.round_batches(ids, np.random.default_rng([config["seed"], 2, t]))
    devices = exp.algorithm.runtime.num_devices or 1
    if mask is not None and devices > 1:  # the real clients dealt evenly over the devices
        order = data.spread(int(mask.sum()), mask.size, devices)
        ids, mask, batches, step_mask = jax.tree.map(lambda a: a[order],
                                                     (ids, mask, batches, step_mask))
    _log_new_shape(step_mask, t, seen_steps, log)
    lr = np.float32(config["local_lr"] * decay ** t)
    round_input = experiment.round_input(config, exp.client_sizes, ids, mask, batches,
                                         step_mask, lr)
    key = jax.random.fold_in(root_key, t)
    if clients is None:
        check_round_input(exp.algorithm, state, round_input)
        new_state, metrics = exp.algorithm.apply(state, round_input, key)
    else:  # the sampled clients' rows gathered, the round, the new rows scattered
        with workdir_lib.reporting(getattr(clients, "path", clients.folder)):
            new_state, metrics = client_store.run_round(exp.algorithm, state, clients,
                                                        round_input, key)
    metrics = {k: float(v) for k, v in metrics.items()}
    loss_ok = math.isfinite(metrics["train_loss"])
    if not (loss_ok and bool(_all_finite(new_state.params))):
        raise NonFiniteError(
            f"round {t + 1}: non-finite {'parameters' if loss_ok else 'train loss'} "
            f"(train_loss={metrics['train_loss']}); likely beta={float(new_state.beta):g} or "
            f"local_lr={float(lr):.4g} is too large. "
            + (f"The last good checkpoint (round {last_checkpoint}) and metrics.jsonl are "
               "kept." if last_checkpoint else "No checkpoint was taken yet; metrics.jsonl "
               "is kept."))
    row = {"round": t + 1, **metrics, "local_lr": float(lr),
           "train_seconds": time.perf_counter() - t0}
    if config["participation_mode"] == "bernoulli":
        row["clients"] = int(mask.sum())  # |S| of a Bernoulli round
    return new_state, row


def _log_new_shape(step_mask, t, seen, log):
    """Masked epochs pad a round to a bucket of its largest client (data/shakespeare.py): a
    K not in `seen` (this run's) compiles the round once more; say so."""
    if step_mask is None:
        return
    k = step_mask.shape[1]
    if k not in seen:
        seen.add(k)
        log(f"round {t + 1}: K={k} local steps (the largest sampled client's "
            f"{int(step_mask.sum(axis=1).max())} rounded up to a power of two): a new round "
            "shape, compiled once")


def _recorded_store(workdir):
    """The client store a run in workdir used (run_info.json; before the field existed: the
    device tables), or None for a new workdir."""
    path = os.path.join(workdir, "run_info.json")
    if not os.path.exists(path):
        return None
    return workdir_lib.read_json(path).get("client_store", "device")


def _open_store(exp, config, workdir, primary):
    """The run's ClientStore (client_store.open_store), its record (deltas) attached in
    <workdir>/client_rows, where the disk store's arrays live too. In a multi-process run
    process 0 creates the store and alone keeps its record; the others open it after."""
    folder = os.path.join(workdir, "client_rows")

    def open_store():
        with workdir_lib.reporting(folder):
            return client_store.open_store(exp.client_store, exp.algorithm, exp.init_params,
                                           config["num_clients"], folder)

    clients = _attached(open_store(), folder) if primary else None  # first: created once
    distributed.barrier("the client store is created")  # every process, process 0 after it
    return clients or open_store()


def _attached(clients, folder):
    with workdir_lib.reporting(folder):
        clients.attach(folder)
    return clients


def _state_memory_line(state, num_clients):
    """The per-client state's size: C x (vectors per client) x d x bytes, and the total."""
    d = sum(int(x.size) for x in jax.tree.leaves(state.params))
    leaves = jax.tree.leaves((state.client_params, state.client_state))
    per_client = sum(x.nbytes for x in leaves) // num_clients
    itemsize = leaves[0].dtype.itemsize
    vectors = per_client // (itemsize * d) if d else 0
    total = per_client * num_clients
    hint = "; --config.client_state_dtype=bfloat16 halves it" if itemsize == 4 else ""
    return (f"per-client state: C={num_clients} x {vectors} vectors x d={d:,} x {itemsize} "
            f"bytes ({leaves[0].dtype}) = {total / 2**30:.2f} GiB (global model "
            f"{4 * d / 2**20:.1f} MiB){hint}")


def _line(row):
    parts = [f"round {row['round']:4d}", f"train_loss {row['train_loss']:.4f}",
             f"divergence {row['divergence']:.4g}", f"lr {row['local_lr']:.4g}",
             f"{row['train_seconds']:.2f}s"]
    if "test_accuracy" in row:
        parts.insert(1, f"test_accuracy {row['test_accuracy']:.4f}")
    return "  ".join(parts)
