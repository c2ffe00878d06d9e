"""The README's Python API example runs as written."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_readme_python_example_runs(capsys):
    text = open(os.path.join(ROOT, "README.md")).read()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    exec(compile(block, "README.md", "exec"), {})
    lines = capsys.readouterr().out.strip().splitlines()
    first, last = float(lines[0].split()[1]), float(lines[-2].split()[1])
    assert len(lines) == 21 and last < first  # 20 rounds printed, and the loss went down
