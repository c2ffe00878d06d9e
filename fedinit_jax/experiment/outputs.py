"""What a run writes and says: metrics.jsonl, TensorBoard scalars and the progress line
(Outputs), run_info.json, checkpoints (save), and train.log's first and last lines."""
import os
import platform
import sys

import jax

from fedinit_jax import algorithms, experiment
from fedinit_jax.experiment import distributed
from fedinit_jax.experiment import workdir as workdir_lib
from fedinit_jax.experiment.resume import recorded_store, rounds_done
from fedinit_jax.experiment.workdir import WorkdirError, WriteError

__all__ = ["Outputs", "progress_bar", "save", "write_run_info", "machine", "start_line", "log_summary",
           "summary_line", "state_memory_line", "line"]


class Outputs:
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
            self.bar = progress_bar(rounds, start,
                                 sys.stderr.isatty() if progress is None else progress)
        except BaseException:
            self.close()
            raise

    def write(self, row):
        self.metrics.write(row)
        self.scalars.write(row["round"], {k: v for k, v in row.items() if k != "round"})
        self.last_accuracy = row.get("test_accuracy", self.last_accuracy)
        self.log(line(row), echo=self.bar is None)  # train.log gets every round's line
        if self.bar is None:
            return
        self.bar.set_postfix(loss=f"{row['train_loss']:.4f}", acc="-" if self.last_accuracy
                             is None else f"{self.last_accuracy:.4f}")
        self.bar.update(1)

    def close(self):
        for output in (self.metrics, self.scalars, self.bar):
            if output is not None:
                output.close()


def progress_bar(total, initial, enabled):
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="round", dynamic_ncols=True)


def save(checkpointer, rounds_done, state, config, client_rows=None, rows=(),
         client_store=None):
    """A checkpoint (with the client store's manifest, if any, and the record of its state
    and metrics rows: checkpoint.Checkpointer.save), or WriteError naming its folder (orbax
    raises many kinds); PeerLost when a multi-process save's collective failed because
    another process is gone."""
    try:
        checkpointer.save(rounds_done, state, config, client_rows, rows, client_store)
    except Exception as err:  # noqa: BLE001 - disk full, quota, I/O errors, as orbax wraps them
        raise (distributed.peer_lost(err) or WriteError(
            workdir_lib.describe_write_error(checkpointer.directory, err))) from None


def write_run_info(exp, config, workdir, log):
    """run_info.json: what the run ran on; a change of device count is recorded and warned."""
    info_path = os.path.join(workdir, "run_info.json")
    try:
        before = workdir_lib.read_json(info_path) if os.path.exists(info_path) else {}
    except WorkdirError as err:  # what it said of the store is in the checkpoints' records
        log(f"warning: {err}: it is written anew (its record of device counts is lost)"
            .replace("; restore it or use a new workdir", ""))
        store = recorded_store(workdir)
        before = {"client_store": store} if store else {}
    devices = exp.algorithm.runtime.num_devices
    history = before.get("num_devices_history", [])
    if "num_devices" in before and before["num_devices"] != devices:  # sharding: the last bits
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
        log(f"note: config.{field}={value!r} does not apply to {exp.plan.algorithm.name} (its "
            "server replaces w, it takes no step along an update); it changes nothing and is "
            "recorded as such in run_info.json")
    recorded = before.get("client_store")
    if recorded and recorded != exp.client_store and rounds_done(workdir, config):
        raise WorkdirError(f"{workdir!r}: the run so far kept its clients in the "
                           f"{recorded} store, this one would use {exp.client_store}; resume "
                           f"it with --config.client_store={recorded}")
    workdir_lib.write_json(info_path, {
        "client_store": exp.client_store, "client_store_reason": exp.store_reason,
        "options_not_applicable": not_applicable, "data": exp.data_info,
        "num_devices_history": history,
        "sessions": [*before.get("sessions", []),
                     {"after_round": rounds_done(workdir, config), **machine()}],
        "num_params": sum(int(x.size) for x in jax.tree.leaves(exp.init_params)),
        "num_classes": exp.num_classes,
        "clients_per_round": exp.plan.expected_clients,
        "client_slots": exp.plan.client_slots,
        "participation_mode": exp.plan.sampling.mode,
        "local_steps": exp.steps_per_round, "backend": jax.default_backend(),
        "execution": exp.algorithm.runtime.execution,
        "num_devices": exp.algorithm.runtime.num_devices,
        "num_processes": jax.process_count(),
        "costs": algorithms.REGISTRY[exp.plan.algorithm.name].costs._asdict()})


def machine() -> dict:
    """What a run's seconds depend on, recorded per session in run_info.json ("sessions"):
    the CPU model, its cores, the device kind and the 1-minute load average when the session
    began (other work on the machine; the report compares timings within one machine only)."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "device": jax.devices()[0].device_kind,
            "load": round(os.getloadavg()[0], 2)}


def start_line(plan, workdir, recorded) -> str:
    """The run's first line: processes, devices, execution, client store, workdir."""
    backend = jax.default_backend()
    store = plan.store.kind
    if store == "auto":
        store = (f"{recorded} (as the run so far)" if recorded else
                 "auto (device if the tables, the compiled round and a checkpoint's copies "
                 "fit: decided after compiling)")
    return (f"fedinit_jax: {jax.process_count()} process(es), {len(jax.devices())} {backend} "
            f"device(s), the round on {plan.runtime.num_devices}; execution "
            f"{plan.runtime.execution}; client store {store}; "
            f"{plan.algorithm.name} on {plan.data.dataset}, {plan.schedule.rounds} rounds; "
            f"workdir {os.path.abspath(workdir)}")


def log_summary(log, ending, done, rounds, seconds) -> None:
    try:
        log(summary_line(ending, done["rows"], done["start"], rounds, seconds))
    except WriteError:
        pass  # the failure that ended the run is reported by the caller


def summary_line(ending, rows, start, rounds, seconds) -> str:
    """A run's last line: how it ended, its rounds (those of this run), the final test
    accuracy and train loss, and the seconds this run took."""
    last = rows[-1]["round"] if rows else 0
    ran = f" (rounds {start + 1}-{last} in this run)" if last > start else " (none in this run)"
    parts = [f"summary: {ending}; round {last}/{rounds}{ran}"]
    evaluated = [r for r in rows if "test_accuracy" in r]
    if evaluated:
        parts.append(f"test_accuracy {evaluated[-1]['test_accuracy']:.4f} at round "
                     f"{evaluated[-1]['round']}")
    if rows:
        parts.append(f"train_loss {rows[-1]['train_loss']:.4f}")
    return "; ".join(parts + [f"{seconds:.1f} s"])


def state_memory_line(state, num_clients):
    """The per-client state's size: C x (vectors per client) x d x bytes, and the total."""
    d = sum(int(x.size) for x in jax.tree.leaves(state.params))
    leaves = jax.tree.leaves((state.ri_rows, state.client_state))
    per_client = sum(x.nbytes for x in leaves) // num_clients
    itemsize = leaves[0].dtype.itemsize
    vectors = per_client // (itemsize * d) if d else 0
    total = per_client * num_clients
    hint = "; --config.client_state_dtype=bfloat16 halves it" if itemsize == 4 else ""
    return (f"per-client state: C={num_clients} x {vectors} vectors x d={d:,} x {itemsize} "
            f"bytes ({leaves[0].dtype}) = {total / 2**30:.2f} GiB (global model "
            f"{4 * d / 2**20:.1f} MiB){hint}")


def line(row):
    parts = [f"round {row['round']:4d}", f"train_loss {row['train_loss']:.4f}",
             f"divergence {row['divergence']:.4g}", f"lr {row['local_lr']:.4g}",
             f"{row['train_seconds']:.2f}s"]
    if "test_accuracy" in row:
        parts.insert(1, f"test_accuracy {row['test_accuracy']:.4f}")
    return "  ".join(parts)
