"""The report on two tiny synthetic result folders: hand-computed numbers and the PNGs."""
import json
import os

import numpy as np
import pytest

from experiments import results
from experiments.figures import curve_lines
from experiments.report import report


def write_run(folder, algorithm, beta, seed, accuracies, seconds=1.0, rounds=None,
              extra=None, cpu="AMD EPYC", options=None):
    os.makedirs(folder)
    config = {"schema_version": 3, "algorithm": algorithm, "beta": beta, "seed": seed,
              "dataset": "toy", "model": "mlp", "task": {"images": {
                  "partition": "dirichlet", "dirichlet_alpha": 0.1, "classes_per_client": 2}},
              "participation": 0.1, "num_clients": 100, "local_epochs": 1,
              "delta_from": "global", "rounds": rounds or len(accuracies), **(options or {})}
    json.dump(config, open(os.path.join(folder, "config.json"), "w"))
    json.dump({"num_params": 10, "clients_per_round": 10, "sessions": [
                   {"after_round": 0, "cpu": cpu, "cores": 2, "device": "cpu", "load": 0.5}],
               "costs": {"down": ["w"], "up": ["delta"], "server_state": [],
                         "client_state": [], "client_work": []}},
              open(os.path.join(folder, "run_info.json"), "w"))
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        for r, acc in enumerate(accuracies, start=1):
            f.write(json.dumps({"round": r, "test_accuracy": acc, "train_loss": 1.0,
                                "divergence": 1.0 / r, "divergence_all": 2.0 / r,
                                "train_seconds": 10.0 if r == 1 else seconds,
                                "eval_seconds": 0.5,
                                **{k: v[r - 1] for k, v in (extra or {}).items()}}) + "\n")


@pytest.fixture
def two_folders(tmp_path):
    a, b = tmp_path / "sweep_a", tmp_path / "sweep_b"
    # FedAvg, two seeds; FedInit (beta 0.1) one seed, in another folder
    write_run(a / "avg0", "fedavg", 0.0, 0, [0.1, 0.2, 0.3, 0.5, 0.4, 0.6])
    write_run(a / "avg1", "fedavg", 0.0, 1, [0.2, 0.2, 0.4, 0.4, 0.6, 0.2])
    write_run(b / "init0", "fedinit", None, 0, [0.3, 0.5, 0.7, 0.6, 0.8, 0.7], seconds=1.02)
    return [str(a), str(b)]


def test_smoothed_max_by_hand(two_folders, tmp_path):
    runs = {r.config["algorithm"] + str(r.config["seed"]): r
            for r in results.find_runs(two_folders)}
    # window 3: avg0 -> [0.2, 1/3, 0.4, 0.5]; over the last 3 rounds (4, 5, 6): max 0.5
    assert results.final_accuracy(runs["fedavg0"], 3, 3) == pytest.approx(0.5)
    # avg1 -> [0.8/3, 1/3, 1.4/3, 1.2/3]: max over rounds 4..6 = 1.4/3
    assert results.final_accuracy(runs["fedavg1"], 3, 3) == pytest.approx(1.4 / 3)
    # init0 -> [0.5, 0.6, 0.7, 0.7]
    assert results.final_accuracy(runs["fedinit0"], 3, 3) == pytest.approx(0.7)
    text = report(two_folders, str(tmp_path / "out"), window=3, last=3)
    mean = (0.5 + 1.4 / 3) / 2 * 100
    std = abs(0.5 - 1.4 / 3) / 2 ** 0.5 * 100
    assert f"| FedAvg | {mean:.2f} ± {std:.2f} (n=2) |" in text
    assert "| FedInit | 70.00 (n=1) |" in text
    assert f"+{70 - mean:.2f}" in text                      # Table 6 gain
    assert "| 1.000 | 0.500 | 1.00x |" in text and "| 1.020 | 0.500 | 1.02x |" in text
    assert os.path.exists(tmp_path / "out" / "tables.md")
    pngs = [f for f in os.listdir(tmp_path / "out") if f.endswith(".png")]
    assert "fig1b_beta.png" in pngs and any(p.startswith("fig2_") for p in pngs)
    for p in pngs:
        assert open(tmp_path / "out" / p, "rb").read(4) == b"\x89PNG"


def test_a_second_accuracy_gets_its_own_table(tmp_path):
    """A test_accuracy_* metric every run reports (Shakespeare's test_accuracy_in_vocab)
    gets a table of its own, smoothed the same way; one only some runs report gets none."""
    write_run(tmp_path / "r" / "a", "fedavg", 0.0, 0, [0.1, 0.2, 0.3],
              extra={"test_accuracy_in_vocab": [0.4, 0.5, 0.9], "test_accuracy_x": [0] * 3})
    write_run(tmp_path / "r" / "b", "fedavg", 0.0, 1, [0.1, 0.2, 0.3],
              extra={"test_accuracy_in_vocab": [0.2, 0.1, 0.3]})
    text = report([str(tmp_path / "r")], str(tmp_path / "out"), window=2, last=1)
    # window 2, last point: a (0.5 + 0.9) / 2 = 0.7, b 0.2; mean 45, sample std
    std = abs(70 - 20) / 2 ** 0.5
    table = text.split("## test_accuracy_in_vocab (%), smoothed over 2 evaluations, max over "
                       "the last 1 rounds")[1]
    assert table.lstrip().startswith("| method |")
    assert f"| FedAvg | 45.00 ± {std:.2f} (n=2) |" in table
    assert "test_accuracy_x" not in text


def test_rounds_to_target(two_folders):
    runs = {r.config["algorithm"]: r for r in results.find_runs(two_folders)}
    # window 1 (raw): fedinit reaches 0.5 at round 2; time = 2 rounds x 1.02 s
    assert results.to_target(runs["fedinit"], 0.5, 1) == (2, pytest.approx(2.04))
    assert results.to_target(runs["fedinit"], 0.95, 1) is None


def test_start_variant_is_paired_with_the_beta_zero_runs(two_folders, tmp_path):
    folder = os.path.join(two_folders[1], "start0")
    write_run(folder, "fedinit", None, 0, [0.1, 0.1, 0.1, 0.2, 0.2, 0.2])
    config = json.load(open(os.path.join(folder, "config.json")))
    json.dump({**config, "delta_from": "start"}, open(os.path.join(folder, "config.json"), "w"))
    text = report(two_folders, str(tmp_path / "out"), window=3, last=3)
    mean = (0.5 + 1.4 / 3) / 2 * 100  # the FedAvg (beta = 0) runs, as in the test above
    assert f"| FedInit [start] | 0.1 | {mean:.2f} ± " in text and f"{20 - mean:+.2f}" in text
    assert "| FedInit [start] | 20.00 (n=1) |" in text


def test_unfinished_run_is_left_out_and_named(two_folders, tmp_path):
    write_run(os.path.join(two_folders[1], "init1"), "fedinit", None, 1, [0.9, 0.9], rounds=6)
    text = report(two_folders, str(tmp_path / "out"), window=3, last=3)
    assert "| FedInit | 70.00 (n=1) |" in text
    assert "Left out of the tables, unfinished: sweep_b/init1" in text
    # the curves: FedAvg over its 2 seeds, FedInit's finished seed, the unfinished one dashed
    assert "curves_toy_mlp_Dir-0.1_10pct-100_E1.png" in text
    assert os.path.exists(tmp_path / "out" / "curves_toy_mlp_Dir-0.1_10pct-100_E1.png")
    found = results.find_runs(two_folders)
    (lines,) = curve_lines([r for r in found if results.finished(r)],
                           [r for r in found if not results.finished(r)]).values()
    accuracy = {label: (done, rounds, values) for field, label, done, rounds, values in lines
                if field == "test_accuracy"}
    assert list(accuracy) == ["FedAvg (n=2)", "FedInit (n=1)",
                              "FedInit, unfinished (to round 2)"]
    done, rounds, values = accuracy["FedAvg (n=2)"]
    assert done and list(rounds) == [1, 2, 3, 4, 5, 6]
    np.testing.assert_allclose(values, [[10, 20, 30, 50, 40, 60], [20, 20, 40, 40, 60, 20]])
    done, rounds, values = accuracy["FedInit, unfinished (to round 2)"]
    assert not done
    np.testing.assert_allclose(values, [[90, 90]])


def test_no_runs_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="no finished runs"):
        report([str(tmp_path)], str(tmp_path / "out"))


def test_figure1_curves_keep_methods_and_epochs_apart(tmp_path):
    """Fig. 1(a): FedAvg and FedInit are separate curves over local epochs; Fig. 1(b): runs of
    different local epochs are separate curves over beta."""
    from experiments.figures import figure1_series

    for algorithm, beta, epochs, acc in (("fedavg", None, 1, 0.1), ("fedavg", None, 2, 0.2),
                                         ("fedinit", None, 1, 0.3), ("fedinit", None, 2, 0.4)):
        folder = str(tmp_path / f"{algorithm}{epochs}")
        write_run(folder, algorithm, beta, 0, [acc] * 4)
        config = json.load(open(os.path.join(folder, "config.json")))
        json.dump({**config, "local_epochs": epochs}, open(os.path.join(folder, "config.json"), "w"))
    runs = results.find_runs([str(tmp_path)])
    (_, _, by_epochs), (_, _, by_beta) = figure1_series(runs, window=1, last=2)
    setting = "toy mlp Dir-0.1 10%-100"
    assert by_epochs == {f"FedAvg {setting}": {1: [10.0], 2: [20.0]},
                         f"FedInit {setting}": {1: [30.0], 2: [40.0]}}
    family = "FedAvg (beta 0) / FedInit (beta > 0)"  # the FedInit points are not "FedAvg"
    assert by_beta == {f"{family} {setting} E1": {0.0: [10.0], 0.1: [30.0]},
                       f"{family} {setting} E2": {0.0: [20.0], 0.1: [40.0]}}


def test_bad_runs_are_skipped_and_variants_kept_apart(two_folders, tmp_path):
    """An unfinished copy does not hide a finished one; runs differing in local_lr are not
    merged as seeds; a damaged config.json or a null row is skipped and named."""
    a = two_folders[0]
    write_run(os.path.join(a, "copy_unfinished"), "fedavg", 0.0, 0, [0.9], rounds=6)
    write_run(os.path.join(a, "lr"), "fedavg", 0.0, 0, [0.9] * 6)
    config = json.load(open(os.path.join(a, "lr", "config.json")))
    json.dump({**config, "local_lr": 0.05}, open(os.path.join(a, "lr", "config.json"), "w"))
    write_run(os.path.join(a, "damaged"), "fedavg", 0.0, 3, [0.9] * 6)
    open(os.path.join(a, "damaged", "config.json"), "w").write('{"algorithm": ')
    write_run(os.path.join(a, "null_row"), "fedavg", 0.0, 4, [0.9] * 6)
    with open(os.path.join(a, "null_row", "metrics.jsonl"), "a") as f:
        f.write("null\n")
    text = report(two_folders, str(tmp_path / "out"), window=3, last=3)
    mean = (0.5 + 1.4 / 3) / 2 * 100
    assert f"| FedAvg (local_lr=None) | {mean:.2f} ± " in text  # the two seeds, still merged
    assert "| FedAvg (local_lr=0.05) | 90.00 (n=1) |" in text
    assert "Left out of the tables, unfinished: sweep_a/copy_unfinished" in text
    assert "damaged/config.json cannot be read" in text and "null_row/metrics.jsonl line 7" in text


@pytest.mark.parametrize("kwargs, says", [({"last": 0}, "--last"), ({"window": 0}, "--window"),
                                          ({"target": 2.0}, "--target")])
def test_report_arguments_are_checked(two_folders, tmp_path, kwargs, says):
    with pytest.raises(ValueError, match=says):
        report(two_folders, str(tmp_path / "out"), **{"window": 3, "last": 3, **kwargs})


def test_a_run_that_lost_a_file_is_named_not_silently_dropped(two_folders, tmp_path):
    a = two_folders[0]
    write_run(os.path.join(a, "avg2"), "fedavg", 0.0, 2, [0.9] * 6)
    write_run(os.path.join(a, "avg3"), "fedavg", 0.0, 3, [0.9] * 6)
    os.remove(os.path.join(a, "avg2", "metrics.jsonl"))
    os.remove(os.path.join(a, "avg3", "config.json"))
    text = report(two_folders, str(tmp_path / "out"), window=3, last=3)
    assert "avg2 (no metrics.jsonl)" in text and "avg3 (no config.json)" in text
    assert "(n=2)" in text.split("| FedAvg |")[1].split("\n")[0]  # avg0, avg1 only


@pytest.mark.parametrize("where", ["a_file", "unwritable/out"])
def test_an_out_folder_that_cannot_be_written_is_one_error(two_folders, tmp_path, where):
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "unwritable").mkdir(mode=0o500)
    if os.geteuid() == 0 and where.startswith("unwritable"):
        pytest.skip("root writes anywhere")
    with pytest.raises(ValueError, match=f"--out='.*{where}' cannot be written"):
        report(two_folders, str(tmp_path / where), window=3, last=3)


def test_two_workdirs_of_one_run_keep_one_and_name_the_other(two_folders, tmp_path):
    """Two finished workdirs with the same config and seed are one run: the report keeps
    one and names the other under "Left out" (it was dropped unnamed)."""
    a = two_folders[0]
    write_run(os.path.join(a, "zz_again"), "fedavg", 0.0, 0, [0.2] * 6)
    text = report(two_folders, str(tmp_path / "out"), window=3, last=3)
    left_out = text.split("Left out, the same method, setting and seed as a run kept: ")[1]
    assert left_out.startswith("sweep_a/zz_again (kept: sweep_a/")


def test_a_variant_in_a_familys_field_is_named_by_its_dotted_name(tmp_path):
    """Two runs of one method and split that differ in the image family's client_noise are
    two experiments, named by the field's path."""
    for name, seed, noise in (("plain", 0, 0.0), ("noisy", 1, 0.1)):
        write_run(tmp_path / "r" / name, "fedavg", 0.0, seed, [0.1, 0.2])
        path = tmp_path / "r" / name / "config.json"
        config = json.load(open(path))
        config["task"]["images"]["client_noise"] = noise
        json.dump(config, open(path, "w"))
    labels = sorted(results.method(r.config)
                    for r in results.label_variants(results.find_runs([str(tmp_path / "r")])))
    assert labels == ["FedAvg (task.images.client_noise=0.0)",
                      "FedAvg (task.images.client_noise=0.1)"]


def test_every_option_that_changes_the_rule_is_in_the_name_and_never_pooled(tmp_path):
    """A momentum run alone is not 'FedInit'; runs of two offset rules are two cells in
    every table, each against the same beta = 0 baseline."""
    write_run(tmp_path / "avg", "fedavg", 0.0, 0, [0.5] * 4)
    for seed, rule in enumerate(("momentum", "shared")):
        write_run(tmp_path / rule, "fedinit", 0.1, seed, [0.6 + 0.1 * seed] * 4,
                  options={"ri_offset": rule, "first_visit": "global"})
    write_run(tmp_path / "adam", "fedadam", 0.0, 0, [0.4] * 4, options={"server_lr": 0.03})
    text = report([str(tmp_path)], str(tmp_path / "out"), window=1, last=1)
    assert "| FedInit [ri_offset=momentum] | 60.00 (n=1) |" in text
    assert "| FedInit [ri_offset=shared] | 70.00 (n=1) |" in text
    assert "| FedInit | " not in text.split("## With")[0]
    assert "FedInit [ri_offset=momentum] | 0.1 | 50.00 (n=1) | 60.00 (n=1) | +10.00 |" in text
    assert "FedInit [ri_offset=shared] | 0.1 | 50.00 (n=1) | 70.00 (n=1) | +20.00 |" in text
    assert "| FedAdam [server_lr=0.03] |" in text
    assert results.method({"algorithm": "fedinit", "beta": 0.1, "first_visit": "global"}) == (
        "FedInit [first_visit=global]")


def test_seconds_are_compared_within_one_machine_only(tmp_path):
    write_run(tmp_path / "avg", "fedavg", 0.0, 0, [0.5] * 4)
    write_run(tmp_path / "init", "fedinit", 0.1, 0, [0.6] * 4, seconds=0.5, cpu="Intel Xeon")
    text = report([str(tmp_path)], str(tmp_path / "out"), window=1, last=1)
    assert "| 0.500 | 0.500 | - |" in text and "1.00x" not in text.split("## Rounds")[0]
    assert "seconds not compared (2 machines recorded" in text
    os.remove(tmp_path / "init" / "run_info.json")
    write_run(tmp_path / "init2", "fedinit", 0.1, 1, [0.6] * 4, seconds=0.5)
    text = report([str(tmp_path / "avg"), str(tmp_path / "init2")], str(tmp_path / "out"),
                  window=1, last=1)
    assert "| 0.500 | 0.500 | 0.50x |" in text
    assert "every run on AMD EPYC, 2 cores, cpu, 1-minute load at start 0.50-0.50" in text


def test_fedacgs_beta_is_its_own_hyperparameter_not_ri():
    """FedACG's beta is its lookahead weight lambda: no "+RI", named only off its default,
    and no RI-rule option of the config attached to it."""
    base = {"algorithm": "fedacg", "mu": 0.002, "first_visit": "global"}
    assert results.method({**base, "beta": 0.85}) == "FedACG"
    assert results.method({**base, "beta": 0.7}) == "FedACG [beta=0.7]"
    assert results.method({"algorithm": "scaffold", "beta": 0.1}) == "SCAFFOLD+RI"


def test_the_tuning_report_chooses_by_validation_never_by_test(tmp_path):
    """experiments/tuning_report.py: per method the setting of the best final validation
    accuracy (mean of the last evaluations), whatever the test split says; an unfinished run
    is listed and never chosen; chosen.json holds the chosen setting's fields."""
    from experiments import tuning_report

    settings = [("a", 0.01, [0.3, 0.5, 0.6], [0.9, 0.9, 0.9], 3),   # best on test only
                ("b", 0.03, [0.4, 0.6, 0.7], [0.5, 0.5, 0.5], 3),   # best on validation
                ("c", 0.1, [0.9, 0.9], [0.9, 0.9], 3)]              # unfinished (2 of 3)
    for name, lr, val, test, rounds in settings:
        write_run(tmp_path / "r" / name, "fedadam", 0.0, 0, test, rounds=rounds,
                  extra={"val_accuracy": val}, options={"server_lr": lr})
    tuning_report.main([str(tmp_path / "r"), "--out", str(tmp_path / "out"), "--window", "2"])
    chosen = json.load(open(tmp_path / "out" / "chosen.json"))
    assert chosen["FedAdam"]["fields"]["server_lr"] == 0.03
    assert "beta" not in chosen["FedAdam"]["fields"]
    assert chosen["FedAdam"]["flags"][:2] == ["--config.algorithm=fedadam",
                                              "--config.server_lr=0.03"]
    text = (tmp_path / "out" / "report.md").read_text()
    assert "| FedAdam | 3 | server_lr=0.03" in text and "65.00 | 50.00 |" in text
    assert "| server_lr=0.1, b1=0.9, b2=0.99, eps=0.01 | - | - | 2/3 | 0.2 |" in text



def test_a_studys_cells_are_the_chosen_settings_and_the_rule_on_the_best_server(capsys):
    """tuning_report --cells: one line per chosen method (its folder name, its flags), then
    the `momentum` rule with delta_from=start on the server optimizer of the best validation
    accuracy (FedYogi here, though FedAdam comes first)."""
    from experiments import tuning_report

    chosen = {"FedAdam": {"flags": ["--config.algorithm=fedadam"], "validation": 0.5},
              "FedYogi": {"flags": ["--config.algorithm=fedyogi", "--config.eps=0.001"],
                          "validation": 0.6},
              "FedInit [ri_offset=momentum]": {"flags": ["--config.algorithm=fedinit"],
                                               "validation": 0.9}}
    assert tuning_report.study_cells(chosen) == [
        ("fedadam", ["--config.algorithm=fedadam"]),
        ("fedyogi", ["--config.algorithm=fedyogi", "--config.eps=0.001"]),
        ("fedinit-ri-offset-momentum", ["--config.algorithm=fedinit"]),
        ("fedyogi-ri-momentum-start", ["--config.algorithm=fedyogi", "--config.eps=0.001",
                                       "--config.beta=0.1", "--config.ri_offset=momentum",
                                       "--config.first_visit=global",
                                       "--config.delta_from=start"])]
    assert tuning_report.study_cells({"FedAvg": {"flags": [], "validation": 0.4}}) == [
        ("fedavg", [])]
    with pytest.raises(SystemExit):
        tuning_report.main(["--window", "2"])  # neither --cells nor a folder
    assert "a report needs FOLDER and --out" in capsys.readouterr().err
