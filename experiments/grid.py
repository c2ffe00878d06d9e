"""The sweep's grid: its cells (name, resolved and validated config), from the sweep's flags
(experiments/sweep.py): algorithms x Dirichlet alphas x betas x local epochs x delta_from x
the --grid axes x seeds on top of the config."""
import hashlib
import json
import re

from absl import flags

FLAGS = flags.FLAGS


def _parse(values, kind, field):
    try:
        return [kind(v) for v in values]
    except ValueError:
        raise ValueError(f"--{field}={','.join(values)}: every entry must be a "
                         f"{kind.__name__}") from None


ALPHA = "task.images.dirichlet_alpha"  # the --dirichlet_alphas axis (the image family's)
# the grid's own axes: a --grid over one of them is refused, naming its flag
SHORTHANDS = {"algorithm": "--algorithms", ALPHA: "--dirichlet_alphas",
              "beta": "--betas", "local_epochs": "--local_epochs",
              "delta_from": "--delta_from", "seed": "--seeds"}


def _value(text: str, like, field):
    """`text` read as the type of the config's value `like` (bool, int, float, str; None:
    a number if it reads as one, else the text); "None" is None for any field, as
    --config.FIELD=None (the config's checks refuse it where a field needs a value)."""
    if text == "None":
        return None
    if isinstance(like, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"--grid {field}={text}: config.{field} is a bool: true or false")
        return text.lower() == "true"
    for kind in ((int,) if isinstance(like, int) else (float,) if isinstance(like, float)
                 else () if isinstance(like, str) else (int, float)):
        try:
            return kind(text)
        except ValueError:
            if like is not None:
                raise ValueError(f"--grid {field}={text}: config.{field} is a "
                                 f"{kind.__name__}") from None
    return text


def lookup(config: dict, field: str):
    """config's value of a dotted field ("task.images.dirichlet_alpha"); KeyError if none."""
    for key in field.split("."):
        if not isinstance(config, dict):
            raise KeyError(field)
        config = config[key]
    return config


def with_field(config: dict, field: str, value) -> dict:
    """A copy of config with the dotted field set to value (the dicts on its path copied)."""
    head, _, rest = field.partition(".")
    return {**config, head: with_field(config[head], rest, value) if rest else value}


def grid_axes(base: dict) -> list:
    """[(field, [values])] of the --grid flags, in their order; ValueError naming the flag
    for an unknown field, one of the grid's own axes, an empty or repeated one."""
    axes = []
    for entry in FLAGS.grid:
        field, _, values = entry.partition("=")
        if field in SHORTHANDS:
            raise ValueError(f"--grid {entry}: {field} is an axis of its own: use "
                             f"{SHORTHANDS[field]}")
        try:
            like = lookup(base, field)
        except KeyError:
            raise ValueError(f"--grid {entry}: config has no field {field!r} (every field: "
                             "experiments/configs/default.py)") from None
        if isinstance(like, dict) or not values or field in dict(axes):
            raise ValueError(f"--grid {entry}: give FIELD=v1,v2,... once per field (a field "
                             "holding a value, e.g. task.images.dirichlet_alpha)")
        axes.append((field, [_value(v, like, field) for v in values.split(",")]))
    return axes


def cells(base: dict):
    """(name, config) for every cell of the grid, each config resolved and validated
    (experiment.checked: no devices asked; a cell's run plans it where it runs)."""
    import itertools

    from fedinit_jax import experiment
    from fedinit_jax.experiment import tasks

    natural = tasks.family(base["dataset"]).natural_split
    alphas = _parse(FLAGS.dirichlet_alphas, float, "dirichlet_alphas") or [lookup(base, ALPHA)]
    betas = _parse(FLAGS.betas, float, "betas") or [base["beta"]]
    epochs = _parse(FLAGS.local_epochs, int, "local_epochs") or [base["local_epochs"]]
    deltas = FLAGS.delta_from or [base["delta_from"]]
    axes = grid_axes(base)
    seeds = _parse(FLAGS.seeds, int, "seeds")
    for algorithm, alpha, beta, e, delta, *extra, seed in itertools.product(
            FLAGS.algorithms, alphas, betas, epochs, deltas, *(v for _, v in axes), seeds):
        chosen = dict(zip((f for f, _ in axes), extra))
        config = {**base, "algorithm": algorithm, "beta": beta, "local_epochs": e,
                  "delta_from": delta, "seed": seed}
        for field, value in ((ALPHA, alpha), *chosen.items()):
            config = with_field(config, field, value)
        config = experiment.checked(config)
        yield _cell_name(config, natural, chosen), config


def _cell_name(config, natural, chosen=None) -> str:
    """<algorithm>-<split>-beta<beta>-E<epochs>-<delta_from>[-<FIELD><value>...]-s<seed>,
    with the resolved beta."""
    from fedinit_jax.experiment import tasks

    alpha = tasks.own_fields(config).get("dirichlet_alpha")  # the image family's
    split = natural or (f"dir{alpha:g}" if alpha is not None else config["dataset"])
    extra = "".join(f"-{field}{_name_part(value)}" for field, value in (chosen or {}).items())
    return (f"{config['algorithm']}-{split}-beta{format(config['beta'], 'g')}-"
            f"E{config['local_epochs']}-{config['delta_from']}{extra}-s{config['seed']}")


def _name_part(value) -> str:
    """A grid value as part of a folder name: floats by %g, any character outside
    [A-Za-z0-9.+_-] (a path's '/') as '_' (two values that read alike are refused by
    cells_of_flags)."""
    text = format(value, "g") if isinstance(value, float) else str(value)
    return re.sub(r"[^A-Za-z0-9.+_-]+", "_", text).strip("_") or "_"


def cells_of_flags():
    """Every (name, config) of the grid, each validated; ValueError for an empty grid."""
    empty = [f"--{f}" for f in ("algorithms", "seeds") if not getattr(FLAGS, f)]
    if empty:
        raise ValueError(f"{' and '.join(empty)} is empty: the grid has no cell")
    base = FLAGS.config.to_dict()
    if base["local_steps"] and len(FLAGS.local_epochs) > 1:
        raise ValueError(f"--local_epochs={','.join(FLAGS.local_epochs)} with "
                         f"--config.local_steps={base['local_steps']}: K > 0 local steps "
                         "replace the local epochs, so these cells would be one run; drop one")
    grid = list(cells(base))  # every cell is checked before the first one runs
    names = [name for name, _ in grid]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ValueError(f"cells share a workdir name: {', '.join(twice)} (values that print "
                         "alike, e.g. --betas=0.1,0.1000001, or --dirichlet_alphas over a "
                         "dataset whose split is its own); give each cell distinct values")
    seen = {}
    for name, config in grid:
        other = seen.setdefault(fingerprint(config), name)
        if other != name:
            raise ValueError(f"cells {other} and {name} are one run (the same resolved "
                             "config, e.g. an algorithm's default beta also given in --betas)"
                             "; drop one")
    if FLAGS.cell is not None and not 0 <= FLAGS.cell < len(grid):
        raise ValueError(f"--cell={FLAGS.cell}: the grid has cells 0..{len(grid) - 1} "
                         "(see --list)")
    if FLAGS.workers < 1:
        raise ValueError(f"--workers={FLAGS.workers}: must be >= 1")
    return grid


def fingerprint(config: dict) -> str:
    """A short digest of a cell's resolved config: a status file speaks for it only."""
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:16]
