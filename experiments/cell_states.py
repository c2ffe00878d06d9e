"""A sweep cell's state (done, diverged, failed, unfinished, not started, running elsewhere)
from its workdir, its lock and its status file <results>/sweep_status/<cell>.json, written
only by the process that ran the cell or found it finished."""
import datetime
import json
import os
import socket

from experiments.cli import one_line


def _status_path(results, name):
    return os.path.join(results, "sweep_status", f"{name}.json")


def recorded(results, name, config):
    """The status file of the cell, when it was written for this config (else {}): the
    config it records, read as a config.json is (experiment.read_recorded), equals this one."""
    from fedinit_jax import experiment

    try:
        with open(_status_path(results, name)) as f:
            recorded = json.load(f)
        same = experiment.read_recorded(recorded["run_config"]) == config
    except (OSError, ValueError, TypeError, AttributeError, KeyError):
        return {}
    return recorded if same else {}


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
    status = recorded(results, name, config)
    if status.get("state") in ("diverged", "failed"):
        return status["state"], status.get("detail", "")
    if done:
        return "unfinished", f"{done}/{config['rounds']} rounds"
    return "not started", ""


def describe_state(state, detail):
    return f"{state} ({detail})" if detail else state


def record(results, name, config, state, detail=""):
    from fedinit_jax.experiment import workdir as workdir_lib

    os.makedirs(os.path.join(results, "sweep_status"), exist_ok=True)
    workdir_lib.write_json(_status_path(results, name), {
        "state": state, "detail": detail, "run_config": config,
        "by": f"process {os.getpid()} on {socket.gethostname()}",
        "updated": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")})
