"""The README's Python API example runs as written; docs/usage.md's CIFAR-10 sample output is
the committed run's."""
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


def test_readme_sample_output_is_the_committed_run_of_its_command():
    """docs/usage.md's CIFAR-10 sample output is the binary's own lines for the committed run
    (studies/readme_cifar10_sample), whose config.json is what the documented command resolves
    to with the current configs (a new or changed field fails here: rerun the command and
    commit the run again). Running it here would cost a CIFAR-10 decode and training."""
    import json

    from experiments.configs import paper
    from fedinit_jax.experiment import outputs

    text = open(os.path.join(ROOT, "docs", "usage.md")).read()
    command = re.search(r"    TFDS_DATA_DIR=\.\./shared/tfds \.venv/bin/python -m experiments.train "
                        r"\\\n(.*?)\n\n", text, re.S).group(1)
    overrides = dict(re.findall(r"--config\.(\w+)=(\S+)", command))
    preset = re.search(r"paper\.py:(\S+)", command).group(1)
    sample = os.path.join(ROOT, "studies", "readme_cifar10_sample", "runs", "fedinit-s0")
    from fedinit_jax.experiment import resolve, saved_config

    want = resolve({**paper.get_config(preset).to_dict(),
                    **{k: type(paper.get_config(preset)[k])(v) for k, v in overrides.items()}})

    saved = saved_config(os.path.join(sample, "config.json"))
    shared = set(saved) & set(want)  # the fields that identify the run (a field added to the
    assert {k: saved[k] for k in shared} == {k: want[k] for k in shared}  # code since: not)
    assert {"algorithm", "dataset", "model", "rounds", "seed", "beta"} <= shared
    block = re.search(r"Its round lines and summary with the current code.*?```\n(.*?)```", text,
                      re.S).group(1)
    shown = block.strip().splitlines()
    rows = [json.loads(line) for line in open(os.path.join(sample, "metrics.jsonl"))]
    by_round = {r["round"]: r for r in rows}
    for line in shown[:-1]:
        assert line == outputs.line(by_round[int(line.split()[1])]), line
    summary = outputs.summary_line("done", rows, 0, len(rows), seconds=0)
    assert shown[-1] == summary.rsplit("; ", 1)[0] + "; ...", summary
