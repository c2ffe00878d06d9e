"""What a run keeps on disk, and the rules that keep it whole.

    <workdir>/.lock           held (flock) by the process that writes the workdir
    <workdir>/config.json     the resolved config (atomic write)
    <workdir>/run_info.json   sizes, devices, costs (atomic write)
    <workdir>/metrics.jsonl   one JSON row per round, rounds 1, 2, ... in order
    <workdir>/train.log       every line the run printed, with its UTC time, appended across
                              resumes; each run ends with one "summary:" line
    <workdir>/tb/             TensorBoard scalars, written synchronously
    <workdir>/checkpoints/    orbax (checkpoint.py)

Lock: `fcntl.flock` on <workdir>/.lock, taken before anything is written and held until the
process ends. The kernel drops it when the holder dies, SIGKILL included, so a killed run's
workdir resumes without cleanup. flock was chosen over a PID file (stale after a kill,
ambiguous across hosts) and over POSIX fcntl locks (released when any descriptor of the file
is closed, and not exclusive within one process). On Linux NFS clients flock is carried
out as a byte-range lock on the server, so it excludes processes on other hosts too; in a
multi-process run process 0 holds it. A filesystem that supports no locks at all (some FUSE
mounts) answers ENOLCK/ENOTSUP: then the run goes on with a warning, unprotected.

Metrics: only a last line without its newline (a write cut by a kill) is dropped. Any other
damage (a line that is not a JSON row, rounds missing or out of order) stops the resume with
one line naming the file and the line, and the file is left as it is: no row is ever dropped
silently.
"""
import contextlib
import errno
import fcntl
import json
import os
import re
import socket
import threading
import time

__all__ = ["METRICS", "WorkdirError", "WorkdirBusy", "WriteError", "describe_write_error", "Lock",
           "refuse_if_busy", "holder", "reporting", "atomic_write", "write_json", "read_json",
           "read_metrics", "rewrite_metrics", "MetricsLog", "TRAIN_LOG", "EarlyLog", "TrainLog",
           "ScalarLog"]

METRICS = "metrics.jsonl"


class WorkdirError(ValueError):
    """The workdir cannot be used as it is (busy, damaged, of another run): exit code 2."""


class WorkdirBusy(WorkdirError):
    """Another process holds the workdir's lock (it is running there): exit code 2; a sweep
    calls the cell "running elsewhere"."""


class WriteError(RuntimeError):
    """Writing into the workdir failed (disk full, quota, I/O error): exit code 4."""


def describe_write_error(path: str, err: BaseException) -> str:
    """"no space left on device writing PATH": the OS's reason, also when a library (orbax,
    tensorstore) wrapped the OSError in its own exception."""
    code = err.errno if isinstance(err, OSError) else None
    if code is None:
        found = re.search(r"os_error_code='?(\d+)", str(err))
        code = int(found.group(1)) if found else None
    if code:
        reason = os.strerror(code)
    else:
        text = str(err).splitlines()[0][:200] if str(err) else ""
        reason = f"{type(err).__name__}: {text}"
    return f"{reason[0].lower()}{reason[1:]} writing {path}"


class Lock:
    """Exclusive use of a workdir by this process (see the module docstring)."""

    def __init__(self, workdir: str, log=print):
        self.path = os.path.join(workdir, ".lock")
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                holder = _holder_text(self._fd)
                os.close(self._fd)
                raise _busy(workdir, holder) from None
            if err.errno in (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS):
                log(f"warning: {workdir!r} supports no file locks; nothing stops a second "
                    "process from writing it")
                return
            os.close(self._fd)
            raise
        os.ftruncate(self._fd, 0)
        os.pwrite(self._fd, f"process {os.getpid()} on {socket.gethostname()}\n".encode(), 0)

    def release(self):
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None


def _busy(workdir, holder) -> WorkdirBusy:
    return WorkdirBusy(f"workdir {workdir!r} is in use by {holder}; wait for it to end or use "
                       "another workdir")


def refuse_if_busy(workdir: str) -> None:
    """WorkdirBusy, as Lock raises it, when another process holds the workdir now: asked
    (read only, nothing written) before a run loads data and compiles, so that a workdir in
    use is refused at once; Lock, taken after, still decides."""
    held_by = holder(workdir)
    if held_by:
        raise _busy(workdir, held_by)


def _holder_text(fd) -> str:
    """What the lock's holder wrote into the lock file ("process N on HOST")."""
    return os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"


def holder(workdir: str):
    """Who holds the workdir's lock ("process N on HOST"), or None when nobody does (or the
    workdir has no lock file yet). Takes and drops the lock to ask: never blocks."""
    path = os.path.join(workdir, ".lock")
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError as err:
        if err.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return _holder_text(fd)
        return None  # no locks on this filesystem: nothing to ask
    finally:
        os.close(fd)  # drops the shared lock, if taken
    return None


@contextlib.contextmanager
def reporting(path: str):
    """An OSError (disk full, quota, I/O) inside becomes WriteError naming `path`."""
    try:
        yield
    except OSError as err:
        raise WriteError(describe_write_error(path, err)) from None


def atomic_write(path: str, write) -> None:
    """write(f) into a temporary file, then rename it over path: a reader sees the old file or
    the new one, never half of it; WriteError naming the file when it fails. The temporary
    file is this process's and thread's own, so writers racing on one path (two sweeps
    recording one cell's status) each rename a whole file: the last one wins."""
    tmp = f"{path}.{os.getpid()}-{threading.get_ident()}.tmp"
    with reporting(path):
        try:
            with open(tmp, "w") as f:
                write(f)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):  # a failed write leaves no temporary file behind
                os.remove(tmp)


def write_json(path: str, obj) -> None:
    """Write JSON atomically; WriteError when it fails."""
    atomic_write(path, lambda f: json.dump(obj, f, indent=2, sort_keys=True))


def read_json(path: str) -> dict:
    """A JSON object from path; WorkdirError naming the file when it is damaged."""
    try:
        with open(path) as f:
            obj = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise WorkdirError(f"{path} cannot be read ({err}); restore it or use a new "
                           "workdir") from None
    if not isinstance(obj, dict):
        raise WorkdirError(f"{path} holds no JSON object; restore it or use a new workdir")
    return obj


def read_metrics(workdir: str, upto_round=None) -> list[dict]:
    """The rows of metrics.jsonl, rounds 1..n in order (optionally only those <= upto_round).

    A last line cut by a kill is dropped; any other damage raises WorkdirError naming the
    file and line (module docstring).
    """
    path = os.path.join(workdir, METRICS)
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    rows = []
    for number, line in enumerate(lines[:-1], start=1):  # lines[-1]: after the last newline
        try:
            row = json.loads(line)
            ok = isinstance(row, dict) and row.get("round") == number
        except (UnicodeDecodeError, json.JSONDecodeError):
            ok = False
        if not ok:
            raise WorkdirError(
                f"{path} line {number} is damaged or out of order (expected round "
                f"{number}); rows after it would be lost: restore the file, or move it "
                "away together with checkpoints/ to recompute every round")
        if upto_round is None or row["round"] <= upto_round:
            rows.append(row)
    return rows


def rewrite_metrics(workdir: str, rows) -> None:
    """metrics.jsonl holding exactly `rows` (atomic)."""
    atomic_write(os.path.join(workdir, METRICS),
                 lambda f: f.writelines(json.dumps(row) + "\n" for row in rows))


def _close(handle) -> None:
    """Close a log; a failure to flush was already reported by its last write."""
    try:
        handle.close()
    except OSError:
        pass


class MetricsLog:
    """Appends one row per round to metrics.jsonl, flushed each round."""

    def __init__(self, workdir: str):
        self.path = os.path.join(workdir, METRICS)
        self._file = open(self.path, "a")

    def write(self, row: dict) -> None:
        with reporting(self.path):
            self._file.write(json.dumps(row) + "\n")
            self._file.flush()

    def close(self):
        _close(self._file)  # an error was reported by write()


TRAIN_LOG = "train.log"


def _utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class EarlyLog:
    """A run's lines before its workdir may be written (loading, compiling: a bad config
    writes nothing): echoed at once, kept with their UTC time for train.log."""

    def __init__(self, echo=print):
        self.echo = echo
        self.lines = []

    def __call__(self, line: str, echo: bool = True) -> None:
        if echo:
            self.echo(line)
        self.lines.append((_utc_now(), line))


class TrainLog:
    """A run's lines: to `echo` (stdout, a sweep's prefixed print) and appended to
    <workdir>/train.log with their UTC time, flushed each line; so a batch task's log file
    and the workdir both say what the run did. Called with echo=False a line goes to the
    file only (the rounds under a progress bar). `early`: an EarlyLog whose lines come
    first."""

    def __init__(self, workdir: str, early: EarlyLog):
        self.path = os.path.join(workdir, TRAIN_LOG)
        self.echo = early.echo
        with reporting(self.path):
            unclean = _ended_without_summary(self.path)
            self._file = open(self.path, "a")
            if unclean:
                self._file.write(f"{_utc_now()} note: the previous run in this workdir ended "
                                 "without its summary line (killed, or its machine lost): "
                                 "the rounds after its last checkpoint are run again below\n")
            self._file.writelines(f"{stamp} {line}\n" for stamp, line in early.lines)
            self._file.flush()

    def __call__(self, line: str, echo: bool = True) -> None:
        if echo:
            self.echo(line)
        with reporting(self.path):
            self._file.write(f"{_utc_now()} {line}\n")
            self._file.flush()

    def close(self):
        _close(self._file)


def _ended_without_summary(path: str) -> bool:
    """Whether train.log exists and its last line is not a run's summary line."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 4096))
            lines = f.read().decode(errors="replace").strip().splitlines()
    except OSError:
        return False
    return bool(lines) and " summary: " not in lines[-1]


class ScalarLog:
    """TensorBoard scalars written in the calling thread (no writer thread that can die and
    block the loop). `start` purges the steps after it from earlier event files, so rounds
    redone after a resume are shown once."""

    def __init__(self, logdir: str, start: int = 0):
        from tensorboardX.event_file_writer import EventsWriter
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.summary import scalar

        self.path = logdir
        self._event, self._scalar = Event, scalar
        with reporting(logdir):
            os.makedirs(logdir, exist_ok=True)
            self._writer = EventsWriter(os.path.join(logdir, "events"))
            if start:
                self._writer.write_event(Event(step=start + 1, wall_time=time.time(),
                                               session_log=SessionLog(status=SessionLog.START)))

    def write(self, step: int, row: dict) -> None:
        with reporting(self.path):
            for name, value in row.items():
                self._writer.write_event(self._event(
                    step=step, wall_time=time.time(), summary=self._scalar(name, value)))
            self._writer.flush()

    def close(self):
        _close(self._writer)
