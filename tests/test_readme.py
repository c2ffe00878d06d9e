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
    values = [[float(v) for v in line.split()[1:]] for line in rounds]
    assert np.isfinite(values).all() and len(values[0]) == 2  # train_loss, divergence
    assert "'w'" in params and "'b'" in params  # the global model's params printed
