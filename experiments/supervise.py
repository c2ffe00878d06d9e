"""A multi-process run's watchdog: a missing or dead peer ends every process in bounded time,
with one line and its own exit code.

JAX's distributed runtime already bounds both waits: a process that does not join within
`initialization_timeout` seconds, or stops sending heartbeats for `heartbeat_timeout_seconds`
(ended, killed, preempted, unreachable), makes every other process abort (SIGABRT) with a
C++ stack trace. The binaries set both to --distributed_timeout and run the training in a
child process under this supervisor, which passes the child's output through, forwards
SIGTERM / SIGINT to it (so the run checkpoints as usual), and turns that abort into one line
naming the missing processes and exit code exit_codes.PEER_LOST.
"""
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading

from experiments import exit_codes

CHILD_ENV = "FEDINIT_SUPERVISED"  # set in the child: it trains instead of supervising
FATAL = "Terminating process because the JAX distributed service detected fatal errors"


def is_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


def explain(stderr_text: str, timeout: float, num_processes) -> str:
    """One line for the child's fatal distributed error (its stderr)."""
    unhealthy = re.search(r"unhealthy \(stopped sending heartbeats\):\s*([\d,\s]+)",
                          stderr_text)
    if unhealthy:
        ids = ", ".join(re.findall(r"\d+", unhealthy.group(1)))
        return (f"process {ids} of {num_processes} stopped sending heartbeats for "
                f"{timeout:g} s (ended, killed, preempted or unreachable); this process "
                "stopped too. The last checkpoint is kept: restart every process with the same "
                "command to resume")
    if "DEADLINE_EXCEEDED" in stderr_text:
        return (f"not every one of the {num_processes} processes joined within {timeout:g} s "
                "(--distributed_timeout): start all of them with the same "
                "--coordinator_address and --num_processes (process 0 is the coordinator)")
    status = re.search(r"absl::Status: (.*)", stderr_text)
    return ("the distributed runtime stopped this process: "
            + (status.group(1) if status else "see the other processes' logs"))


def _die_with_parent():
    """In the child: SIGKILL when the supervisor dies (e.g. a scheduler's SIGKILL), so that
    no orphan keeps training (Linux prctl PR_SET_PDEATHSIG; elsewhere nothing)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def run_child(timeout: float, num_processes) -> int:
    """Run this same command as the child; return the exit code to exit with."""
    env = {**os.environ, CHILD_ENV: "1"}
    child = subprocess.Popen([sys.executable, *sys.orig_argv[1:]], env=env,
                             stderr=subprocess.PIPE, text=True, errors="replace",
                             preexec_fn=_die_with_parent)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda number, _frame: child.send_signal(number))
    captured = []

    def pump():  # the child's stderr through, except the runtime's fatal report
        fatal = False
        for line in child.stderr:
            fatal = fatal or FATAL in line or bool(re.match(r"[EF]\d{4} ", line))
            if fatal:
                captured.append(line)
            else:
                sys.stderr.write(line)
                sys.stderr.flush()

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    code = child.wait()
    reader.join(timeout=10)
    text = "".join(captured)
    if FATAL in text:
        print(f"error: distributed: {explain(text, timeout, num_processes)}", file=sys.stderr)
        return exit_codes.PEER_LOST
    sys.stderr.write(text)  # a log line that was not fatal after all
    return code if code >= 0 else 128 - code
