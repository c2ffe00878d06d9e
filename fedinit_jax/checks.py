"""The one validation layer: every bad value gets ValueError("<name>=<value>: <what is
allowed>") before any compute is spent.

The builders check their hyperparameters with it (`beta=`, `rho=`), `with_runtime` its
options, and `experiment.validate` every config field under the name `config.<field>`; the
allowed values are spelled once, next to the code that uses them (DELTA_FROM,
CLIENT_STATE_DTYPES, execution.STRATEGIES, ...).
"""
import math

import numpy as np

FLOAT32_MAX = float(np.finfo(np.float32).max)


def fail(name: str, value, allowed: str):
    raise ValueError(f"{name}={value!r}: {allowed}")


def check_choice(name: str, value, allowed) -> None:
    """ValueError unless value is one of `allowed`."""
    if isinstance(value, bool) or value not in allowed:
        fail(name, value, f"allowed: {', '.join(str(a) for a in allowed)}")


def check_number(name: str, value, low=None, high=None, *, low_open=False, high_open=False,
                 integer=False, optional=False) -> None:
    """ValueError unless value is a finite number (an int if `integer`; else one float32 can
    hold, as the rounds compute in float32) in the given (half-)open range; None passes
    when `optional`."""
    if value is None and optional:
        return
    if isinstance(value, np.ndarray) and value.ndim == 0:  # np.array(0.1): a number too
        value = value[()]
    kind = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    if isinstance(value, bool) or not isinstance(value, kind) or not math.isfinite(value):
        fail(name, value, f"must be a finite {'int' if integer else 'number'}")
    if not integer and abs(value) > FLOAT32_MAX:
        fail(name, value, f"is inf in float32 (the rounds compute in float32: |x| <= "
             f"{FLOAT32_MAX:.4g})")
    if low is not None and (value <= low if low_open else value < low):
        fail(name, value, f"must be {'>' if low_open else '>='} {low}")
    if high is not None and (value >= high if high_open else value > high):
        fail(name, value, f"must be {'<' if high_open else '<='} {high}")


def require(module: str, purpose: str):
    """The module, imported; or ImportError saying what needs it and which extra brings it
    (the core installs without the experiment dependencies)."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ImportError(f"{purpose} needs {module.split('.')[0]} ({err}): pip install "
                          "'fedinit_jax[experiments]'") from None
