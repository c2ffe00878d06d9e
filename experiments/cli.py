"""Command-line plumbing shared by the binaries: flag errors are one line and exit code 2."""
import difflib
import os
import re
import sys

from absl import flags

from experiments import exit_codes

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# how long a collective between XLA CPU devices waits for all of them before XLA aborts the
# process (XLA's default: 40 s); a device thread starved on an oversubscribed host (other
# jobs, nice) arrives late, and a run must not die of it
COLLECTIVE_TIMEOUT_FLAG = "--xla_cpu_collective_call_terminate_timeout_seconds"
COLLECTIVE_TIMEOUT_SECONDS = 600


def cores() -> int:
    """The cores this process may run on (its affinity: taskset, a cpuset, a batch
    scheduler's binding), else the machine's."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # no affinity on this platform
        return os.cpu_count() or 1


def use_all_cpu_cores():
    """Ask XLA for one CPU device per core this process may use (unless XLA_FLAGS already
    sets a count), so that sharded client execution keeps every core busy, and let the
    collectives between those devices wait COLLECTIVE_TIMEOUT_SECONDS for a starved one
    (unless set). Must run before JAX is imported."""
    flags_now = os.environ.get("XLA_FLAGS", "")
    if DEVICE_COUNT_FLAG not in flags_now:
        flags_now = f"{flags_now} {DEVICE_COUNT_FLAG}={cores()}"
    if COLLECTIVE_TIMEOUT_FLAG not in flags_now:
        flags_now = f"{flags_now} {COLLECTIVE_TIMEOUT_FLAG}={COLLECTIVE_TIMEOUT_SECONDS}"
    os.environ["XLA_FLAGS"] = flags_now.strip()


def check_xla_flags() -> None:
    """Exit 2 naming the flag when XLA_FLAGS holds one XLA does not know (XLA itself aborts
    the process at its first device, exit 1). Probed in a child process on the CPU (~1 s)
    once per XLA_FLAGS value, remembered under $XDG_CACHE_HOME/fedinit_jax/xla_flags."""
    import hashlib
    import subprocess

    value = os.environ.get("XLA_FLAGS", "").strip()
    if not value:
        return
    cache = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"),
                         "fedinit_jax", "xla_flags")
    marker = os.path.join(cache, hashlib.sha256(value.encode()).hexdigest()[:32])
    if os.path.exists(marker):
        return
    try:
        probe = subprocess.run([sys.executable, "-c", "import jax; jax.devices()"],
                               env={**os.environ, "JAX_PLATFORMS": "cpu"}, text=True,
                               capture_output=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired):
        return  # no verdict: the run itself will say
    unknown = re.search(r"Unknown flags? in XLA_FLAGS: (.*)", probe.stderr)
    if probe.returncode and unknown:
        _fail(f"XLA_FLAGS={value!r}: XLA does not know {unknown.group(1).strip()}; remove it "
              "(XLA's flags: https://github.com/openxla/xla/blob/main/xla/debug_options_flags.cc)")
    if probe.returncode == 0:
        try:
            os.makedirs(cache, exist_ok=True)
            open(marker, "w").close()
        except OSError:
            pass


def one_line(err: BaseException) -> str:
    """An exception's message and its causes folded into one line."""
    parts = []
    while err is not None:
        text = " ".join(line.strip() for line in str(err).splitlines() if line.strip())
        if isinstance(err, SyntaxError) and err.filename:
            text = f"{err.filename} line {err.lineno}: {err.msg}"
        if text and not any(text in part for part in parts):
            parts.append(text)
        err = err.__cause__ or (None if err.__suppress_context__ else err.__context__)
    return ": ".join(parts) or "invalid flags"


def _fail(message: str):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(exit_codes.BAD_INPUT)


def _describe(err: BaseException) -> str:
    if isinstance(err, (AttributeError, KeyError)):  # ml_collections: a field not in config
        text = str(err)
        key = re.search(r"\w+", text)
        key = key.group(0) if key else text
        close = re.findall(r'Did you mean \\?"(\w+)\\?"', text) or difflib.get_close_matches(
            key, _config_fields(), n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        return (f"unknown config key {key!r}{hint} (every field: "
                "experiments/configs/default.py)")
    text = one_line(err)
    if "Traceback (most recent call last)" in text:  # a config file's own error, embedded
        raised = re.findall(r"(?:^|\s)(\w+(?:Error|Exception)): (.*?)(?=\s\w+(?:Error|"
                            r"Exception): |$)", text)
        if raised:
            text = raised[-1][1]
    return text


def _config_fields():
    from experiments.configs import default

    return list(default.get_config().keys())


def define_config(default: str, help_text: str):
    """--config (an ml_collections config file): ml_collections reads --config.FIELD
    overrides from sys.argv when the flag is defined, so their errors are caught here too."""
    from ml_collections import config_flags

    try:
        config_flags.DEFINE_config_file("config", default, help_text, lock_config=True)
    except Exception as err:  # noqa: BLE001 - a config file may raise anything while loaded
        _fail(f"config: {_describe(err)}")


# --config.FIELD=None (or none): the field's "off" / "default" value, which ml_collections
# cannot parse for a number field
NONE_OVERRIDE = re.compile(r"--config\.(\w+)=(?:None|none)")


def _set_none(config, field):
    if field not in config:
        _fail(_describe(KeyError(field)))
    try:
        setattr(config, field, None)
    except TypeError:
        _fail(f"config.{field}=None: this field takes a value, not None (its default: "
              f"{config[field]!r})")


def parse_flags(argv):
    """absl flag parsing whose errors print one line on stderr and exit with code 2.

    The config file is loaded and its --config.FIELD overrides applied here (ml_collections
    does it lazily, on first use), so a missing or broken config file, an unknown field or a
    bad value is reported before any work starts."""
    files = [a for a in argv[1:] if a == "--config" or a.startswith("--config=")]
    if len(files) > 1:
        _fail(f"--config given {len(files)} times: one config file per run (change its fields "
              "with --config.FIELD=VALUE)")
    nones = [a for a in argv[1:] if NONE_OVERRIDE.fullmatch(a)]
    argv = [a for a in argv if a not in nones]
    try:
        remaining = flags.FLAGS(argv)
        if "config" in flags.FLAGS:
            flags.FLAGS.config.to_dict()  # loads the file, applies the overrides
            for arg in nones:
                _set_none(flags.FLAGS.config, NONE_OVERRIDE.fullmatch(arg).group(1))
        return remaining
    except flags.Error as err:
        _fail(_describe(err))
    except ZeroDivisionError as err:  # a field computed from another that is 0
        zeros = [a for a in argv[1:] if re.fullmatch(r"--config\.\w+=0+(\.0*)?", a)]
        _fail(f"config: {err} computing a field from {', '.join(zeros) or 'another field'}"
              + (": num_clients must be at least 1" if any("num_clients" in a for a in zeros)
                 else ""))
    except Exception as err:  # noqa: BLE001 - a config file may raise anything while loaded
        _fail(f"config: {_describe(err)}")


def refuse_epochs_beside_steps(argv, config) -> None:
    """--config.local_epochs given while local_steps > 0 (which runs that many steps and
    ignores local_epochs): refused naming both, instead of recording an epoch count that
    never ran."""
    epochs = [a for a in argv[1:] if a.startswith("--config.local_epochs=")]
    if epochs and config.get("local_steps"):
        _fail(f"{epochs[-1]} with config.local_steps={config.local_steps}: local_steps > 0 "
              "runs that many local steps and ignores local_epochs; set one of them "
              "(--config.local_steps=0 for epochs)")
