"""experiments/headline.py, the paper's headline cell for one accelerator, at tiny scale on
the CPU: its settings are the paper preset's, its data pieces are checked before any compute,
and a stopped run resumes to the rows of an uninterrupted one."""
import json
import os

import numpy as np
import pytest

from experiments import headline
from fedinit_jax import data

TINY = dict(headline.SETTINGS, num_clients=10, clients_per_round=2, local_epochs=1,
            batch_size=16, model="mlp")


def _without_seconds(rows):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in rows]


def test_the_settings_are_the_paper_presets_but_for_participation():
    from experiments.configs import paper

    preset = paper.get_config("cifar10-resnet18_gn-dir0.1-10-100")
    s = headline.SETTINGS
    assert (s["num_clients"], s["clients_per_round"] / s["num_clients"], s["batch_size"],
            s["local_epochs"], s["local_lr"], s["delta_from"], s["rounds"], s["model"]) == (
        preset.num_clients, preset.participation, preset.batch_size, preset.local_epochs,
        preset.local_lr, preset.delta_from, preset.rounds, preset.model)
    assert s["dirichlet_alpha"] == preset.task.images.dirichlet_alpha
    assert (s["weight_decay"], s["clip_norm"]) == (preset.weight_decay, preset.clip_norm)
    assert preset.participation_mode == "bernoulli"  # the script: N fixed (its docstring)


def test_pieces_are_checked_and_a_stopped_run_resumes_exactly(tmp_path):
    x, y, _ = data.load_digits("train")
    tx, ty, _ = data.load_digits("test")
    arrays = {"train_x": x, "train_y": y, "test_x": tx, "test_y": ty}
    manifest = headline.pack(str(tmp_path / "data"), arrays, 32 << 10)  # pieces of 32 KiB
    assert len(manifest["train_x"]) > 1 and all(p["bytes"] for p in manifest["train_x"])
    loaded = headline.load(str(tmp_path / "data"))
    assert all(np.array_equal(loaded[k], v) for k, v in arrays.items())
    piece = tmp_path / "data" / manifest["test_y"][0]["file"]
    piece.write_bytes(piece.read_bytes()[:-1] + b"\x07")
    with pytest.raises(ValueError, match=f"{piece.name} differs from manifest.json"):
        headline.load(str(tmp_path / "data"))
    straight = headline.run(arrays, str(tmp_path / "straight"), "fedinit", dict(TINY, rounds=3),
                            eval_every=1, checkpoint_every=2, log=lambda line: None)
    headline.run(arrays, str(tmp_path / "stopped"), "fedinit", dict(TINY, rounds=2),
                 eval_every=1, checkpoint_every=2, log=lambda line: None)
    resumed = headline.run(arrays, str(tmp_path / "stopped"), "fedinit", dict(TINY, rounds=3),
                           eval_every=1, checkpoint_every=2, log=lambda line: None)
    assert _without_seconds(resumed) == _without_seconds(straight)
    assert [r["seed"] for r in straight if r["round"] == 3] == [0, 1, 2]
    written = [json.loads(line) for line in open(tmp_path / "stopped" / "fedinit.jsonl")]
    assert _without_seconds(written) == _without_seconds(straight)
    with open(tmp_path / "stopped" / "fedinit.jsonl", "a") as f:
        f.write('{"round": 4, "se')  # a line cut by a kill: dropped on the next run
    again = headline.run(arrays, str(tmp_path / "stopped"), "fedinit", dict(TINY, rounds=3),
                         eval_every=1, checkpoint_every=2, log=lambda line: None)
    assert _without_seconds(again) == _without_seconds(straight)


def test_the_dry_run_goes_through_every_step(tmp_path):
    assert headline.main(["dry-run", str(tmp_path)]) == 0
    summary = json.load(open(tmp_path / "out" / "summary.json"))
    assert set(summary["final_test_accuracy_last_50_rounds"]) == {"fedavg", "fedinit"}
    assert os.path.exists(tmp_path / "data" / "manifest.json")
