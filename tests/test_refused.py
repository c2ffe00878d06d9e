"""Options that would change nothing are refused by name, and bad values of every surface
(Runtime, the task registry, the environment, configs) get one line naming them before any
work is done."""
import os

import numpy as np
import pytest
from conftest import QUIET, linreg_loss, planned_run, quiet_config

from fedinit_jax import Runtime, algorithms, experiment, with_runtime
from fedinit_jax.experiment import simulation, tasks

SHAKESPEARE = {**quiet_config(), "dataset": "shakespeare", "model": "lstm"}


@pytest.mark.parametrize("runtime, says", [
    (Runtime(chunk_size=2, execution="vmap"), "chunk_size=2: only execution='chunked'"),
    (Runtime(execution="vmap", chunk_size=-3), "chunk_size=-3: only execution='chunked'"),
    (Runtime(execution="chunked", chunk_size=-3), "chunk_size=-3: must be >= 1"),
    (Runtime(donate_state="yes"), "donate_state='yes': must be True or False"),
])
def test_runtime_options_that_would_be_ignored_are_refused(runtime, says):
    with pytest.raises(ValueError, match=says):
        algorithms.fedinit(linreg_loss, runtime=runtime)
    chunked = with_runtime(algorithms.fedinit(linreg_loss), execution="chunked", chunk_size=2)
    assert with_runtime(chunked, execution="vmap").runtime.chunk_size is None


@pytest.mark.parametrize("name, says", [
    ("shakespeare", "'shakespeare' is already registered to another family"),
    (None, r"dataset=None, ...\): a non-empty str"),
    (123, r"dataset=123, ...\): a non-empty str")])
def test_the_task_registry_refuses_a_taken_or_malformed_name(name, says):
    from fedinit_jax.experiment.tasks import images

    with pytest.raises(ValueError, match=says):
        tasks.register(name, images.FAMILY)
    assert tasks.REGISTRY["shakespeare"] is not images.FAMILY


@pytest.mark.parametrize("field, value", [("partition", "iid"), ("dirichlet_alpha", 0.6),
                                          ("client_noise", 0.1), ("augment", True)])
def test_shakespeare_refuses_the_image_split_fields(field, value):
    images = {**SHAKESPEARE["task"]["images"], field: value}
    with pytest.raises(ValueError, match=f"config.task.images.{field}={value!r}: a field of "
                                         "the 'images' family, but config.dataset is "
                                         "'shakespeare': it would change nothing"):
        experiment.validate({**SHAKESPEARE, "task": {**SHAKESPEARE["task"], "images": images}})
    experiment.validate(SHAKESPEARE)


def test_a_bernoulli_draw_method_without_bernoulli_participation_is_refused():
    with pytest.raises(ValueError, match="config.participation_draw='count': how a Bernoulli S "
                                         "is drawn, but participation_mode is 'fixed'"):
        experiment.validate({**quiet_config(), "participation_draw": "count"})
    with pytest.raises(ValueError, match="config.participation_draw='poisson': allowed: "
                                         "per_client, count"):
        experiment.validate({**quiet_config(), "participation_draw": "poisson"})
    experiment.validate({**quiet_config(), "participation_mode": "bernoulli",
                         "participation_draw": "count"})


def test_a_chunk_size_without_chunked_execution_is_refused():
    with pytest.raises(ValueError, match="config.chunk_size=4: only execution=chunked"):
        experiment.validate({**quiet_config(), "execution": "vmap", "chunk_size": 4})


@pytest.mark.parametrize("value", ["nan", "-1", "0", "abc", "", "inf", "1e300"])
def test_a_bad_stop_grace_is_refused_before_anything_is_written(tmp_path, monkeypatch, value):
    monkeypatch.setenv("FEDINIT_STOP_GRACE_SECONDS", value)
    with pytest.raises(ValueError, match=f"FEDINIT_STOP_GRACE_SECONDS={value!r}: must be a "
                                         r"number of seconds in \(0, 86400\]"):
        planned_run(quiet_config(), str(tmp_path / "run"), **QUIET)
    assert not (tmp_path / "run").exists()


def test_an_option_that_does_not_apply_is_said_and_recorded(tmp_path):
    """A sweep or paper preset sets delta_from for every method; FedDyn's server replaces w,
    so `start` changes nothing there: the run says so and run_info.json records it."""
    logged = []
    planned_run(quiet_config(algorithm="feddyn", delta_from="start", rounds=1),
                   str(tmp_path), log=logged.append, progress=False)
    assert any("config.delta_from='start' does not apply to feddyn" in line for line in logged)
    info = simulation.workdir_lib.read_json(os.path.join(tmp_path, "run_info.json"))
    assert info["options_not_applicable"] == {"delta_from": "start"}
    assert np.isfinite(simulation.read_metrics(str(tmp_path))[0]["train_loss"])


def test_api_misuse_is_one_clear_error(monkeypatch):
    from conftest import NUM_CLIENTS, params_from

    from fedinit_jax import check_round_input
    from fedinit_jax.experiment.tasks import Family

    algo = algorithms.fedinit(linreg_loss)
    state = algo.init(params_from(np.array([0.3, -0.2, 0.1, 0.05])), NUM_CLIENTS)
    with pytest.raises(ValueError, match="round_input must be a fedinit_jax.RoundInput"):
        check_round_input(algo, state, {})
    monkeypatch.setattr(tasks, "REGISTRY", dict(tasks.REGISTRY))
    tasks.register("nothing", Family(build=lambda config: None, check=lambda config: None,
                                     abstract=None))
    with pytest.raises(ValueError, match="config.dataset='nothing': its task family's build "
                                         "returned NoneType, not a tasks.Task"):
        experiment.build(experiment.plan({**quiet_config(), "dataset": "nothing"}))


def test_the_memory_check_builds_no_round_input(monkeypatch):
    """The compiled round is checked against the memory with abstract batches: only one
    client's batches are built on the host (for the shapes), never the N x K x B input (a
    Shakespeare batch of 100,000 peaked at 16 GB before it was refused)."""
    import jax

    config = quiet_config()
    task = tasks.family(config["dataset"]).build(experiment.plan(config))
    sizes = []

    def recording(ids, rng):
        sizes.append(len(ids))
        return task.round_batches(ids, rng)

    plan = experiment.plan(config)
    first = experiment.first_round_input(plan, task._replace(round_batches=recording))
    assert sizes == [1]
    n = plan.client_slots
    assert all(isinstance(x, jax.ShapeDtypeStruct) and x.shape[0] == n
               for x in jax.tree.leaves(first.batches))


def test_host_memory_honours_the_address_space_limit(monkeypatch):
    """Under `ulimit -v` the memory checks see what the limit leaves (MemAvailable alone
    let a num_clients the limit cannot hold reach an allocation's traceback)."""
    import resource

    from fedinit_jax.experiment import memory

    left = 2 ** 30
    monkeypatch.setattr(memory.resource, "getrlimit", lambda which: (
        memory._virtual_size() + left, resource.RLIM_INFINITY))
    assert 0 < memory.host_memory() <= left
    monkeypatch.setattr(memory.resource, "getrlimit", lambda which: (
        memory._virtual_size() // 2, resource.RLIM_INFINITY))
    assert memory.host_memory() == 0


def test_api_arguments_of_the_wrong_kind_are_named():
    """A server state (no client tables) given to algo.apply, run_round's state and store
    swapped: one ValueError saying what to call; a 0-d jax array is a beta like a 0-d numpy
    array."""
    import jax
    import jax.numpy as jnp

    from fedinit_jax import RoundInput, client_store

    params = {"w": jnp.zeros(3), "b": jnp.zeros(())}
    algo = algorithms.fedinit(linreg_loss)
    store = client_store.HostStore(algo, params, 10)
    state = client_store.server_state(algo, params)
    ri = RoundInput(np.array([1, 2]), (np.zeros((2, 1, 4, 3), np.float32),
                                       np.zeros((2, 1, 4), np.float32)), 0.1)
    with pytest.raises(ValueError, match=r"has none \(client_store.server_state\): run it "
                                         r"with client_store.run_round"):
        algo.apply(state, ri, jax.random.key(0))
    with pytest.raises(ValueError, match="state must be a FedState .*got HostStore"):
        client_store.run_round(algo, store, state, ri, jax.random.key(0))
    assert float(algorithms.fedinit(linreg_loss, beta=jnp.array(0.2)).init(
        params, 4).beta) == pytest.approx(0.2)


def test_an_unknown_xla_flag_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    """XLA aborts a process whose XLA_FLAGS it does not know (its fatal line, exit 1): the
    binaries probe the value first (once per value, remembered) and name the flag."""
    from experiments import cli

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("XLA_FLAGS", "--xla_nonexistent_flag=1")
    with pytest.raises(SystemExit) as exit_:
        cli.check_xla_flags()
    assert exit_.value.code == 2
    assert "XLA does not know --xla_nonexistent_flag=1" in capsys.readouterr().err
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    cli.check_xla_flags()  # known: passes, and is remembered
    assert len(os.listdir(tmp_path / "fedinit_jax" / "xla_flags")) == 1
