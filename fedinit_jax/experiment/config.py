"""A run's config: resolved (the values that decide the numbers written out), validated
(ValueError("config.<field>=...: what is allowed") before anything is loaded or compiled), and
what follows from it alone (E|S|, the builder's arguments, the lr decay).

The config is any mapping with the keys of experiments/configs/default.py (an ml_collections
ConfigDict there); config.json records it resolved.
"""
from fedinit_jax import algorithms, checks, client_store, data, execution, models, ri_offset
from fedinit_jax.checks import fail_config
from fedinit_jax.experiment import schema, tasks, workdir
from fedinit_jax.experiment.memory import check_client_arrays
from fedinit_jax.federated_round import CLIENT_STATE_DTYPES, DELTA_FROM

__all__ = ["OPTIONS", "read_recorded", "saved_config", "resolve", "AGGREGATIONS",
           "checked", "SEED_MAX", "MAX_CLIENTS", "accepted_hparams", "validate",
           "expected_clients", "algorithm_kwargs", "options_not_applicable", "local_lr_decay",
           "flat_fields"]

# algorithm hyperparameters a config may set (None = the registry's default)
OPTIONS = ("delta_from", "weight_decay", "clip_norm", "first_visit", "ri_offset")


def read_recorded(recorded) -> dict:
    """A config as it was recorded (config.json, a checkpoint's metadata, a sweep's status
    file), resolved: what resuming it means, and what a report compares. ValueError when it
    was recorded under another schema (schema.check)."""
    return resolve(schema.check(recorded))


def saved_config(path: str) -> dict:
    """A run's config.json read as recorded (read_recorded); ValueError naming the file
    when it cannot be read as a config of this version."""
    try:
        return read_recorded(workdir.read_json(path))
    except workdir.WorkdirError:
        raise
    except ValueError as err:
        raise workdir.WorkdirError(f"{path}: {err}") from None


def flat_fields(config, prefix: str = "") -> dict:
    """{dotted field: value} of a nested config (task.images.dirichlet_alpha: 0.1); an empty
    dict stays a value, so a namespace present in one config only is a difference."""
    flat = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(flat_fields(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _task_fields(config) -> dict:
    """resolve's `task`: the fields of the config's own family, at their values, and another
    family's only where they differ from its defaults (so validate refuses them)."""
    own_namespace = tasks.namespace(config["dataset"])
    family = tasks.family(config["dataset"])
    own = {own_namespace: tasks.own_fields(config)} if family.fields else {}
    for namespace, given in (config.get("task") or {}).items():
        known = tasks.namespace_family(namespace)
        if namespace not in own and (known is None or {**known.fields, **given} != dict(
                known.fields)):
            own[namespace] = dict(given)
    return {"task": own}


def resolve(config) -> dict:
    """The config with the values that decide the numbers made explicit, as config.json
    records them: each hyperparameter the algorithm takes that is None at its builder's
    default (beta 0.1 for FedInit, 0 for the others), lr_decay None at the algorithm's
    paper decay. Hyperparameters the algorithm does not take stay None (not applicable).
    `task` holds the fields of the config's own dataset family only, at their values
    (tasks.own_fields), and schema_version the schema (schema.stamp: a config of another
    schema is refused). A config already resolved, or of an unknown
    algorithm (refused later), is returned as it is."""
    config = schema.stamp(config)
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


def checked(config) -> dict:
    """The config resolved (resolve) and validated (validate: ValueError naming the first bad
    field): all that can be known of it without this process's devices (a sweep's parent,
    whose workers see other devices, stops here)."""
    config = resolve(config)
    validate(config)
    return config


SEED_MAX = 2**32 - 1  # numpy and jax.random.key take any seed up to this
MAX_CLIENTS = 2**31 - 1  # client ids are int32 in a round's input and the compiled round


def _number(config, field, *bounds, **kinds):
    checks.check_number(f"config.{field}", config[field], *bounds, **kinds)


def _choice(config, field, allowed):
    checks.check_choice(f"config.{field}", config[field], allowed)


def accepted_hparams(name: str) -> set:
    """Hyperparameters the registered algorithm `name` takes (its own and FedAvg's)."""
    return set(algorithms.REGISTRY[name].defaults)


def _check_task_fields(config) -> None:
    """config.task.<namespace>.<field>: only the fields a family declares, and only its own
    dataset's changed from their defaults (another family's would change nothing)."""
    own_namespace = tasks.namespace(config["dataset"])
    for namespace, given in (config.get("task") or {}).items():
        known = tasks.namespace_family(namespace)
        declared = dict(known.fields) if known is not None else {}
        for name, value in (given or {}).items():
            if name not in declared:
                fail_config(f"task.{namespace}.{name}", value,
                            f"not a field of the {namespace!r} family (its fields: "
                            f"{', '.join(declared) or 'none'})")
            if namespace != own_namespace and value != declared[name]:
                fail_config(f"task.{namespace}.{name}", value,
                            f"a field of the {namespace!r} family, but config.dataset is "
                            f"{config['dataset']!r}: it would change nothing")


def validate(config) -> None:
    """ValueError naming the first bad field; checks what can be checked without data."""
    _choice(config, "algorithm", tuple(algorithms.REGISTRY))
    _choice(config, "model", models.NAMES)
    if not isinstance(config["dataset"], str) or not config["dataset"]:
        fail_config("dataset", config["dataset"],
                    "must name a dataset ('digits', a registered one: "
                    f"{', '.join(repr(name) for name in tasks.REGISTRY)}, or a TFDS name)")
    _choice(config, "conv", models.CONV_IMPLEMENTATIONS)
    _choice(config, "participation_mode", data.PARTICIPATION_MODES)
    _choice(config, "participation_draw", data.BERNOULLI_DRAWS)
    if config["participation_mode"] == "fixed" and config["participation_draw"] != "per_client":
        fail_config("participation_draw", config["participation_draw"],
                    "how a Bernoulli S is drawn, but participation_mode is 'fixed': it would "
                    "change nothing (use participation_mode=bernoulli, or leave it at "
                    "per_client)")
    _choice(config, "delta_from", DELTA_FROM)
    try:  # a registered rule, a first visit, and one the rule can make
        ri_offset.rule(config["ri_offset"], config["first_visit"])
    except ValueError as err:  # "ri_offset=...: ...", as its flags
        raise ValueError(f"config.{err}") from None
    _choice(config, "client_state_dtype", CLIENT_STATE_DTYPES)
    _choice(config, "execution", ("auto",) + execution.STRATEGIES)
    _choice(config, "aggregation", AGGREGATIONS)
    _choice(config, "client_store", ("auto", *client_store.STORES))  # a registered store
    _check_task_fields(config)
    _number(config, "seed", 0, SEED_MAX, integer=True)
    for field in ("rounds", "local_epochs", "batch_size", "eval_every", "keep_checkpoints"):
        _number(config, field, 1, integer=True)
    _number(config, "num_clients", 1, MAX_CLIENTS, integer=True)
    check_client_arrays(config)
    _number(config, "checkpoint_every", 0, integer=True)
    _number(config, "local_steps", 0, integer=True)
    _number(config, "num_devices", 0, integer=True)
    _number(config, "participation", 0.0, 1.0, low_open=True)
    _number(config, "local_lr", 0.0, low_open=True)
    _number(config, "lr_decay", 0.0, 1.0, low_open=True, optional=True)
    for field in ("weight_decay", "clip_norm"):  # None or 0: off
        _number(config, field, 0.0, optional=True)
    _number(config, "model_width", 0.0, low_open=True)
    if config["model_width"] != 1.0 and config["model"] not in models.WIDTH_MODELS:
        fail_config("model_width", config["model_width"],
                    f"only {', '.join(models.WIDTH_MODELS)} take a width; keep 1.0 for "
                    f"{config['model']}")
    if config["execution"] == "chunked":
        _number(config, "chunk_size", 1, integer=True)
    elif config["chunk_size"] is not None:
        fail_config("chunk_size", config["chunk_size"], "only execution=chunked takes a chunk size "
                    f"(execution={config['execution']}); leave it unset")
    accepted = accepted_hparams(config["algorithm"])
    for field in algorithms.hparam_names():
        if config.get(field) is None:
            continue
        _number(config, field)
        if field not in accepted:
            fail_config(field, config[field], f"is not a hyperparameter of {config['algorithm']} "
                        f"(it takes {', '.join(sorted(accepted))})")
    if (config["participation_mode"] == "bernoulli" and data.nonempty_probability(
            config["num_clients"], config["participation"]) < data.MIN_NONEMPTY):
        fail_config("participation", config["participation"],
                    f"with {config['num_clients']} clients a Bernoulli round draws nobody with "
                    f"probability {1 - data.nonempty_probability(config['num_clients'], config['participation']):.6f}"  # noqa: E501
                    f"; needs 1 - (1 - participation)^num_clients >= {data.MIN_NONEMPTY}")
    if (config["participation_mode"] == "fixed"
            and round(config["participation"] * config["num_clients"]) < 1):
        fail_config("participation", config["participation"],
                    f"samples no client of {config['num_clients']}: needs participation * "
                    "num_clients >= 0.5")
    tasks.family(config["dataset"]).check(config)  # the dataset family's rules, typed fields
    try:  # the builder's own range checks (rho >= 0, 0 <= alpha <= 1, ...), before any data
        algorithms.get(config["algorithm"], _loss_never_called, **algorithm_kwargs(config))
    except ValueError as err:
        raise ValueError(f"config.{err}") from None


def _loss_never_called(params, batch, key):
    raise AssertionError("validate() builds the algorithm only to check its arguments")


def expected_clients(config) -> int:
    """E|S| of the config's participation and C (data.expected_clients)."""
    return data.expected_clients(config["participation"], config["num_clients"])


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


def local_lr_decay(config) -> float:
    """The configured decay, else the algorithm's paper default (FedDyn 0.9995, else 0.998)."""
    if config["lr_decay"] is not None:
        return config["lr_decay"]
    return algorithms.REGISTRY[config["algorithm"]].local_lr_decay
