"""Multi-process runs on localhost: 2 processes x 1 CPU device (gloo collectives) compute what
1 process x 2 devices computes, resume exactly, and stop together on one process's SIGTERM."""
import json
import signal
import socket
import time

import pytest
from conftest import rows, train, without_timing

from fedinit_jax import distributed

# 4 clients per round, split 2 + 2 over the devices; SCAFFOLD + RI exercises every state slot
BASE = ["--config.num_clients=8", "--config.participation=0.5", "--config.local_epochs=1",
        "--config.eval_every=2", "--config.checkpoint_every=2", "--config.num_devices=2",
        "--config.algorithm=scaffold", "--config.beta=0.1"]
ONE_DEVICE_PER_PROCESS = {"XLA_FLAGS": "--xla_force_host_platform_device_count=1"}


def _free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def _launch(workdir, *overrides):
    """Both processes of a 2-process run (Popen objects)."""
    port = _free_port()
    return [train(workdir, *BASE, *overrides, f"--coordinator_address=localhost:{port}",
                  "--num_processes=2", f"--process_id={p}", wait=False,
                  env=ONE_DEVICE_PER_PROCESS) for p in range(2)]


def _finish(procs, timeout=240):
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [p.returncode for p in procs], outs


@pytest.fixture(scope="module")
def one_process(tmp_path_factory):
    """The reference: one process with two devices, 6 rounds."""
    workdir = tmp_path_factory.mktemp("one_process")
    result = train(workdir, *BASE, "--config.rounds=6",
                   env={"XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    assert result.returncode == 0, result.stderr
    return without_timing(rows(workdir))


def test_two_processes_equal_one_and_resume_exactly(tmp_path, one_process):
    codes, outs = _finish(_launch(tmp_path, "--config.rounds=4"))
    assert codes == [0, 0], outs
    assert without_timing(rows(tmp_path)) == one_process[:4]
    info = json.load(open(tmp_path / "run_info.json"))
    assert info["num_processes"] == 2 and info["num_devices"] == 2
    # extend to 6 rounds: both processes restore the round-4 checkpoint and go on
    codes, outs = _finish(_launch(tmp_path, "--config.rounds=6"))
    assert codes == [0, 0], outs
    assert without_timing(rows(tmp_path)) == one_process  # bit for bit


def test_sigterm_on_one_process_stops_both_at_the_same_round(tmp_path):
    procs = _launch(tmp_path, "--config.rounds=400", "--config.local_epochs=5")
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.time() + 200
    while time.time() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 2):
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)  # only the second process gets the signal
    codes, outs = _finish(procs)
    assert codes == [128 + signal.SIGTERM] * 2, outs
    done = rows(tmp_path)[-1]["round"]
    assert 2 <= done < 400
    saved = sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir() if p.name.isdigit())
    assert saved[-1] == done  # the checkpoint holds every round the metrics hold


def test_initialize_needs_all_three_arguments():
    with pytest.raises(ValueError, match="go together"):
        distributed.initialize("localhost:1234", None, 0)
    with pytest.raises(ValueError, match="process_id=2"):
        distributed.initialize("localhost:1234", 2, 2)
