"""Command-line plumbing shared by the binaries: flag errors are one line and exit code 2."""
import os
import sys

from absl import flags

DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"


def use_all_cpu_cores():
    """Ask XLA for one CPU device per core (unless XLA_FLAGS already sets a count), so that
    sharded client execution keeps every core busy. Must run before JAX is imported."""
    flags_now = os.environ.get("XLA_FLAGS", "")
    if DEVICE_COUNT_FLAG not in flags_now:
        os.environ["XLA_FLAGS"] = f"{flags_now} {DEVICE_COUNT_FLAG}={os.cpu_count() or 1}".strip()


def parse_flags(argv):
    """absl flag parsing whose errors print one line on stderr and exit with code 2."""
    try:
        return flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as err:
        message = str(err).splitlines()[0]
        if isinstance(err, (AttributeError, KeyError)):
            message = (f"unknown config key {message.strip(chr(34) + chr(39))}: see "
                       "experiments/configs/default.py")
        print(f"error: {message}", file=sys.stderr)
        sys.exit(2)
