"""The committed cross-device studies (studies/cross_device_*): the tables of
docs/study_cross_device.md are exactly what experiments/cross_device_report.py regenerates from
the committed cells (no training here), every cell's seed is its folder's, and the report's
reading of how a run ended follows the runaway rule."""
import importlib.util
import os

import pytest

from experiments import results as R
from fedinit_jax.experiment import stopping

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "study_cross_device.md")
# each study folder with the report options its table in the doc was made with
STUDIES = (
    ("cross_device_cifar10/runs/dir0.1", dict(target=0.45, window=3, last=100, drift=200)),
    ("cross_device_cifar10/runs/dir0.6", dict(target=0.45, window=3, last=100)),
    ("cross_device_synthetic/runs", dict(target=0.6, window=3, last=50)),
    ("cross_device_shakespeare/runs", dict(target=0.5, window=1, last=50, rounds=300, drift=50)),
    ("cross_device_tuned/runs/dir0.1",
     dict(target=0.45, window=3, last=100, paired="fedinit-ri-offset-momentum")),
    ("cross_device_tuned/runs/dir0.6",
     dict(target=0.45, window=3, last=100, paired="fedinit-ri-offset-momentum")),
)


def _report_module():
    spec = importlib.util.spec_from_file_location(
        "cross_device_report", os.path.join(ROOT, "experiments", "cross_device_report.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("folder,options", STUDIES, ids=[s for s, _ in STUDIES])
def test_doc_tables_are_the_regenerated_ones(folder, options):
    options = dict(options)
    drift = options.pop("drift", None)
    paired = options.pop("paired", None)
    report = _report_module()
    text, groups = report.table(os.path.join(ROOT, "studies", folder), **options)
    assert text in open(DOC).read(), text.splitlines()[2]
    if drift:
        drift_text = report.drift_table(groups, drift)
        assert drift_text in open(DOC).read(), drift_text
    if paired:
        paired_text = report.paired_table(groups, paired, options["window"], options["last"])
        assert paired_text in open(DOC).read(), paired_text
    for name, runs in groups.items():
        for seed, run, _ in runs:
            assert run.config["seed"] == seed, (folder, name, seed)


def test_a_run_from_before_the_runaway_rule_ends_where_the_rule_stops_it(tmp_path):
    """A run whose recorded losses meet the rule at round 15 and go on reads `diverged at 15*`,
    its rows after round 15 left out; a run the rule stopped at round 15 reads `diverged at 15`
    from its metrics alone (train.log is not committed); a run stopped earlier reads
    `unfinished`, or `diverged` where its last loss is not finite or its train.log says so;
    a run cut at `rounds` before the losses rise reads `done`."""
    import json

    losses = [1.0, 0.9] + [0.8] * 8 + [100.0] * 10
    assert [i for i in range(1, 21) if stopping.runaway(
        [{"round": r + 1, "train_loss": x} for r, x in enumerate(losses[:i])])][0] == 15

    def cell(name, n, log=None, last=None):
        path = tmp_path / "study" / name
        path.mkdir(parents=True)
        config = json.load(open(os.path.join(
            ROOT, "studies", "cross_device_cifar10", "runs", "dir0.1", "fedavg-s0", "config.json")))
        (path / "config.json").write_text(json.dumps({**config, "rounds": 20}))
        (path / "metrics.jsonl").write_text("".join(
            json.dumps({"round": r + 1, "train_loss": x, "test_accuracy": 0.1})
            + "\n" for r, x in enumerate(losses[:n - 1] + [last or losses[n - 1]])))
        if log:
            (path / "train.log").write_text(log + "\n")

    cell("old-s0", 20)
    cell("stopped-s0", 15)
    cell("killed-s0", 2)
    cell("nan-s0", 2, last=float("nan"))
    cell("logged-s0", 2, log="2026-12-03T00:00:00Z summary: diverged; round 2/10")
    report = _report_module()
    ended = {name: [(e, len(run.rows)) for _, run, e in runs]
             for name, runs in report.cells(str(tmp_path / "study")).items()}
    assert ended == {"old": [("diverged at 15*", 15)], "stopped": [("diverged at 15", 15)],
                     "killed": [("unfinished at 2", 2)], "nan": [("diverged at 2", 2)],
                     "logged": [("diverged at 2", 2)]}
    ended = {name: [e for _, _, e in runs]
             for name, runs in report.cells(str(tmp_path / "study"), rounds=3).items()}
    assert ended == {"old": ["done"], "stopped": ["done"], "killed": ["unfinished at 2"],
                     "nan": ["diverged at 2"], "logged": ["diverged at 2"]}
    assert R.find_runs([str(tmp_path / "study" / "old-s0")])[0].rows[-1]["round"] == 20


def test_paired_differences_are_taken_seed_by_seed_over_finished_runs(tmp_path):
    """paired_table: each method's final accuracy minus the reference's on the same seed,
    over the seeds both finished, against a loop written here (window 1: the final accuracy
    is the max of the evaluations)."""
    import json
    import statistics

    config = json.load(open(os.path.join(
        ROOT, "studies", "cross_device_cifar10", "runs", "dir0.1", "fedavg-s0", "config.json")))
    accuracies = {"ref-s0": [0.2, 0.5], "ref-s1": [0.3, 0.4], "ref-s2": [0.1, 0.6],
                  "b-s0": [0.6, 0.55], "b-s1": [0.2, 0.45], "b-s2": [0.9],  # s2 unfinished
                  "c-s3": [0.7, 0.7]}  # no reference run on seed 3
    for name, acc in accuracies.items():
        path = tmp_path / name
        path.mkdir()
        (path / "config.json").write_text(json.dumps({**config, "rounds": 2}))
        (path / "metrics.jsonl").write_text("".join(
            json.dumps({"round": r + 1, "train_loss": 1.0, "test_accuracy": a}) + "\n"
            for r, a in enumerate(acc)))
    report = _report_module()
    text = report.paired_table(report.cells(str(tmp_path)), "ref", window=1, last=2)
    b = [100 * (max(accuracies[f"b-s{s}"]) - max(accuracies[f"ref-s{s}"])) for s in (0, 1)]
    assert b == pytest.approx([10.0, 5.0])
    assert text.splitlines()[2:] == [
        f"| b | 2 | {statistics.mean(b):.2f} ± {statistics.stdev(b):.2f} | s0: +10.00, s1: +5.00 |",
        "| c | 0 | - |  |"]
    with pytest.raises(ValueError, match="--paired='d': no such method"):
        report.paired_table(report.cells(str(tmp_path)), "d", window=1, last=2)
