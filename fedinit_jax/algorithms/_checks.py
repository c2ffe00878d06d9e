"""Hyperparameter checks shared by the algorithm builders: a clear ValueError, never a NaN."""
import math

import numpy as np


def check_range(name: str, value, low=None, high=None, *, low_open=False, high_open=False):
    """ValueError unless `value` is a finite number in the given (half-)open range."""
    ok = (not isinstance(value, bool) and isinstance(value, (int, float, np.integer, np.floating))
          and math.isfinite(value) and abs(value) <= float(np.finfo(np.float32).max))
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value < high if high_open else value <= high
    if not ok:
        lo = "-inf" if low is None else f"{low}"
        hi = "inf" if high is None else f"{high}"
        interval = f"{'(' if low_open or low is None else '['}{lo}, {hi}{')' if high_open or high is None else ']'}"
        raise ValueError(f"{name}={value!r} must be a finite float32 number in {interval}")
