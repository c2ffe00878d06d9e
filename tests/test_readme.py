"""The README's Python API example runs as written."""
import os
import re

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_python_example_runs(capsys):
    text = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    *rounds, params = capsys.readouterr().out.strip().splitlines()
    assert [int(line.split()[0]) for line in rounds] == list(range(20))  # t, loss, divergence
    losses = [float(line.split()[1]) for line in rounds]
    assert all(np.isfinite(losses)) and losses[-1] < losses[0] / 2  # the federation learns
    assert "'w'" in params and "'b'" in params  # the global model's params printed
