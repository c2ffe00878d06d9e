"""An Experiment built from a Plan: the data loaded and split, the model, the loss, the
algorithm, the client store decided (auto: what fits), the round compiled; and the round
input of a round's sampled clients."""
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from fedinit_jax import algorithms, costs
from fedinit_jax.checks import fail_config
from fedinit_jax.experiment import memory, tasks
from fedinit_jax.experiment.planning import Plan
from fedinit_jax.types import FederatedAlgorithm, RoundInput

__all__ = ["Experiment", "build", "round_input", "masked", "first_round_input",
           "check_compiled_round"]


class Experiment(NamedTuple):
    round_batches: Callable  # (client ids, rng) -> (batches [N, K, B, ...], step_mask or None)
    client_sizes: np.ndarray  # [C] examples (images) or targets (text) per client, "size"
    evaluate: Callable      # params -> {'test_accuracy', 'test_loss'}
    algorithm: FederatedAlgorithm
    init_params: Any
    num_classes: int
    plan: Plan              # the config resolved once (plan.client_slots: N, ...)
    steps_per_round: int    # K (algorithm.runtime: how its round runs)
    data_info: dict         # what data it was built from (Task.data_info)
    client_store: str       # device | host | disk (config.client_store, auto resolved)
    store_reason: str       # why that store


def build(run_plan: Plan, client_store=None, log=None) -> Experiment:
    """Load and split the data, build the model, the loss and the algorithm of a Plan
    (experiment.plan(config)); client_store (the one a resumed run recorded) replaces
    config.client_store="auto". log(line), if given, hears of each slow step (the data, the
    round's compilation) with its time."""
    if not isinstance(run_plan, Plan):
        raise ValueError(f"build takes a Plan (experiment.plan(config)), got "
                         f"{type(run_plan).__name__}")
    log = log or (lambda line: None)
    data, sampling = run_plan.data, run_plan.sampling
    store = client_store if run_plan.store.kind == "auto" and client_store else (
        run_plan.store.kind)
    if store == "host" and jax.process_count() > 1:
        fail_config("client_store", store, "host memory is one process's, and a client's row must "
                    "be readable by whichever process is dealt it: a multi-process run keeps its "
                    "clients on the device or on disk in the shared workdir (device, disk or auto)")
    began = time.perf_counter()
    task = data.family.build(run_plan)
    log(f"data ready: {data.dataset} over {sampling.num_clients:,} clients "
        f"({time.perf_counter() - began:.1f} s to load, decode and split)")
    if not isinstance(task, tasks.Task):
        raise ValueError(f"config.dataset={data.dataset!r}: its task family's build "
                         f"returned {type(task).__name__}, not a tasks.Task")
    algo = algorithms.get(run_plan.algorithm.name, task.loss_fn, runtime=run_plan.runtime,
                          **run_plan.algorithm.kwargs)
    key = jax.random.key(run_plan.schedule.seed)
    # the parameters' shapes (nothing allocated): every check below runs before the model is
    shapes = jax.eval_shape(lambda k: task.model.init(k, task.input_shape), key)
    state = costs.state_costs(algo, shapes)
    memory.check_round_input_size(run_plan, task)
    reason = ("config.client_store" if run_plan.store.kind != "auto" else
              "auto, as the run so far: run_info.json")
    if store == "auto":
        store, reason = _auto_on_cpu(run_plan)
    if store in ("device", "auto"):
        try:  # the whole [C, ...] tables on the device, and the round compiled around them
            memory.check_memory(run_plan, state)
            began = time.perf_counter()
            need = check_compiled_round(run_plan, algo, shapes, task)
            log(f"round compiled ({time.perf_counter() - began:.1f} s)")
            try:
                memory.check_checkpoint_memory(run_plan, state, need)
            except ValueError as err:
                if store == "device":  # it would be killed for memory at its first checkpoint
                    fail_config("client_store", store, f"on CPU the device's tables are host "
                                f"memory, and {err}; client_store=host or disk keep the rows "
                                "off the device and stream their checkpoints (auto picks)")
                raise
            if store == "auto":
                reason = "the tables and the compiled round fit" + (
                    ", with a checkpoint's copies" if jax.default_backend() == "cpu" else "")
            store = "device"
        except ValueError as err:
            if store == "device":
                raise
            memory.check_cohort_memory(run_plan, state, err)
            store = "host" if jax.process_count() == 1 else "disk"  # host: one process's
            reason = f"not on the device: {err}"
    init_params = task.model.init(key, task.input_shape)
    return Experiment(task.round_batches, task.client_sizes, task.evaluate, algo, init_params,
                      task.num_classes, run_plan, task.steps, task.data_info, store, reason)


def _auto_on_cpu(run_plan) -> tuple[str, str]:
    """client_store=auto on one process of a CPU backend, where the device's tables are host
    memory too: ("host", why) when a run samples fewer clients than C (rounds x N slots at
    most), so the [C, ...] tables would hold rows never written, while the host store
    keeps the sampled clients' rows only; ("auto", "") otherwise (decided by what fits)."""
    clients = run_plan.sampling.num_clients
    sampled = run_plan.schedule.rounds * run_plan.client_slots
    if jax.default_backend() != "cpu" or jax.process_count() > 1 or sampled >= clients:
        return "auto", ""
    return "host", (f"auto on CPU, where the device's tables are host memory too: at most "
                    f"rounds x N = {sampled:,} of the {clients:,} clients are "
                    "sampled, and the host store keeps only their rows")


def round_input(run_plan, client_sizes, ids, mask, batches, step_mask,
                local_lr) -> RoundInput:
    """The round's RoundInput for the sampled ids: their sizes n_i when the server mean is
    weighted by them (plan.algorithm.aggregation="size"), else a uniform mean."""
    sizes = client_sizes[ids] if run_plan.algorithm.aggregation == "size" else None
    return RoundInput(ids, batches, np.float32(local_lr), mask, step_mask, sizes)


def masked(run_plan) -> bool:
    """Whether the run's rounds carry a slot mask (simulation._sample): Bernoulli |S|, or a
    fixed |S| padded to a multiple of the devices."""
    return (run_plan.sampling.mode == "bernoulli"
            or run_plan.client_slots != run_plan.expected_clients)


def first_round_input(run_plan, task: tasks.Task) -> RoundInput:
    """A round input of the run's largest shapes and its dtypes, its batches abstract
    (jax.ShapeDtypeStruct: nothing of the N x K x B input is built on the host before the
    compiled round is known to fit). The shapes come from one real client, the largest, so
    that masked epochs take their largest K; every slot real."""
    n = run_plan.client_slots
    largest = np.argsort(-np.asarray(task.client_sizes), kind="stable")
    ids = largest[np.arange(n) % run_plan.sampling.num_clients].astype(np.int32)
    # a mask as the loop's rounds have one, else the first round would not reuse this compile
    mask = np.ones(n, bool) if masked(run_plan) else None
    one, step_mask = task.round_batches(ids[:1], np.random.default_rng(0))
    batches = jax.tree.map(lambda x: jax.ShapeDtypeStruct((n, *x.shape[1:]), x.dtype), one)
    if step_mask is not None:
        step_mask = np.ones((n, step_mask.shape[1]), bool)
    return round_input(run_plan, task.client_sizes, ids, mask, batches, step_mask,
                       run_plan.schedule.local_lr)


def check_compiled_round(run_plan, algo, params, task) -> int:
    """Compile the round ahead of time (the first round then reuses it) and refuse, naming a
    field, a run whose round does not fit the memory its devices have: XLA's own account
    per device against the device's limit (GPU/TPU), or, on CPU, devices x account against
    the host's available memory. params: arrays or their jax.ShapeDtypeStruct. Returns the
    bytes that account needs (the [C, ...] tables included: they are the round's
    arguments)."""
    clients = run_plan.sampling.num_clients
    state = jax.eval_shape(lambda p: algo.init(p, clients), params)
    compiled = algo.apply.lower(state, first_round_input(run_plan, task),
                                jax.random.key(0)).compile()
    account = memory.round_memory(compiled)
    available = memory.available_memory()
    on_host = jax.default_backend() == "cpu"
    local = min(algo.runtime.num_devices, jax.local_device_count())  # this process's share of the mesh
    need = account["peak"] * (local if on_host else 1)
    if available is None or need <= available:
        return need
    field, value = (("num_clients", clients) if account["arguments"] > account["temporaries"]
                    else ("batch_size", run_plan.data.batch_size))
    where = (f"{local} CPU devices share {available / 2**30:.1f} GiB" if on_host else
             f"a device holds {available / 2**30:.1f} GiB")
    fail_config(field, value,
                f"the compiled round needs {account['peak'] / 2**30:.1f} GiB per device (XLA: "
                f"arguments {account['arguments'] / 2**30:.1f}, temporaries "
                f"{account['temporaries'] / 2**30:.1f} GiB) and {where}; lower batch_size or the "
                "clients per round, use more devices (num_devices), or "
                "client_state_dtype=bfloat16")
