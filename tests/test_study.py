"""The committed CPU CIFAR-10 study (studies/cpu_cifar10): complete, and the tables of
docs/study.md are exactly what experiments/report.py regenerates from it (no training here);
the authors' configuration (studies/cpu_cifar10_authors_e5): all 9 cells finished, and its
committed report's tables are the regenerated ones."""
import itertools
import json
import os
import re

import pytest

from experiments.report import report

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULTS = os.path.join(ROOT, "studies", "cpu_cifar10", "runs")
# the study's report options: eval every 5 of 60 rounds; window 3 evaluations, last 10%
WINDOW, LAST = 3, 6
SEEDS = (0, 1, 2)


def _beta(alg):
    """An algorithm's default beta as its cells' names hold it."""
    return "0.1" if alg == "fedinit" else "0"


def _cells():
    """Every cell studies/cpu_cifar10/run.sh runs (its sweep cell names)."""
    names = []
    for alg, alpha in itertools.product(("fedavg", "fedinit", "fedadam", "fedsam"), (0.1, 0.6)):
        names.append(f"{alg}-dir{alpha:g}-beta{_beta(alg)}-E1-global")
    for alg, alpha in itertools.product(("scaffold", "feddyn", "fedcm"), (0.1, 0.6)):
        names += [f"{alg}-dir{alpha:g}-beta{beta:g}-E1-global" for beta in (0, 0.1)]
        names.append(f"{alg}-dir{alpha:g}-beta0.1-E1-start")
    names += [f"fedinit-dir{alpha:g}-beta0.1-E1-start" for alpha in (0.1, 0.6)]
    names += [f"fedavg-dir0.1-beta{b:g}-E1-global" for b in (-0.2, -0.1, 0.05, 0.2)]
    cells = [f"{n}-s{s}" for n in names for s in SEEDS]
    for epochs in (2, 5):  # global vs start across local epochs
        cells += [f"{alg}-dir0.1-beta{_beta(alg)}-E{epochs}-{delta}-s{s}" for alg, delta in
                  (("fedavg", "global"), ("fedinit", "global"), ("fedinit", "start"))
                  for s in SEEDS]
    return cells


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    return report([RESULTS], str(tmp_path_factory.mktemp("report")), window=WINDOW, last=LAST,
                  with_figures=False)


def _finished_config(folder):
    """The cell's config.json, once its metrics.jsonl is checked to hold rounds 1..rounds."""
    from fedinit_jax.experiment import saved_config

    config = saved_config(os.path.join(folder, "config.json"))
    rows = [json.loads(line) for line in open(os.path.join(folder, "metrics.jsonl"))]
    assert [r["round"] for r in rows] == list(range(1, config["rounds"] + 1)), folder
    return config


def test_every_cell_finished_with_its_config():
    for name in _cells():
        config = _finished_config(os.path.join(RESULTS, name))
        assert (config["model"], config["model_width"], config["num_clients"],
                config["participation"], config["batch_size"]) == ("cnn", 0.25, 100, 0.1, 50)
        alpha = config["task"]["images"]["dirichlet_alpha"]
        assert f"-s{config['seed']}" in name and f"-dir{alpha:g}-" in name


def _assert_accuracy_tables_in(text, document):
    """The report `text`'s first two tables, accuracy (Table 4 shape) and with/without RI
    (Table 6 shape), appear verbatim in `document`, over 3 seeds and no unfinished cell."""
    tables = re.findall(r"((?:^\|.*\|\n)+)", text + "\n", re.M)
    assert len(tables) >= 2
    for table in tables[:2]:
        assert table in document, table.splitlines()[0]
    assert "n=3" in tables[0] and "unfinished" not in text


def test_study_tables_are_the_regenerated_ones(text):
    _assert_accuracy_tables_in(text, open(os.path.join(ROOT, "docs", "study.md")).read())


def test_authors_preset_is_the_authors_configuration():
    """cpu_cifar10.py:authors_e5 validates and differs from the study preset exactly in what
    the authors ran and the study scaled down."""
    from experiments.configs import cpu_cifar10
    from fedinit_jax import experiment

    study, authors = cpu_cifar10.get_config().to_dict(), cpu_cifar10.get_config("authors_e5")
    experiment.validate(authors)
    authors = authors.to_dict()
    differ = {k: authors[k] for k in authors if authors[k] != study[k]}
    assert differ == {"model_width": 1.0, "participation_mode": "bernoulli",
                      "local_epochs": 5, "task": {**study["task"], "images": {
                          **study["task"]["images"], "augment": True}}}
    with pytest.raises(ValueError, match="preset"):
        cpu_cifar10.get_config("gpu")


AUTHORS = os.path.join(ROOT, "studies", "cpu_cifar10_authors_e5", "runs")


def test_committed_authors_cells_finished_with_the_preset():
    """Every cell studies/cpu_cifar10_authors_e5/run.sh runs is committed, ran all its
    rounds, and differs from the preset only in the cell's own fields."""
    from experiments.configs import cpu_cifar10
    from fedinit_jax.experiment import resolve

    preset = cpu_cifar10.get_config("authors_e5").to_dict()
    expected = {f"{alg}-dir0.1-beta{_beta(alg)}-E5-{delta}-s{s}" for s in SEEDS
                for alg, delta in (("fedavg", "global"), ("fedinit", "global"),
                                   ("fedinit", "start"))}
    committed = [n for n in os.listdir(AUTHORS)
                 if os.path.exists(os.path.join(AUTHORS, n, "config.json"))]
    assert set(committed) == expected, set(committed) ^ expected
    for name in committed:
        config = _finished_config(os.path.join(AUTHORS, name))
        want = resolve({**preset, "algorithm": config["algorithm"]})  # its defaults
        differ = {k for k in preset if k in config and config[k] != want[k]}  # rounds too
        assert differ <= {"algorithm", "delta_from", "seed"}, (name, differ)
        assert name == (f"{config['algorithm']}-dir0.1-beta{_beta(config['algorithm'])}-E5-"
                        f"{config['delta_from']}-s{config['seed']}")


def test_authors_report_tables_are_the_regenerated_ones(tmp_path):
    """report/tables.md's accuracy and with/without-RI tables are what its run.sh's
    report command regenerates from the committed cells."""
    text = report([AUTHORS], str(tmp_path), window=WINDOW, last=LAST, with_figures=False)
    _assert_accuracy_tables_in(text, open(os.path.join(AUTHORS, os.pardir, "report", "tables.md")).read())


def test_the_study_script_sees_its_committed_cells_done():
    """The main grid of run.sh, listed by the sweep on the committed folder: every
    cell done (exit 0) by its metrics (no checkpoint is committed)."""
    import subprocess
    import sys

    listed = subprocess.run(
        [sys.executable, "-m", "experiments.sweep", "--config",
         "experiments/configs/cpu_cifar10.py", f"--results={RESULTS}",
         "--algorithms=fedavg,fedinit,fedadam,fedsam", "--dirichlet_alphas=0.1,0.6",
         "--seeds=0", "--list"], cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert listed.returncode == 0, listed.stdout + listed.stderr
    lines = [line.split("\t") for line in listed.stdout.splitlines()]
    assert len(lines) == 8 and all(state == "done" for _, _, state in lines), lines
    assert all(os.path.isdir(os.path.join(RESULTS, name)) for _, name, _ in lines), lines
