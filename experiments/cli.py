"""Command-line plumbing shared by the binaries: flag errors are one line and exit code 2."""
import sys

from absl import flags


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
