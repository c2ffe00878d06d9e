"""--workers=P: P cells at once, each in its own process (`--cell=I`): on a GPU host each
pinned to one GPU (CUDA_VISIBLE_DEVICES), on CPU each with its share of the cores (its own
XLA CPU devices and CPU affinity)."""
import os
import signal
import subprocess
import sys
import time

from absl import flags

from experiments import exit_codes

FLAGS = flags.FLAGS


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
    return [sys.executable, "-m", "experiments.sweep", *argv, f"--cell={index}", "--nosummary",
            "--prefix_lines"]


def with_workers(grid, chosen, stop) -> dict:
    """Run the chosen cells in FLAGS.workers processes at once (each `--cell=I`)."""
    pending, running, outcome = list(chosen), {}, {}
    codes = {exit_codes.DONE: "done", exit_codes.DIVERGED: "diverged",
             exit_codes.ELSEWHERE: "running elsewhere", exit_codes.REQUEUE: "stopped"}
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
                    outcome[i] = codes.get(proc.returncode, "failed")
                    if proc.returncode > 128:
                        outcome[i] = "stopped"
                    del running[i]
            if stop and not running:
                stop_if(stop, f"with {len(pending)} cells not started")
            time.sleep(0.2)
    finally:
        for _, proc in running.values():  # a stop: every worker checkpoints and ends
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for _, proc in running.values():
            proc.wait()
    return outcome


def stop_if(stop, where):
    if stop:
        print(f"stopped by {signal.Signals(stop[0]).name} {where}; rerun the same command "
              "to continue", file=sys.stderr)
        sys.exit(exit_codes.REQUEUE)
