"""Reading result folders and reducing them to the paper's numbers (used by report.py).

A run is a workdir holding config.json, metrics.jsonl and run_info.json. Runs that differ
only in their seed form a cell; a cell is identified by its setting (dataset, model, split,
clients, local epochs) and its method (algorithm, beta and every option that changes it:
results.rule_options).
"""
import os
from typing import NamedTuple

import numpy as np

from experiments import metrics
from fedinit_jax import algorithms


class Run(NamedTuple):
    path: str
    config: dict
    info: dict
    rows: list


# fields that do not change what a run computes (beyond float rounding): runs that differ
# only in these (and the seed) are repeats of one cell
NOT_IDENTITY = {"seed", "data_dir", "cache_dir", "execution", "chunk_size", "num_devices",
                "conv", "checkpoint_every", "keep_checkpoints", "paper_setting",
                "paper_accuracy", "_variant"}


def find_runs(folders, skipped=None) -> list[Run]:
    """Every readable run under the given folders (a folder may itself be a run).

    config.json is read as a resumed run reads it (experiment.saved_config: today's schema
    only). A run whose config.json (another schema among the reasons), run_info.json or
    metrics.jsonl is damaged, or a workdir that lacks config.json or metrics.jsonl, is left
    out; its path and the reason are appended to `skipped` (a list) when one is given."""
    from fedinit_jax.experiment import saved_config, workdir

    runs = []
    for folder in folders:
        if not os.path.isdir(folder):
            raise ValueError(f"results folder {folder!r} does not exist")
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            missing = [f for f in ("config.json", "metrics.jsonl") if f not in files]
            if len(missing) == 1 or (missing and ("run_info.json" in files
                                                  or "checkpoints" in dirs)):
                if skipped is not None:  # a workdir that lost a file: said, never dropped
                    skipped.append((root, f"no {' and no '.join(missing)}"))
                dirs[:] = [d for d in dirs if d not in ("checkpoints", "tb")]
                continue
            if not missing:
                try:
                    config = saved_config(os.path.join(root, "config.json"))
                    info_path = os.path.join(root, "run_info.json")
                    info = workdir.read_json(info_path) if os.path.exists(info_path) else {}
                    rows = workdir.read_metrics(root)
                    setting(config), method(config)  # the fields a report needs are there
                except (ValueError, KeyError, TypeError) as err:
                    if skipped is not None:
                        skipped.append((root, str(err).splitlines()[0][:300]))
                    rows = []
                if rows:
                    runs.append(Run(root, config, info, rows))
                dirs[:] = [d for d in dirs if d not in ("checkpoints", "tb")]
    return runs


def finished(run: Run) -> bool:
    """Every round 1..config.rounds is in the metrics (read_metrics keeps them in order)."""
    return len(run.rows) >= run.config["rounds"]


def label_variants(runs) -> list[Run]:
    """Runs of one (method, setting) whose configs differ in a field other than the seed (and
    NOT_IDENTITY) are different experiments: each gets config['_variant'], e.g.
    'local_lr=0.05' (a family's field by its dotted name: 'task.images.client_noise=0.1'),
    which method() shows, so they are never merged as seeds."""
    from fedinit_jax.experiment import flat_fields

    groups = {}
    for run in runs:
        groups.setdefault((method(run.config), setting(run.config)), []).append(run)
    out = []
    for group in groups.values():
        identities = [{k: v for k, v in flat_fields(r.config).items()
                       if k.split(".")[0] not in NOT_IDENTITY} for r in group]
        differing = sorted({k for ident in identities for k in ident
                            if any(other.get(k) != ident.get(k) for other in identities)})
        for run, ident in zip(group, identities):
            variant = ", ".join(f"{k}={ident.get(k)}" for k in differing)
            out.append(run._replace(config={**run.config, "_variant": variant})
                       if variant else run)
    return out


def unique(runs, dropped=None) -> list[Run]:
    """One run per (method, setting, seed), the first of each: e.g. fedinit with beta 0
    duplicates fedavg, and two workdirs of one config and seed are one run. Each run left
    out is appended to `dropped` (a list, if given) as (its path, the kept run's path)."""
    seen, kept = {}, []
    for run in runs:
        key = (method(run.config), setting(run.config), run.config["seed"])
        if key not in seen:
            seen[key] = run.path
            kept.append(run)
        elif dropped is not None:
            dropped.append((run.path, seen[key]))
    return kept


def beta_of(config) -> float:
    """The run's RI beta (its algorithm's default when unset); 0 for an algorithm whose
    beta is its own hyperparameter, not RI (takes_ri: FedACG)."""
    if not takes_ri(config):
        return 0.0
    if config.get("beta") is not None:
        return float(config["beta"])
    return float(algorithms.REGISTRY[config["algorithm"]].defaults.get("beta", 0.0))


def base_algorithm(config) -> str:
    """FedInit is FedAvg + RI: both report under the base 'fedavg'."""
    return "fedavg" if config["algorithm"] == "fedinit" else config["algorithm"]


def base_name(config) -> str:
    """Display name of the base algorithm (FedInit counts as FedAvg)."""
    base = base_algorithm(config)
    return algorithms.REGISTRY[base].display if base in algorithms.REGISTRY else base


# Algorithm 1's RI rule: a run that departs from it names the option in its method
RULE_DEFAULTS = {"ri_offset": "model", "first_visit": "init"}


def rule_options(config) -> list[str]:
    """The options of a run that change its method beyond the algorithm and beta, as
    'field=value': the RI rule where it departs from Algorithm 1 (ri_offset; first_visit
    where the offset is `model`, the others need `global`), and every server or client
    hyperparameter that differs from the algorithm's default (server_lr, b1, ...)."""
    parts = ["start"] if config.get("delta_from") == "start" else []
    if beta_of(config) != 0:
        offset = config.get("ri_offset") or RULE_DEFAULTS["ri_offset"]
        if offset != RULE_DEFAULTS["ri_offset"]:
            parts.append(f"ri_offset={offset}")
        elif (config.get("first_visit") or "init") != RULE_DEFAULTS["first_visit"]:
            parts.append(f"first_visit={config['first_visit']}")
    entry = algorithms.REGISTRY.get(config["algorithm"])
    defaults = entry.defaults if entry is not None else {}
    for name, default in defaults.items():
        value = config.get(name)
        if (name != "beta" or not takes_ri(config)) and value is not None and value != default:
            parts.append(f"{name}={value:g}")
    return parts


def takes_ri(config) -> bool:
    """Whether the run's algorithm takes an RI rule (its beta is "+RI"): FedACG's beta is
    its own lookahead weight, a hyperparameter like any other."""
    entry = algorithms.REGISTRY.get(config["algorithm"])
    return entry is None or "ri_offset" in entry.options


def bracketed(options) -> str:
    """' [a, b]' of a method's options (rule_options), '' for none."""
    return f" [{', '.join(options)}]" if options else ""


def method(config) -> str:
    """Display name: the algorithm, +RI with its beta, and every option that changes the
    method (rule_options), e.g. FedAvg, FedInit, SCAFFOLD+RI [ri_offset=momentum],
    FedInit(beta=0.2) [start], FedAdam [server_lr=0.01]."""
    beta = beta_of(config)
    if base_algorithm(config) == "fedavg" and beta != 0:
        name = "FedInit" if beta == 0.1 else f"FedInit(beta={beta:g})"
    else:
        name = base_name(config) + ("" if beta == 0 else
                                    "+RI" if beta == 0.1 else f"+RI(beta={beta:g})")
    name += bracketed(rule_options(config))
    return name + (f" ({config['_variant']})" if config.get("_variant") else "")


def setting(config) -> str:
    """Column label: dataset model split clients epochs."""
    from fedinit_jax.experiment import tasks

    own = tasks.own_fields(config)  # the image family's partition, unless the data has its own
    split = tasks.family(config["dataset"]).natural_split or {
        "dirichlet": f"Dir-{own.get('dirichlet_alpha', 0):g}", "iid": "IID",
        "pathological": f"Path-{own.get('classes_per_client')}"}.get(own.get("partition"),
                                                                     config["dataset"])
    part = f"{config['participation'] * 100:g}%-{config['num_clients']}"
    return f"{config['dataset']} {config['model']} {split} {part} E{config['local_epochs']}"


def curve(run: Run, field: str):
    """(rounds, values) of a metric over the rows that have it."""
    pts = [(r["round"], r[field]) for r in run.rows if field in r]
    return np.array([p[0] for p in pts]), np.array([p[1] for p in pts], np.float64)


def smoothed_accuracy(run: Run, window: int, field: str = "test_accuracy"):
    """(round each smoothed point ends at, moving-average test accuracy, or `field`)."""
    rounds, acc = curve(run, field)
    smooth = metrics.smooth(acc, window)
    return rounds[len(rounds) - len(smooth):], smooth


def final_accuracy(run: Run, window: int, last: int, field: str = "test_accuracy") -> float:
    """Smoothed test accuracy (or `field`), max over the points of the last `last` rounds
    (paper 5.1)."""
    ends, smooth = smoothed_accuracy(run, window, field)
    keep = ends > ends[-1] - last
    return float(np.max(smooth[keep]))


def seconds_per_round(run: Run):
    """Median train and eval seconds per round, the first (compiling) round left out (the
    median, so that a stretch of other work on a shared machine does not set the figure)."""
    train = [r["train_seconds"] for r in run.rows[1:]] or [run.rows[0]["train_seconds"]]
    evals = [r["eval_seconds"] for r in run.rows[1:] if "eval_seconds" in r]
    return float(np.median(train)), float(np.median(evals)) if evals else float("nan")


def machine(run: Run) -> str | None:
    """The machine a run's seconds come from ('<cpu>, <cores> cores, <device>', from
    run_info.json's sessions), or None when it is not recorded or the run ran on more than
    one: its timings compare with no other run's."""
    kinds = {(s.get("cpu"), s.get("cores"), s.get("device")) for s in run.info.get("sessions", [])}
    if len(kinds) != 1:
        return None
    cpu, cores, device = kinds.pop()
    return f"{cpu}, {cores} cores, {device}"


def load(run: Run) -> float:
    """The highest 1-minute load average at which a session of the run began (nan: none)."""
    loads = [s["load"] for s in run.info.get("sessions", []) if "load" in s]
    return max(loads) if loads else float("nan")


def to_target(run: Run, target: float, window: int):
    """(rounds, train seconds) until the smoothed accuracy first reaches target, or None;
    the time is rounds x the median seconds per round (the compiling first round left out)."""
    hit = metrics.rounds_to_target(*smoothed_accuracy(run, window), target)
    if hit is None:
        return None
    return hit, hit * seconds_per_round(run)[0]


def sample_std(values) -> float:
    """The sample standard deviation (ddof 1), the one spread every table and figure of this
    project reports; 0 for a single value."""
    values = np.asarray(values, np.float64)
    return float(values.std(ddof=1)) if values.size > 1 else 0.0


def mean_std(values) -> str:
    """'mean ± sample std (n=...)'; a single value has no spread: 'value (n=1)'."""
    values = np.asarray(values, np.float64)
    if values.size == 0:
        return "-"
    if values.size == 1:
        return f"{values[0]:.2f} (n=1)"
    return f"{values.mean():.2f} ± {sample_std(values):.2f} (n={values.size})"


def markdown(header, rows) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def method_order(name):
    """A method name's place in tables and legends: its base algorithm's in the registry."""
    order = [entry.display for entry in algorithms.REGISTRY.values()]  # the registry's order
    head = name.split("+")[0].split("(")[0].split(" ")[0]
    return (order.index(head) if head in order else len(order), name)
