"""The sweep binary: cells done, refused when their workdir holds another config, a signal."""
import json
import os
import signal
import subprocess
import sys
import time

from conftest import ROOT

TINY = ["--config.rounds=2", "--config.num_clients=8", "--config.participation=0.5",
        "--config.local_epochs=1", "--config.eval_every=1", "--algorithms=fedavg,fedinit"]


def sweep(results, *flags, wait=True):
    cmd = [sys.executable, "-m", "experiments.sweep", "--config",
           "experiments/configs/default.py", f"--results={results}", *flags]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    if not wait:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def status(results):
    return json.load(open(os.path.join(results, "sweep_status.json")))


def test_cells_done_then_a_changed_config_is_refused_per_cell(tmp_path):
    first = sweep(tmp_path, *TINY)
    assert first.returncode == 0, first.stderr
    assert set(status(tmp_path).values()) == {"done"} and len(status(tmp_path)) == 2
    changed = sweep(tmp_path, *TINY, "--config.local_lr=0.05")
    assert changed.returncode == 1
    errors = changed.stderr.strip().splitlines()
    assert len(errors) == 2 and all("holds a run of a different config (local_lr: 0.1 -> "
                                    "0.05)" in line for line in errors), changed.stderr
    assert all(v.startswith("error:") for v in status(tmp_path).values())
    assert "0/2 cells done" in changed.stdout


def test_sigterm_stops_the_sweep_with_a_status(tmp_path):
    proc = sweep(tmp_path, *TINY, "--config.rounds=400", "--config.local_epochs=5",
                 "--config.checkpoint_every=0", wait=False)
    deadline = time.time() + 120
    cell = tmp_path / "fedavg-dir0.1-betadefault-E5-global-s0" / "metrics.jsonl"
    while time.time() < deadline and not cell.exists():
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "stopped" in status(tmp_path)["fedavg-dir0.1-betadefault-E5-global-s0"]
