"""The experiment machinery: a run from a flat config (what the binaries in experiments/ use).

This subpackage holds what the core (fedinit_jax's algorithms, round, models, data loaders)
does not need: config validation and building (here), the dataset families (tasks/), the
host loop (simulation.py) with its resume (resume.py), stops (stopping.py) and outputs
(outputs.py), workdirs and their lock
(workdir.py), checkpoints (checkpoint.py, orbax), multi-process start-up (distributed.py) and
fetching data (fetch.py). It needs the `[experiments]` extra (TFDS, orbax, ml_collections,
TensorBoard, tqdm, matplotlib, scikit-learn).

`validate(config)` checks every field (types, ranges, names, cross-field rules) and raises
ValueError("config.<field>=...: what is allowed") before anything is loaded or compiled.
`checked(config)` resolves the config (`resolve`: the values that decide the numbers written
out) and validates it: what a sweep's parent knows of a cell. `plan(config)` does that once
and computes what follows from it on this process's devices (the runtime, the client slots
N, E|S|, the lr decay, the builder's arguments): the Plan that `build(plan)` (data, algorithm,
memory checks, compiled round), the host loop (simulation.run), the sweep's cells and
benchmarks/plan.py receive. The config is any mapping with the keys of
experiments/configs/default.py (an ml_collections ConfigDict there).
"""
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from fedinit_jax import algorithms, checks, client_store, costs, data, execution, models
from fedinit_jax.experiment import tasks, workdir
from fedinit_jax.federated_round import CLIENT_STATE_DTYPES, DELTA_FROM, FIRST_VISIT, RI_OFFSETS
from fedinit_jax.types import FederatedAlgorithm, RoundInput, Runtime

PARTITIONS = ("iid", "dirichlet", "pathological")
# algorithm hyperparameters a config may set (None = the registry's default)
OPTIONS = ("delta_from", "weight_decay", "clip_norm", "first_visit", "ri_offset")
# fields added after runs were first saved, with the value that means "as before": a saved
# config.json without such a field resumes under a config that keeps this value
ADDED_FIELDS = {"client_state_dtype": "float32", "participation_mode": "fixed",
                "participation_draw": "per_client",
                "local_steps": 0, "aggregation": "uniform", "client_store": "auto",
                "first_visit": "init", "ri_offset": "model"}
# where the per-client state lives (fedinit_jax/client_store/); auto: on one CPU process,
# host memory when fewer than C clients can be sampled (_auto_on_cpu); else the device when
# the state and the compiled round fit, else host memory (disk: several processes)


def saved_config(path: str) -> dict:
    """A run's config.json, every field added since it was saved at its "as before" value
    (ADDED_FIELDS), resolved: what resuming it means, and what a report compares."""
    return resolve({**ADDED_FIELDS, **workdir.read_json(path)})


def _task_fields(config) -> dict:
    """resolve's `task` (and the two fields an old synthetic config used for it)."""
    changed = {}
    if "task" not in config and config["dataset"] == "synthetic" and "dirichlet_alpha" in config:
        changed = {"task": {"synthetic": {"alpha": config["dirichlet_alpha"],
                                          "beta": config["category_noise"]}},
                   "dirichlet_alpha": 0.1, "category_noise": 0.0}  # default.py's values
        config = {**config, **changed}
    family = tasks.family(config["dataset"])
    own = {config["dataset"]: tasks.own_fields(config)} if family.fields else {}
    for dataset, given in (config.get("task") or {}).items():  # another family's fields:
        known = tasks.REGISTRY.get(dataset)                      # kept when not its defaults,
        if dataset not in own and (known is None or {**known.fields, **given} != dict(
                known.fields)):                                  # so validate refuses them
            own[dataset] = dict(given)
    return {**changed, "task": own}


def resolve(config) -> dict:
    """The config with the values that decide the numbers made explicit, as config.json
    records them: each hyperparameter the algorithm takes that is None at its builder's
    default (beta 0.1 for FedInit, 0 for the others), lr_decay None at the algorithm's
    paper decay. Hyperparameters the algorithm does not take stay None (not applicable).
    `task` holds the fields of the config's own dataset family only, at their values
    (tasks.own_fields); a config saved before families had fields of their own ran the
    synthetic family with alpha = dirichlet_alpha and beta = category_noise, and resolves
    to that. A config already resolved, or of an unknown algorithm (refused later), is
    returned as it is."""
    config = dict(config)
    if "dataset" in config:
        config.update(_task_fields(config))
    entry = algorithms.REGISTRY.get(config.get("algorithm"))
    if entry is None:
        return config
    for name, default in entry.defaults.items():
        if config.get(name) is None:
            config[name] = float(default)
    if config.get("lr_decay") is None and "lr_decay" in config:
        config["lr_decay"] = entry.local_lr_decay
    return config


AGGREGATIONS = ("uniform", "size")  # the server's mean over S: 1 / |S|, or n_i / sum_S n_j


class Plan(NamedTuple):
    """A config resolved once, before any data (plan(config)): what the build, its memory
    checks and the run loop receive instead of recomputing them from the config."""

    config: dict            # checked(): resolved and validated
    family: Any             # the dataset's tasks.Family
    runtime: Runtime        # how the round runs: execution resolved, devices chosen
    client_slots: int       # N, the static client axis (Bernoulli: the bound on |S|)
    expected_clients: int   # E|S|, round(participation * C)
    local_lr_decay: float   # eta_l's decay per round
    algorithm_kwargs: dict  # the algorithm builder's arguments


def checked(config) -> dict:
    """The config resolved (resolve) and validated (validate: ValueError naming the first bad
    field): all that can be known of it without this process's devices (a sweep's parent,
    whose workers see other devices, stops here)."""
    config = resolve(config)
    validate(config)
    return config


def plan(config) -> Plan:
    """The Plan of a config: checked (checked), and what follows from it on this process's
    devices computed once (the runtime, the client slots)."""
    config = checked(config)
    return Plan(config, tasks.family(config["dataset"]), runtime(config), client_slots(config),
                expected_clients(config), local_lr_decay(config), algorithm_kwargs(config))


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


SEED_MAX = 2**32 - 1  # numpy and jax.random.key take any seed up to this
MAX_CLIENTS = 2**31 - 1  # client ids are int32 in a round's input and the compiled round


def _fail(field, value, allowed):
    checks.fail(f"config.{field}", value, allowed)


def _number(config, field, *bounds, **kinds):
    checks.check_number(f"config.{field}", config[field], *bounds, **kinds)


def _choice(config, field, allowed):
    checks.check_choice(f"config.{field}", config[field], allowed)


def accepted_hparams(name: str) -> set:
    """Hyperparameters the registered algorithm `name` takes (its own and FedAvg's)."""
    return set(algorithms.REGISTRY[name].defaults)


def _check_task_fields(config) -> None:
    """config.task.<dataset>.<field>: only the fields a family declares, and only its own
    dataset's changed from their defaults (another family's would change nothing)."""
    for dataset, given in (config.get("task") or {}).items():
        declared = dict(tasks.family(dataset).fields) if dataset in tasks.REGISTRY else {}
        for name, value in (given or {}).items():
            if name not in declared:
                _fail(f"task.{dataset}.{name}", value,
                      f"not a field of the {dataset!r} family (its fields: "
                      f"{', '.join(declared) or 'none'})")
            if dataset != config["dataset"] and value != declared[name]:
                _fail(f"task.{dataset}.{name}", value,
                      f"a field of the {dataset!r} family, but config.dataset is "
                      f"{config['dataset']!r}: it would change nothing")


def validate(config) -> None:
    """ValueError naming the first bad field; checks what can be checked without data."""
    _choice(config, "algorithm", tuple(algorithms.REGISTRY))
    _choice(config, "model", models.NAMES)
    if not isinstance(config["dataset"], str) or not config["dataset"]:
        _fail("dataset", config["dataset"], "must name a dataset ('digits', a registered one: "
              f"{', '.join(repr(name) for name in tasks.REGISTRY)}, or a TFDS name)")
    _choice(config, "conv", models.CONV_IMPLEMENTATIONS)
    _choice(config, "partition", PARTITIONS)
    _choice(config, "participation_mode", data.PARTICIPATION_MODES)
    _choice(config, "participation_draw", data.BERNOULLI_DRAWS)
    if config["participation_mode"] == "fixed" and config["participation_draw"] != "per_client":
        _fail("participation_draw", config["participation_draw"],
              "how a Bernoulli S is drawn, but participation_mode is 'fixed': it would change "
              "nothing (use participation_mode=bernoulli, or leave it at per_client)")
    _choice(config, "delta_from", DELTA_FROM)
    _choice(config, "first_visit", FIRST_VISIT)
    _choice(config, "ri_offset", RI_OFFSETS)
    _choice(config, "client_state_dtype", CLIENT_STATE_DTYPES)
    _choice(config, "execution", ("auto",) + execution.STRATEGIES)
    _choice(config, "aggregation", AGGREGATIONS)
    _choice(config, "client_store", ("auto", *client_store.STORES))  # a registered store
    _check_task_fields(config)
    _number(config, "seed", 0, SEED_MAX, integer=True)
    for field in ("rounds", "local_epochs", "batch_size", "eval_every", "keep_checkpoints"):
        _number(config, field, 1, integer=True)
    _number(config, "num_clients", 1, MAX_CLIENTS, integer=True)
    _check_client_arrays(config)
    _number(config, "checkpoint_every", 0, integer=True)
    _number(config, "local_steps", 0, integer=True)
    _number(config, "num_devices", 0, integer=True)
    _number(config, "participation", 0.0, 1.0, low_open=True)
    _number(config, "local_lr", 0.0, low_open=True)
    _number(config, "lr_decay", 0.0, 1.0, low_open=True, optional=True)
    _number(config, "dirichlet_alpha", 0.0, low_open=True)
    _number(config, "classes_per_client", 1, integer=True)
    for field in ("client_noise", "category_noise"):
        _number(config, field, 0.0)
    for field in ("weight_decay", "clip_norm"):  # None or 0: off
        _number(config, field, 0.0, optional=True)
    _number(config, "model_width", 0.0, low_open=True)
    if config["model_width"] != 1.0 and config["model"] not in models.WIDTH_MODELS:
        _fail("model_width", config["model_width"],
              f"only {', '.join(models.WIDTH_MODELS)} take a width; keep 1.0 for {config['model']}")
    if config["execution"] == "chunked":
        _number(config, "chunk_size", 1, integer=True)
    elif config["chunk_size"] is not None:
        _fail("chunk_size", config["chunk_size"], "only execution=chunked takes a chunk size "
              f"(execution={config['execution']}); leave it unset")
    accepted = accepted_hparams(config["algorithm"])
    for field in algorithms.hparam_names():
        if config.get(field) is None:
            continue
        _number(config, field)
        if field not in accepted:
            _fail(field, config[field], f"is not a hyperparameter of {config['algorithm']} "
                  f"(it takes {', '.join(sorted(accepted))})")
    if (config["participation_mode"] == "bernoulli" and data.nonempty_probability(
            config["num_clients"], config["participation"]) < data.MIN_NONEMPTY):
        _fail("participation", config["participation"],
              f"with {config['num_clients']} clients a Bernoulli round draws nobody with "
              f"probability {1 - data.nonempty_probability(config['num_clients'], config['participation']):.6f}"  # noqa: E501
              f"; needs 1 - (1 - participation)^num_clients >= {data.MIN_NONEMPTY}")
    if (config["participation_mode"] == "fixed"
            and round(config["participation"] * config["num_clients"]) < 1):
        _fail("participation", config["participation"],
              f"samples no client of {config['num_clients']}: needs participation * "
              "num_clients >= 0.5")
    tasks.family(config["dataset"]).check(config)  # the dataset family's rules, typed fields
    try:  # the builder's own range checks (rho >= 0, 0 <= alpha <= 1, ...), before any data
        algorithms.get(config["algorithm"], _loss_never_called, **algorithm_kwargs(config))
    except ValueError as err:
        raise ValueError(f"config.{err}") from None


def _check_client_arrays(config) -> None:
    """The host keeps C client sizes (int32) and a Bernoulli round with the per_client draw
    makes C uniforms (float64): refused naming num_clients when they cannot fit the host's
    available memory (before anything is allocated)."""
    per_client = 4 + (8 if config["participation_mode"] == "bernoulli"
                      and config["participation_draw"] == "per_client" else 0)
    available = host_memory()
    if available is not None and config["num_clients"] * per_client > available:
        _fail("num_clients", config["num_clients"],
              f"needs {config['num_clients'] * per_client / 2**30:.1f} GiB of host memory for "
              f"its per-client arrays ({per_client} bytes a client), more than the "
              f"{available / 2**30:.1f} GiB available: at most "
              f"{available // per_client:,} clients on this host")


def _loss_never_called(params, batch, key):
    raise AssertionError("validate() builds the algorithm only to check its arguments")


def expected_clients(config) -> int:
    """E|S|: round(participation * C) under either participation rule (Table 9's N)."""
    return max(1, int(round(config["participation"] * config["num_clients"])))


def client_slots(config) -> int:
    """N, the static client axis: round(participation * C) (fixed), or the static bound on a
    Bernoulli |S| (data/participation.py); rounded up to a multiple of config.num_devices
    when set, the extra slots masked (padded) as Bernoulli's are."""
    if config["participation_mode"] == "bernoulli":
        return data.bernoulli_bound(config["num_clients"], config["participation"],
                                    multiple=config["num_devices"] or len(jax.devices()))
    devices = config["num_devices"] or (len(jax.devices()) if jax.process_count() > 1 else 1)
    return -(-expected_clients(config) // devices) * devices


def algorithm_kwargs(config) -> dict:
    """The builder arguments the config sets (unset hyperparameters keep their defaults)."""
    kwargs = {f: config[f] for f in algorithms.hparam_names() if config.get(f) is not None}
    taken = algorithms.REGISTRY[config["algorithm"]].options
    kwargs.update({f: config[f] for f in OPTIONS if f in taken})
    return kwargs


def options_not_applicable(config) -> dict:
    """The shared options the config sets that its algorithm does not take (delta_from for
    the FedDyn family, whose server replaces w): they change nothing, and the binaries say so
    and record them in run_info.json. A sweep or a paper preset sets them for every method."""
    taken = algorithms.REGISTRY[config["algorithm"]].options
    defaults = {"delta_from": "global", "first_visit": "init", "ri_offset": "model"}
    return {f: config[f] for f in OPTIONS
            if f not in taken and config[f] != defaults.get(f, None)}


def runtime(config) -> Runtime:
    """How the binaries run the round: never what it computes."""
    strategy = execution.resolve(config["execution"])
    return Runtime(execution=strategy, num_devices=num_devices(config),
                   chunk_size=config["chunk_size"] if strategy == "chunked" else None,
                   client_state_dtype=config["client_state_dtype"],
                   donate_state=True)  # the loop never reads a round's input state again


def num_devices(config) -> int:
    """config.num_devices, or (0) the most devices that split the clients evenly; a
    multi-process run shards over every process's devices (0: all of them, padded)."""
    n, available = client_slots(config), len(jax.devices())
    if jax.process_count() > 1 and config["num_devices"] not in (0, available):
        _fail("num_devices", config["num_devices"],
              f"a run of {jax.process_count()} processes shards the clients over all their "
              f"{available} devices: use 0 or {available}")
    if config["num_devices"]:
        if config["num_devices"] > available:
            _fail("num_devices", config["num_devices"],
                  f"must be <= the {available} {jax.default_backend()} devices here")
        return config["num_devices"]
    return max(d for d in range(1, available + 1) if n % d == 0)


def build(run_plan, client_store=None, log=None) -> Experiment:
    """Load and split the data, build the model, the loss and the algorithm of a Plan (or of
    a config, planned here); client_store (the one a resumed run recorded) replaces
    config.client_store="auto". log(line), if given, hears of each slow step (the data, the
    round's compilation) with its time."""
    log = log or (lambda line: None)
    run_plan = run_plan if isinstance(run_plan, Plan) else plan(run_plan)
    config = run_plan.config
    store = client_store if config["client_store"] == "auto" and client_store else (
        config["client_store"])
    if store == "host" and jax.process_count() > 1:
        _fail("client_store", store, "host memory is one process's, and a client's row must "
              "be readable by whichever process is dealt it: a multi-process run keeps its "
              "clients on the device or on disk in the shared workdir (device, disk or auto)")
    began = time.perf_counter()
    task = run_plan.family.build(config)
    log(f"data ready: {config['dataset']} over {config['num_clients']:,} clients "
        f"({time.perf_counter() - began:.1f} s to load, decode and split)")
    if not isinstance(task, tasks.Task):
        raise ValueError(f"config.dataset={config['dataset']!r}: its task family's build "
                         f"returned {type(task).__name__}, not a tasks.Task")
    algo = algorithms.get(config["algorithm"], task.loss_fn, runtime=run_plan.runtime,
                          **run_plan.algorithm_kwargs)
    key = jax.random.key(config["seed"])
    # the parameters' shapes (nothing allocated): every check below runs before the model is
    shapes = jax.eval_shape(lambda k: task.model.init(k, task.input_shape), key)
    state = costs.state_costs(algo, shapes)
    _check_round_input_size(run_plan, task)
    reason = "config.client_store"
    if store == "auto":
        store, reason = _auto_on_cpu(run_plan)
    if store in ("device", "auto"):
        try:  # the whole [C, ...] tables on the device, and the round compiled around them
            _check_memory(config, state)
            began = time.perf_counter()
            check_compiled_round(run_plan, algo, shapes, task)
            log(f"round compiled ({time.perf_counter() - began:.1f} s)")
            reason = "the tables and the compiled round fit" if store == "auto" else reason
            store = "device"
        except ValueError as err:
            if store == "device":
                raise
            _check_cohort_memory(run_plan, state, err)
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
    config = run_plan.config
    sampled = config["rounds"] * run_plan.client_slots
    if (jax.default_backend() != "cpu" or jax.process_count() > 1
            or sampled >= config["num_clients"]):
        return "auto", ""
    return "host", (f"auto on CPU, where the device's tables are host memory too: at most "
                    f"rounds x N = {sampled:,} of the {config['num_clients']:,} clients are "
                    "sampled, and the host store keeps only their rows")


def available_memory():
    """Bytes this process's first device can hold: its allocator's limit (GPU/TPU), or the
    host's MemAvailable (CPU); None when neither is known."""
    try:  # this process's own device (another process's cannot be asked)
        stats = jax.local_devices()[0].memory_stats() or {}
    except Exception:  # noqa: BLE001 - backends without memory statistics raise various kinds
        stats = {}
    if stats.get("bytes_limit"):
        return int(stats["bytes_limit"])
    return host_memory()


def host_memory():
    """The host's MemAvailable in bytes (None when unknown): where round inputs are built."""
    try:
        with open("/proc/meminfo") as f:
            fields = dict(line.split(":", 1) for line in f)
        return int(fields["MemAvailable"].split()[0]) * 1024
    except (OSError, KeyError, ValueError):
        return None


def _check_memory(config, state: costs.StateCosts):
    """ValueError before any allocation when even the state alone cannot fit: every client's
    w_i and per-client extras (C x their bytes, from the state's shapes) plus four copies
    of the model."""
    need = config["num_clients"] * state.per_client_bytes + 4 * 4 * state.d
    available = available_memory()
    if available is not None and need > available:
        field = "model_width" if config["model_width"] != 1.0 else "num_clients"
        _fail(field, config[field],
              f"the federation needs at least {need / 2**30:.1f} GiB ({config['num_clients']} "
              f"clients x {state.client_vectors} vectors x d={state.d:,} parameters, "
              f"{state.per_client_bytes:,} bytes a client) but {available / 2**30:.1f} GiB "
              "are available")


def _check_cohort_memory(run_plan, state: costs.StateCosts, device_error) -> None:
    """Before the clients go to host memory (client_store auto): the device must still hold
    the model's copies and one round's cohort rows; else the device's refusal stands."""
    need = run_plan.client_slots * state.per_client_bytes + 16 * 4 * state.d
    available = available_memory()
    if available is not None and need > available:
        raise device_error


def _check_round_input_size(run_plan, task: tasks.Task) -> None:
    """ValueError naming the field before a round input that cannot fit the host is built:
    N clients x K steps x B examples x (example + label + batch index bytes)."""
    config, n = run_plan.config, run_plan.client_slots
    need = n * task.steps * config["batch_size"] * task.example_bytes
    available = host_memory()
    if available is not None and need > available // 2:
        field = "local_steps" if config["local_steps"] else "local_epochs"
        _fail(field, config[field],
              f"a round's input needs {need / 2**30:.3g} GiB ({n} "
              f"clients x K={task.steps:,} steps x B={config['batch_size']} examples x "
              f"{task.example_bytes} bytes) but the host has {available / 2**30:.1f} GiB "
              "available (half of it may be used)")


def round_input(config, client_sizes, ids, mask, batches, step_mask, local_lr) -> RoundInput:
    """The round's RoundInput for the sampled ids: their sizes n_i when the server mean is
    weighted by them (config.aggregation="size"), else a uniform mean."""
    sizes = client_sizes[ids] if config["aggregation"] == "size" else None
    return RoundInput(ids, batches, np.float32(local_lr), mask, step_mask, sizes)


def masked(run_plan) -> bool:
    """Whether the run's rounds carry a slot mask (simulation._sample): Bernoulli |S|, or a
    fixed |S| padded to a multiple of the devices."""
    return (run_plan.config["participation_mode"] == "bernoulli"
            or run_plan.client_slots != run_plan.expected_clients)


def first_round_input(run_plan, task: tasks.Task) -> RoundInput:
    """A round input of the run's largest shapes and its dtypes, its batches abstract
    (jax.ShapeDtypeStruct: nothing of the N x K x B input is built on the host before the
    compiled round is known to fit). The shapes come from one real client, the largest, so
    that masked epochs take their largest K; every slot real."""
    config, n = run_plan.config, run_plan.client_slots
    largest = np.argsort(-np.asarray(task.client_sizes), kind="stable")
    ids = largest[np.arange(n) % config["num_clients"]].astype(np.int32)
    # a mask as the loop's rounds have one, else the first round would not reuse this compile
    mask = np.ones(n, bool) if masked(run_plan) else None
    one, step_mask = task.round_batches(ids[:1], np.random.default_rng(0))
    batches = jax.tree.map(lambda x: jax.ShapeDtypeStruct((n, *x.shape[1:]), x.dtype), one)
    if step_mask is not None:
        step_mask = np.ones((n, step_mask.shape[1]), bool)
    return round_input(config, task.client_sizes, ids, mask, batches, step_mask,
                       config["local_lr"])


def round_memory(compiled) -> dict:
    """XLA's memory account of a compiled round on one device, in bytes: arguments, outputs,
    temporaries, aliased (donated) and the peak it needs (args + outputs + temps - aliased)."""
    m = compiled.memory_analysis()
    account = {"arguments": m.argument_size_in_bytes, "outputs": m.output_size_in_bytes,
               "temporaries": m.temp_size_in_bytes, "aliased": m.alias_size_in_bytes}
    account["peak"] = (account["arguments"] + account["outputs"] + account["temporaries"]
                       - account["aliased"])
    return account


def check_compiled_round(run_plan, algo, params, task) -> None:
    """Compile the round ahead of time (the first round then reuses it) and refuse, naming a
    field, a run whose round does not fit the memory its devices have: XLA's own account
    per device against the device's limit (GPU/TPU), or, on CPU, devices x account against
    the host's available memory. params: arrays or their jax.ShapeDtypeStruct."""
    config = run_plan.config
    state = jax.eval_shape(lambda p: algo.init(p, config["num_clients"]), params)
    compiled = algo.apply.lower(state, first_round_input(run_plan, task),
                                jax.random.key(0)).compile()
    account = round_memory(compiled)
    available = available_memory()
    on_host = jax.default_backend() == "cpu"
    local = min(algo.runtime.num_devices, jax.local_device_count())  # this process's share of the mesh
    need = account["peak"] * (local if on_host else 1)
    if available is None or need <= available:
        return
    field = ("num_clients" if account["arguments"] > account["temporaries"] else "batch_size")
    where = (f"{local} CPU devices share {available / 2**30:.1f} GiB" if on_host else
             f"a device holds {available / 2**30:.1f} GiB")
    _fail(field, config[field],
          f"the compiled round needs {account['peak'] / 2**30:.1f} GiB per device (XLA: "
          f"arguments {account['arguments'] / 2**30:.1f}, temporaries "
          f"{account['temporaries'] / 2**30:.1f} GiB) and {where}; lower batch_size or the "
          "clients per round, use more devices (num_devices), or "
          "client_state_dtype=bfloat16")


def local_lr_decay(config) -> float:
    """The configured decay, else the algorithm's paper default (FedDyn 0.9995, else 0.998)."""
    if config["lr_decay"] is not None:
        return config["lr_decay"]
    return algorithms.REGISTRY[config["algorithm"]].local_lr_decay
