"""The task registry: docs/tasks.md's worked family registered and trained end to end; the
core imports none of the experiment machinery."""
import os
import re
import subprocess
import sys
import types

import numpy as np
import pytest
from conftest import QUIET, ROOT, planned_run, quiet_config

from fedinit_jax import experiment
from fedinit_jax.experiment import tasks


def _docs_family():
    """The first python block of docs/tasks.md, executed as a module of its own."""
    with open(os.path.join(ROOT, "docs", "tasks.md")) as f:
        code = re.search(r"```python\n(# my_tasks/synthetic.py\n.*?)```", f.read(), re.S).group(1)
    module = types.ModuleType("synthetic")
    exec(compile(code, "docs/tasks.md", "exec"), module.__dict__)  # noqa: S102 - our own docs
    return module


def test_the_worked_family_registers_and_trains(tmp_path, monkeypatch):
    synthetic = _docs_family()
    monkeypatch.setattr(tasks, "REGISTRY", dict(tasks.REGISTRY))  # register() into a copy
    tasks.register("my_synthetic", synthetic.FAMILY)
    config = quiet_config(dataset="my_synthetic", algorithm="fedinit", batch_size=20, rounds=8,
                          eval_every=4, task={"my_synthetic": {"alpha": 1.0}})  # beta: its default
    with pytest.raises(ValueError, match="config.model='cnn': synthetic takes 'mlp'"):
        experiment.validate({**config, "model": "cnn"})  # the family's own check, no data
    # the data is FedProx's construction: labels are the argmax of each client's own model
    x, y = synthetic.generate(3, 1.0, 1.0, seed=0)
    assert x.shape == (3, 100, 60) and y.shape == (3, 100)
    assert len(np.unique(y)) > 2 and not np.array_equal(y[0], y[1])
    # the planner's abstract round has the shapes of a built one
    task = synthetic.build(experiment.plan(config))
    batches, step_mask = task.round_batches(np.array([0, 3]), np.random.default_rng(0))
    plan = synthetic.abstract(experiment.plan(config), 2)
    assert [b.shape for b in batches] == [b.shape for b in plan.batches] and step_mask is None
    assert task.steps == plan.steps == batches[0].shape[1]
    assert tasks.own_fields(config) == {"alpha": 1.0, "beta": 1.0}
    rows = planned_run(config, str(tmp_path / "run"), **QUIET)
    recorded = experiment.saved_config(str(tmp_path / "run" / "config.json"))
    assert recorded["task"] == {"my_synthetic": {"alpha": 1.0, "beta": 1.0}}
    accuracy = [r["test_accuracy"] for r in rows if "test_accuracy" in r]
    assert len(rows) == 8 and len(accuracy) == 2
    assert accuracy[-1] > max(accuracy[0], 0.2)  # it learns (chance: 0.1)
    assert all(np.isfinite(r["train_loss"]) for r in rows)


def test_an_unregistered_name_is_an_image_dataset_and_the_text_family_is_registered():
    assert tasks.family("cifar10") is tasks.family("digits")
    assert tasks.family("shakespeare").natural_split == "roles"
    with pytest.raises(ValueError, match="a tasks.Family"):
        tasks.register("bad", object())


def test_the_core_imports_none_of_the_experiment_machinery():
    """`import fedinit_jax` (algorithms, round, models, data loaders, replicas) loads neither
    fedinit_jax.experiment nor the packages of the [experiments] extra."""
    code = ("import sys, fedinit_jax, fedinit_jax.models, fedinit_jax.data, fedinit_jax.losses\n"
            "from fedinit_jax.data import shakespeare\n"
            "print(' '.join(sorted(sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=ROOT, env={**os.environ, "JAX_PLATFORMS": "cpu"}
                            ).stdout.split()
    extra = ("tensorflow_datasets", "tensorflow", "orbax", "ml_collections", "tensorboardX",
             "matplotlib", "sklearn", "tqdm", "experiments", "fedinit_jax.experiment")
    assert [m for m in loaded if m.startswith(extra)] == []
    assert "fedinit_jax.federated_round" in loaded  # the probe did import the core


def test_a_familys_own_fields_are_checked_and_old_synthetic_configs_resolve():
    """config.task.<dataset>.<field>: a field the family does not declare, or another
    dataset's field changed, is refused by name; a synthetic config saved before families
    had fields (alpha, beta in dirichlet_alpha, category_noise) resolves to its values."""
    with pytest.raises(ValueError, match="config.task.synthetic.gamma=1.0: not a field of the "
                                         "'synthetic' family \\(its fields: alpha, beta\\)"):
        experiment.validate(quiet_config(dataset="synthetic", model="linear",
                                         task={"synthetic": {"gamma": 1.0}}))
    with pytest.raises(ValueError, match="config.task.synthetic.alpha=2.0: a field of the "
                                         "'synthetic' family, but config.dataset is 'digits'"):
        experiment.validate(experiment.resolve(  # as the run resolves, then validates
            quiet_config(task={"synthetic": {"alpha": 2.0, "beta": 1.0}})))
    with pytest.raises(ValueError, match="config.task.synthetic.beta=-1.0"):
        experiment.validate(quiet_config(dataset="synthetic", model="linear",
                                         task={"synthetic": {"alpha": 1.0, "beta": -1.0}}))
    new = quiet_config(dataset="synthetic", task={"synthetic": {"alpha": 0.5, "beta": 2.0}})
    assert experiment.resolve(new)["task"] == {"synthetic": {"alpha": 0.5, "beta": 2.0}}
    assert experiment.resolve(quiet_config())["task"] == {  # digits: the image family's
        "images": dict(quiet_config()["task"]["images"])}


def test_the_shared_synthetic_federation_is_a_perturbed_shared_model():
    """synthetic_shared: client k labels with argmax((W^0 + alpha Z_k) x + b^0 + alpha z_k),
    x ~ N(v_k, I), v_k ~ N(0, beta^2 I), written here from the module's docstring; its test
    clients are the first sampled ones (replayed here) and C, ..., C + 499; the shared model
    bounds a global one (Bayes-optimal: it scores at least a client-fitted global model)."""
    import jax

    from experiments.configs import cross_device
    from fedinit_jax import data
    from fedinit_jax.experiment.tasks import synthetic_shared as shared

    config = cross_device.get_config("synthetic-shared").to_dict()
    config.update(num_clients=2000, participation=0.05, rounds=3)
    rng = np.random.default_rng([config["seed"], 6])
    w0, b0 = rng.normal(size=(10, 60)), rng.normal(size=10)
    rng = np.random.default_rng([config["seed"], 7, 17])
    w, b = w0 + 0.5 * rng.normal(size=(10, 60)), b0 + 0.5 * rng.normal(size=10)
    x = 1.0 * rng.normal(size=60) + rng.normal(size=(100, 60))
    got_x, got_y = shared.client_data(17, 0.5, 1.0, config["seed"])
    np.testing.assert_allclose(got_x, x, rtol=1e-6)
    np.testing.assert_array_equal(got_y, np.argmax(x @ w.T + b, axis=1))
    first = [int(i) for t in range(3) for i in data.sample_clients(
        np.random.default_rng([config["seed"], 1, t]), 2000, 100)]
    assert shared.sampled_test_clients(experiment.plan(config)).tolist() == list(
        dict.fromkeys(first))
    task = tasks.family("synthetic_shared").build(experiment.plan(config))
    ceiling = task.data_info["shared_model_accuracy"]
    assert set(ceiling) == {"test_accuracy", "test_accuracy_new"}
    assert 0.5 < ceiling["test_accuracy_new"] < 0.8  # far above chance (0.1), below 1
    # a global linear model fitted on the new clients' own held-out data does not beat it
    xs, ys = zip(*(shared.client_data(i, 0.5, 1.0, config["seed"]) for i in range(2000, 2500)))
    xs, ys = np.concatenate(xs), np.concatenate(ys)
    onehot = np.eye(10)[ys]
    fit = np.linalg.lstsq(np.c_[xs, np.ones(len(xs))], onehot, rcond=None)[0]
    assert np.mean(np.argmax(np.c_[xs, np.ones(len(xs))] @ fit, 1) == ys) <= np.mean(
        np.argmax(xs @ w0.T + b0, 1) == ys)
    metrics = task.evaluate(task.model.init(jax.random.key(0), task.input_shape))
    assert {"test_accuracy", "test_accuracy_new", "test_loss", "test_loss_new"} <= set(metrics)


def test_a_validation_split_is_held_out_of_the_clients_and_evaluated(tmp_path):
    """task.images.validation: one fixed draw of the training split (the same for every
    seed) that no client holds, evaluated as val_accuracy / val_loss beside the untouched
    test split; recorded in config.json; refused out of [0, 0.5]."""
    from fedinit_jax.experiment.tasks import images

    kept, held = images.held_out(1437, 0.2)
    assert (held.size, kept.size) == (287, 1150) and not set(kept) & set(held)
    np.testing.assert_array_equal(images.held_out(1437, 0.2)[1], held)
    own = {**quiet_config()["task"]["images"], "validation": 0.2}
    config = experiment.resolve(quiet_config(task={"images": own}, rounds=2, eval_every=2))
    with_validation = images.build(experiment.plan(config))
    without = images.build(experiment.plan(quiet_config()))
    assert with_validation.client_sizes[0] == 1150 // 8 < without.client_sizes[0] == 1437 // 8
    rows = planned_run(config, str(tmp_path), **QUIET)
    assert {"val_accuracy", "val_loss", "test_accuracy", "test_loss"} <= rows[-1].keys()
    assert experiment.saved_config(str(tmp_path / "config.json"))["task"]["images"][
        "validation"] == 0.2
    with pytest.raises(ValueError, match="config.task.images.validation=0.6"):
        experiment.validate(quiet_config(task={"images": {**own, "validation": 0.6}}))
