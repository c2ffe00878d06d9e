"""Multi-process (multi-host) runs: the same program on every process, one global device mesh.

Every process runs the whole host loop with the same config: it derives the same client
sample, batches and keys from (seed, round), so the round inputs are identical everywhere and
`jit` treats them as replicated. The round's client axis is split over the global mesh
(`execution.client_mesh` takes `jax.devices()`, which lists every process's devices), the
state comes back replicated, and the aggregation is the same mean over the client axis as in
one process (tests/test_distributed.py: 2 processes x 1 CPU device == 1 process x 2 devices,
bit for bit). Files are written by process 0 only; orbax checkpoints by all processes together.

Launching:
  * GPU node (one host, 8 GPUs): one process; nothing to initialise, num_devices=0 takes all.
  * TPU pod slice / SLURM / Open MPI: the same command on every host with --distributed;
    jax.distributed.initialize() finds the coordinator from the environment.
  * By hand (e.g. 2 processes on localhost, CPU collectives over gloo): on each process
    --coordinator_address=localhost:12355 --num_processes=2 --process_id=<0|1>.
"""
import json
import os
import secrets

import jax
import numpy as np

__all__ = ["initialize", "PEER_FAILURES", "PeerLost", "peer_lost", "is_primary", "any_process",
           "barrier", "agree", "check_shared_workdir"]


def initialize(coordinator_address=None, num_processes=None, process_id=None,
               timeout: int = 180) -> None:
    """jax.distributed.initialize: from the arguments when given, else from the environment.

    timeout: seconds to wait for every process to join, and after a process's last
    heartbeat before the others give it up for dead (JAX then aborts every process; the
    binaries turn that into one line and exit code 5, experiments/supervise.py).
    Must run before anything touches a JAX backend.
    """
    given = [coordinator_address is not None, num_processes is not None, process_id is not None]
    if any(given) and not all(given):
        raise ValueError("coordinator_address, num_processes and process_id go together: "
                         "give all three, or none to let JAX read them from the environment")
    if all(given):
        if not isinstance(num_processes, int) or num_processes < 1:
            raise ValueError(f"num_processes={num_processes!r} must be an int >= 1")
        if not isinstance(process_id, int) or not 0 <= process_id < num_processes:
            raise ValueError(f"process_id={process_id!r} must be an int in [0, {num_processes})")
    if not isinstance(timeout, int) or timeout < 1:
        raise ValueError(f"timeout={timeout!r} must be an int >= 1 (seconds)")
    try:
        jax.distributed.initialize(coordinator_address, num_processes, process_id,
                                   initialization_timeout=timeout,
                                   heartbeat_timeout_seconds=timeout)
    except ValueError as err:
        if any(given) or "coordinator_address" not in str(err):
            raise
        raise ValueError("--distributed found no scheduler's environment here (SLURM, Open "
                         "MPI, a TPU pod slice or Kubernetes' variables): for a run by hand "
                         "start every process with --coordinator_address=HOST:PORT (process "
                         "0's) --num_processes=N --process_id=I instead of --distributed, "
                         "or drop --distributed for one process") from None


PEER_FAILURES = ("Gloo", "Connection reset by peer", "Connection refused", "NCCL",
                 "stopped sending heartbeats", "DEADLINE_EXCEEDED")


class PeerLost(RuntimeError):
    """A collective with another process failed: that process ended or is unreachable. The
    binaries exit with code 5, as when JAX's heartbeat check finds it (supervise.py)."""


def peer_lost(err: BaseException):
    """PeerLost for an error of a cross-process collective in a multi-process run (the gloo,
    NCCL or coordination-service failures JAX raises when a peer is gone), else None."""
    text = str(err)
    if jax.process_count() > 1 and any(s in text for s in PEER_FAILURES):
        first = next(line for line in text.splitlines() if line.strip())
        return PeerLost(f"a collective with another process failed ({first[:200]}): a peer "
                        "process ended or is unreachable, so this one stops too. The last "
                        "checkpoint is kept: restart every process with the same command to "
                        "resume")
    return None


def is_primary() -> bool:
    """True on the process that writes files (process 0; the only one in a plain run)."""
    return jax.process_index() == 0


def any_process(flag: bool) -> bool:
    """True when `flag` is set on any process (e.g. one host got SIGTERM): every process then
    takes the same branch, so none waits forever in the next round's collective."""
    if jax.process_count() == 1:
        return bool(flag)
    from jax.experimental import multihost_utils

    return bool(np.any(multihost_utils.process_allgather(np.asarray(flag, np.int32))))


def barrier(name: str) -> None:
    """Wait until every process reaches the barrier `name` (nothing in a plain run)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def _allgather_text(text: str) -> list[str]:
    """Every process's `text`, in process order (two allgathers: lengths, padded bytes)."""
    from jax.experimental import multihost_utils

    data = np.frombuffer(text.encode(), np.uint8)
    lengths = np.ravel(multihost_utils.process_allgather(np.asarray(data.size, np.int32)))
    padded = np.zeros(int(lengths.max()), np.uint8)
    padded[:data.size] = data
    gathered = np.asarray(multihost_utils.process_allgather(padded))
    return [bytes(row[:n]).decode() for row, n in zip(gathered, lengths)]


def agree(config: dict, workdir: str) -> None:
    """ValueError on every process, naming the difference, unless every process of a
    multi-process run was given the same config and workdir (each derives the rounds from
    them: any difference would be different numbers, an abort, or a checkpoint waiting
    forever for a peer writing elsewhere). Nothing in a plain run."""
    if jax.process_count() == 1:
        return
    mine = {"workdir": os.path.abspath(workdir), "config": config}
    everyone = [json.loads(t) for t in _allgather_text(json.dumps(mine, sort_keys=True))]
    first = everyone[0]
    problems = []
    for p, other in enumerate(everyone[1:], start=1):
        if other["workdir"] != first["workdir"]:
            problems.append(f"process {p}: --workdir={other['workdir']!r} (process 0: "
                            f"{first['workdir']!r})")
        keys = sorted(k for k in set(first["config"]) | set(other["config"])
                      if first["config"].get(k) != other["config"].get(k))
        problems += [f"process {p}: config.{k}={other['config'].get(k)!r} (process 0: "
                     f"{first['config'].get(k)!r})" for k in keys]
    if problems:
        raise ValueError("the processes of this run were given different settings ("
                         + "; ".join(problems[:5]) + (", ..." if len(problems) > 5 else "")
                         + "): start every process with the same --config and --workdir")


def check_shared_workdir(workdir: str) -> None:
    """ValueError on every process unless every process sees the workdir process 0 made (a
    node-local folder of the same name on another host is not it): process 0 writes a token
    there, the others read it back. Call after process 0 has made the workdir."""
    if jax.process_count() == 1:
        return
    path = os.path.join(workdir, ".process_0_token")
    token = secrets.token_hex(8) if is_primary() else ""
    if is_primary():
        with open(path, "w") as f:
            f.write(token)
    token = _allgather_text(token)[0]  # also the barrier: process 0 has written it
    try:
        with open(path) as f:
            seen = f.read() == token
    except OSError:
        seen = False
    missing = [p for p, ok in enumerate(_allgather_text("1" if seen else "0")) if ok != "1"]
    if missing:
        raise ValueError(f"process(es) {', '.join(map(str, missing))} do not see the workdir "
                         f"{os.path.abspath(workdir)!r} that process 0 writes (a node-local "
                         "folder?): every process must be given one folder they all share "
                         "(checkpoints are written by all of them together)")
