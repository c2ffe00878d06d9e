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
import dataclasses
import math
import os
import resource
import signal
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from fedinit_jax import client_store, data, experiment
from fedinit_jax.checks import check_round_input, check_state
from fedinit_jax.experiment import distributed, outputs, stopping
from fedinit_jax.experiment import workdir as workdir_lib
from fedinit_jax.experiment.checkpoint import Checkpointer
from fedinit_jax.experiment.resume import (  # noqa: F401 (API: the binaries and the sweep)
    finished_rounds,
    make_workdir,
    prepare_workdir,
    recorded_store,
    resume,
)
from fedinit_jax.experiment.stopping import (  # noqa: F401 (API)
    REQUEUE_EXIT,
    NonFiniteError,
    Stopped,
    StopRequest,
    runaway,
)
from fedinit_jax.experiment.workdir import WorkdirBusy, WorkdirError, WriteError, read_metrics  # noqa: F401 (API)
from fedinit_jax.federated_round import divergence_all

__all__ = ["run", "REQUEUE_EXIT", "NonFiniteError", "Stopped", "StopRequest", "WorkdirBusy",
           "WorkdirError", "WriteError", "finished_rounds", "make_workdir", "prepare_workdir",
           "read_metrics", "recorded_store", "resume", "runaway"]


def _no_fault(point: str, rounds_done: int) -> None:
    del point, rounds_done


@dataclasses.dataclass
class _Run:
    """One run's context once its workdir is held: what every step of the loop reads (the
    Experiment, whose plan is the only source of settings), and what the set-up makes (the
    client store, the checkpointer) and the loop writes to (the outputs)."""

    exp: Any                  # experiment.Experiment
    workdir: str
    primary: bool             # process 0: writes the files
    log: Callable
    fault: Callable           # the reliability tests' fault points (run's docstring)
    stop: StopRequest
    clients: Any = None       # a ClientStore, or None when FedState holds the tables
    checkpointer: Any = None  # Checkpointer
    out: Any = None           # outputs.Outputs on process 0


@jax.jit
def _all_finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)]))


def run(plan: experiment.Plan, workdir: str, *, log=print, progress=None,
        fault=None) -> list[dict]:
    """Train (or resume) the experiment of `plan` (experiment.plan(config)); returns all
    metrics rows.

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
    if not isinstance(plan, experiment.Plan):
        raise ValueError(f"run takes a Plan (experiment.plan(config)), got "
                         f"{type(plan).__name__}")
    fault = fault or _no_fault
    started = time.perf_counter()
    config = plan.config  # as config.json records it
    with StopRequest() as stop:  # from the start: a signal while loading or compiling
        distributed.agree(config, workdir)  # every process: the same run, before any work
        primary, rounds = distributed.is_primary(), plan.schedule.rounds
        if primary:  # a workdir in use: refused before loading and compiling
            workdir_lib.refuse_if_busy(workdir)
        early = workdir_lib.EarlyLog(log if primary else _silent)  # train.log's first lines
        recorded = recorded_store(workdir)  # auto resumes where the run kept its clients
        early(outputs.start_line(plan, workdir, recorded))
        exp = experiment.build(plan, recorded, log=early)  # loads, compiles: timed lines
        lock = train_log = None
        log = _silent
        if primary:  # a bad config or data is refused above, before anything is written
            make_workdir(workdir)
            lock = workdir_lib.Lock(workdir, early)  # before anything is read for resuming
            train_log = log = workdir_lib.TrainLog(workdir, early)
        done = {"rows": [], "start": 0}  # what the summary line reports
        ending = "error"
        if train_log is not None:
            stop.on_force = lambda words: outputs.log_summary(log, words, done, rounds,
                                                       time.perf_counter() - started)
        try:
            distributed.check_shared_workdir(workdir)
            rows = _run_locked(_Run(exp, workdir, primary, log, fault, stop), progress, done)
            ending = "done"
            return rows
        except BaseException as err:
            ending = stopping.ending(err)
            raise
        finally:
            if train_log is not None:
                stop.on_force = None  # the summary is written: a forced exit adds none
                outputs.log_summary(log, ending, done, rounds, time.perf_counter() - started)
                train_log.close()
            if lock is not None:
                lock.release()


def _run_locked(run_: _Run, progress, done):
    """The run once its workdir is held: set up or resume, then the rounds."""
    exp, workdir, log = run_.exp, run_.workdir, run_.log
    try:  # what the summary line reports should the set-up refuse the workdir
        written = read_metrics(workdir)
    except WorkdirError:
        written = []
    done.update(rows=written, start=len(written))
    state, start, rows = _set_up(run_)
    done.update(rows=rows, start=start)
    if start >= exp.plan.schedule.rounds:
        log(f"nothing to run: {workdir!r} already holds all {start} rounds of this config "
            "(a larger --config.rounds extends it; a new --workdir starts another run)")
    checkpointer = run_.checkpointer
    run_.stop.last_checkpoint = checkpointer.latest_round()
    failed_save = False
    try:
        if run_.primary:
            run_.out = outputs.Outputs(workdir, rows, start, exp.plan.schedule.rounds, log,
                                       progress)
        _rounds(run_, state, start, rows)
    except distributed.PeerLost:
        failed_save = True  # orbax's threads may be waiting for the lost peer
        raise
    except WriteError as err:
        failed_save = getattr(err, "during_save", False)  # orbax's writers may be failing
        last = checkpointer.latest_round()
        raise WriteError(f"{err}; last good checkpoint: "
                         f"{'round ' + str(last) if last else 'none'}; the complete rows of "
                         "metrics.jsonl are kept; rerun the same command to resume") from None
    except jax.errors.JaxRuntimeError as err:  # a round's or a stop check's collective
        lost = distributed.peer_lost(err)
        if lost is None:
            raise
        failed_save = True
        raise lost from None
    finally:
        if run_.out is not None:
            run_.out.close()
        if not failed_save:  # after a failed save closing makes orbax's threads print
            checkpointer.close()
    return rows


def _set_up(run_: _Run):
    """(state, rounds done, metrics rows): the workdir prepared, the state made (on the
    device, or the server's with a ClientStore: run_.clients) and resumed from the newest
    good checkpoint (run_.checkpointer), the store's rows as they were after that round."""
    exp, workdir, primary, log = run_.exp, run_.workdir, run_.primary, run_.log
    config = exp.plan.config
    if primary:
        prepare_workdir(workdir, config)
        outputs.write_run_info(exp, config, workdir, log)
    log(f"client store: {exp.client_store} ({exp.store_reason})")
    clients = None  # the per-client rows, when a ClientStore holds them (not FedState)
    if exp.client_store == "device":
        state = exp.algorithm.init(exp.init_params, num_clients=exp.plan.sampling.num_clients)
        log(outputs.state_memory_line(state, exp.plan.sampling.num_clients))
    else:
        state = client_store.server_state(exp.algorithm, exp.init_params)
        clients = _open_store(exp, workdir, primary)
        where = clients.path if client_store.implements(clients, client_store.SharedStore) else (
            "host memory")
        log(f"per-client state: rows created when a client is first sampled, in {where}; the "
            "cohort round compiles in the first round")
    checkpointer = Checkpointer(workdir, keep=exp.plan.schedule.keep_checkpoints, log=log)
    try:
        start, state, rows, manifest = resume(
            checkpointer, state, config, workdir, log,
            None if clients is None else os.path.join(workdir, "client_rows"))
        if clients is None:
            check_state(exp.algorithm, state)  # the restored state is this algorithm's
        else:  # the rows as they were after round `start` (process 0 rewrites them)
            if primary and start < exp.plan.schedule.rounds:  # a finished run reads no row
                with workdir_lib.reporting(clients.folder):
                    clients.restore(start, manifest)
            distributed.barrier("the client rows are restored")
    except (WorkdirError, ValueError):
        checkpointer.close()
        raise
    run_.clients, run_.checkpointer = clients, checkpointer
    return state, start, rows


def _rounds(run_: _Run, state, start, rows):
    """Rounds start+1..R (the plan's schedule): train, evaluate when due, write the row, stop
    on a runaway loss, checkpoint when due, stop at a signal (on any process)."""
    exp, clients, checkpointer = run_.exp, run_.clients, run_.checkpointer
    fault, stop = run_.fault, run_.stop
    schedule = exp.plan.schedule
    rounds = schedule.rounds
    root_key = jax.random.fold_in(jax.random.key(schedule.seed), 1)
    seen_steps = set()  # the masked-epoch round lengths K compiled so far
    for t in range(start, rounds):
        fault("round_start", t + 1)
        state, row = _train_round(run_, state, t, root_key, seen_steps)
        if (t + 1) % schedule.eval_every == 0 or t + 1 == rounds:
            row.update(_evaluate(exp, state, clients))
            fault("eval", t + 1)
            _refuse_non_finite(row, checkpointer.latest_round())
        rows.append(row)
        if run_.out is not None:
            run_.out.write(row)
            fault("metrics_written", t + 1)
        why = runaway(rows)
        if why:
            raise NonFiniteError(f"{why}. {_kept(checkpointer.latest_round())}")
        stopping_now = distributed.any_process(stop.signum is not None)
        if _checkpoint_due(schedule, t + 1, stopping_now):
            _checkpoint(run_, t + 1, state, rows)
            stop.last_checkpoint = t + 1
            fault("checkpoint_saved", t + 1)
        if stopping_now and t + 1 < rounds:  # a signal on any process stops all of them
            raise Stopped(stop.signum or signal.SIGTERM, t + 1)  # (a finished run: done)
    if clients is not None and start < rounds:  # what a store cost this process's rounds
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        run_.log(f"client store: {clients.rows_held:,} of {exp.plan.sampling.num_clients:,} "
                 f"clients hold a row; peak RSS {peak:,.0f} MiB")


def _evaluate(exp, state, clients) -> dict:
    """An evaluation round's extra fields: the task's test metrics, Delta^t (the mean
    squared RI offset over all C clients: divergence_all) and the seconds they took."""
    t1 = time.perf_counter()
    row = {k: float(v) for k, v in exp.evaluate(state.params).items()}
    row["divergence_all"] = (float(divergence_all(
        state.ri_rows, exp.algorithm.spec.ri_offset.measured_from(state.params)))
        if clients is None else clients.divergence_all(state.params))
    row["eval_seconds"] = time.perf_counter() - t1
    return row


def _checkpoint(run_: _Run, rounds_done, state, rows):
    """The checkpoint after `rounds_done`: a client store's rows first (process 0 writes
    their delta and its manifest), then the server state with the manifest, then the store
    told that the checkpoint is committed, then the deltas no kept checkpoint names
    deleted (client_store.deltas.remove_unreferenced; a kill before or during it leaves files the
    next checkpoint deletes)."""
    clients, checkpointer, fault = run_.clients, run_.checkpointer, run_.fault
    keeps_rows = clients is not None and run_.primary  # process 0's record
    manifest = None
    if keeps_rows:
        with workdir_lib.reporting(clients.folder):
            manifest = clients.checkpoint(rounds_done)
        fault("rows_saved", rounds_done)
    try:
        outputs.save(checkpointer, rounds_done, state, run_.exp.plan.config, manifest, rows,
                     run_.exp.client_store)
    except WriteError as err:
        err.during_save = True
        raise
    if keeps_rows:
        clients.committed(rounds_done)
        fault("checkpoint_committed", rounds_done)
        with workdir_lib.reporting(clients.folder):
            client_store.deltas.remove_unreferenced(clients.folder, checkpointer.manifests())


def _refuse_non_finite(row, last_checkpoint) -> None:
    """NonFiniteError when an evaluation gave a non-finite number (say Delta^t = inf): the
    round ends before its row or any checkpoint is written, so no good checkpoint is ever
    rotated out by one of a diverged state."""
    bad = sorted(k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v))
    if bad:
        values = ", ".join(f"{k}={row[k]}" for k in bad)
        raise NonFiniteError(f"round {row['round']}: non-finite {values}; the run diverged. "
                             f"{_kept(last_checkpoint)}")


def _kept(last_checkpoint) -> str:
    """What a diverged run leaves: its last checkpoint's round and the metrics."""
    last = f"round {last_checkpoint}" if last_checkpoint else "none"
    return f"The last checkpoint ({last}) and metrics.jsonl are kept."


def _checkpoint_due(schedule, rounds_done, stopping) -> bool:
    """The checkpoint policy: every checkpoint_every rounds, after the last, and on a stop."""
    every = schedule.checkpoint_every
    return bool(every and rounds_done % every == 0) or rounds_done == schedule.rounds or stopping


def _silent(_line):
    pass


def _sample(plan, t, log):
    """Round t's (client ids, mask): mask None for fixed participation (unless its N clients
    are padded to a multiple of config.num_devices); for Bernoulli the sampled ids padded to
    the static bound (data/participation.py)."""
    sampling = plan.sampling
    rng = data.round_rng(plan.schedule.seed, t)
    if sampling.mode == "fixed":
        ids = data.sample_clients(rng, sampling.num_clients, sampling.expected_clients)
        if ids.size == sampling.client_slots:
            return ids, None
        return data.pad(ids, sampling.client_slots)  # slots to a multiple of the devices
    ids = data.sample_bernoulli(rng, sampling.num_clients, sampling.participation,
                                sampling.draw)
    if ids.size > sampling.client_slots:
        log(f"round {t + 1}: {ids.size} clients sampled, more than the static bound "
            f"{sampling.client_slots}; this round is padded further (one more compilation)")
    return data.pad(ids, sampling.client_slots)


def _train_round(run_: _Run, state, t, root_key, seen_steps):
    """Round t (0-based): its inputs from (seed, t), the jitted round, the divergence guard."""
    exp, clients, log = run_.exp, run_.clients, run_.log
    last_checkpoint = run_.checkpointer.latest_round()
    t0 = time.perf_counter()
    schedule = exp.plan.schedule
    ids, mask = _sample(exp.plan, t, log)
    batches, step_mask = exp.round_batches(ids, np.random.default_rng([schedule.seed, 2, t]))
    devices = exp.algorithm.runtime.num_devices or 1
    if mask is not None and devices > 1:  # the real clients dealt evenly over the devices
        order = data.spread(int(mask.sum()), mask.size, devices)
        ids, mask, batches, step_mask = jax.tree.map(lambda a: a[order],
                                                     (ids, mask, batches, step_mask))
    _log_new_shape(step_mask, t, seen_steps, log)
    lr = np.float32(schedule.local_lr * schedule.local_lr_decay ** t)
    round_input = experiment.round_input(exp.plan, exp.client_sizes, ids, mask, batches,
                                         step_mask, lr)
    key = jax.random.fold_in(root_key, t)
    if clients is None:
        check_round_input(exp.algorithm, state, round_input)
        new_state, metrics = exp.algorithm.apply(state, round_input, key)
    else:  # the sampled clients' rows gathered, the round, the new rows scattered
        with workdir_lib.reporting(_rows_path(clients)):
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
    if exp.plan.sampling.mode == "bernoulli":
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


def _open_store(exp, workdir, primary):
    """The run's ClientStore (client_store.open_store), its record (deltas) attached in
    <workdir>/client_rows, where the disk store's arrays live too. In a multi-process run
    process 0 creates the store and alone keeps its record; the others open it after."""
    folder = os.path.join(workdir, "client_rows")

    def open_store():
        with workdir_lib.reporting(folder):
            return client_store.open_store(exp.client_store, exp.algorithm, exp.init_params,
                                           exp.plan.sampling.num_clients, folder)

    clients = _attached(open_store(), folder) if primary else None  # first: created once
    distributed.barrier("the client store is created")  # every process, process 0 after it
    return clients or open_store()


def _rows_path(clients) -> str:
    """Where a store's rows are written (a write error names it): a SharedStore's files, else
    the folder of its record."""
    return clients.path if client_store.implements(clients, client_store.SharedStore) else clients.folder


def _attached(clients, folder):
    with workdir_lib.reporting(folder):
        clients.attach(folder)
    return clients
