"""Image classification: digits (embedded) or any TFDS image dataset, its training split
partitioned into equal-size client shards (iid, Dirichlet or pathological), the test split
evaluated with the global model. The default family of experiment.build.

Its own fields (FIELDS), under config.task.images whatever the image dataset:
    partition           iid | dirichlet (over labels, Hsu et al. 2019) | pathological
    dirichlet_alpha     the Dirichlet concentration (dirichlet only)
    classes_per_client  labels a client holds (pathological only)
    client_noise        client-based RGB strength (data/noise.py, the paper's Section 5.1)
    category_noise      category-based brightness (data/noise.py)
    augment             flip + padded crop of every local batch (CIFAR; off for 8x8 digits)
    validation          the fraction of the training split held out before it is partitioned
                        (one fixed draw, the same for every seed) and evaluated next to the
                        test split as val_accuracy / val_loss: what tuning selects by, the
                        test split untouched; 0: none
"""
from types import MappingProxyType

import jax
import numpy as np

from fedinit_jax import checks, data, losses, models
from fedinit_jax.checks import fail_config
from fedinit_jax.experiment.tasks.family import IMAGES, AbstractRound, Family, Task, own_fields

__all__ = ["FIELDS", "PARTITIONS", "VALIDATION_SEED", "EMBEDDED", "CHANNEL_STATS", "SHAPES",
           "load_split", "held_out", "evaluator", "partition", "model", "steps", "build",
           "check", "abstract", "channel_stats", "FAMILY"]

FIELDS = MappingProxyType({"partition": "dirichlet", "dirichlet_alpha": 0.1,
                           "classes_per_client": 2, "client_noise": 0.0,
                           "category_noise": 0.0, "augment": False, "validation": 0.0})
# the held-out draw of `validation`: the dataset's, not the run's (every seed and method is
# tuned on the same examples)
VALIDATION_SEED = 20211
PARTITIONS = ("iid", "dirichlet", "pathological")

EMBEDDED = {"digits": data.load_digits}
# per-channel statistics used to normalise (from the training splits)
CHANNEL_STATS = {
    "cifar10": ([0.4914, 0.4822, 0.4465], [0.2470, 0.2435, 0.2616]),
    "cifar100": ([0.5071, 0.4865, 0.4409], [0.2673, 0.2564, 0.2762]),
}
# (training examples, classes, example shape) of the datasets the planner knows without data
SHAPES = {"cifar10": (50_000, 10, (32, 32, 3)), "cifar100": (50_000, 100, (32, 32, 3)),
          "digits": (1_437, 10, (8, 8, 1))}


def _field(name: str) -> str:
    return f"task.{IMAGES}.{name}"


def load_split(plan_data, split):
    """(images, labels, num_classes) of the dataset's split (plan_data: a Plan's data part)."""
    name = plan_data.dataset
    if name in EMBEDDED:
        return EMBEDDED[name](split)
    return data.load(name, split, data_dir=plan_data.data_dir or None,
                     cache_dir=plan_data.cache_dir or None)


def held_out(num_examples: int, fraction: float):
    """(training indices, validation indices): round(fraction n) examples drawn once
    (VALIDATION_SEED) from the n of the training split, both sorted."""
    order = np.random.default_rng(VALIDATION_SEED).permutation(num_examples)
    size = round(fraction * num_examples)
    return np.sort(order[size:]), np.sort(order[:size])


def evaluator(net, test, validation, mean, std):
    """params -> {'test_accuracy', 'test_loss'} on the test split, with 'val_accuracy' and
    'val_loss' on the held-out examples when there are any."""
    on_test = losses.make_evaluator(net.apply, *test, mean, std)
    if validation is None:
        return on_test
    return losses.with_validation(on_test, losses.make_evaluator(net.apply, *validation, mean,
                                                                 std))


def partition(plan, labels):
    """Every client's example indices under task.images.partition."""
    c, seed, own = plan.sampling.num_clients, plan.schedule.seed, plan.data.fields
    if own["partition"] == "iid":
        return data.iid(labels, c, seed)
    if own["partition"] == "dirichlet":
        return data.dirichlet(labels, c, own["dirichlet_alpha"], seed)
    return data.pathological(labels, c, own["classes_per_client"], seed)


def model(plan, num_classes, conv=None):
    """The plan's image model (with its width where it takes one); conv replaces its
    convolution form."""
    d = plan.data
    return models.get(d.model, num_classes, conv=conv or d.conv, execution=plan.runtime.execution,
                      **({"width": d.model_width} if d.model in models.WIDTH_MODELS else {}))


def steps(plan_data, shard_size: int) -> int:
    """K: local_steps, else local_epochs passes over a shard."""
    return plan_data.local_steps or (
        plan_data.local_epochs * data.steps_per_epoch(shard_size, plan_data.batch_size))


def build(plan) -> Task:
    """The training split partitioned into equal shards (with the plan's noises)."""
    d, own = plan.data, plan.data.fields
    clients, seed = plan.sampling.num_clients, plan.schedule.seed
    train_x, train_y, num_classes = load_split(d, "train")
    test_x, test_y, _ = load_split(d, "test")
    validation = None
    if own["validation"]:
        kept, held = held_out(len(train_y), own["validation"])
        validation = (train_x[held], train_y[held])
        train_x, train_y = train_x[kept], train_y[kept]
    if clients > len(train_y):
        fail_config("num_clients", clients, f"more clients than the {len(train_y)} training "
                    "samples")
    if own["partition"] == "pathological" and own["classes_per_client"] > num_classes:
        fail_config(_field("classes_per_client"), own["classes_per_client"],
                    f"{d.dataset} has only {num_classes} classes")
    shard_size = len(train_y) // clients
    if d.batch_size > shard_size:
        fail_config("batch_size", d.batch_size,
                    f"must be <= the shard size {shard_size} ({len(train_y)} samples / "
                    f"{clients} clients)")
    shards = data.build_shards(train_x, train_y, partition(plan, train_y),
                               num_classes=num_classes, client_noise=own["client_noise"],
                               category_noise=own["category_noise"], seed=seed)
    mean, std = CHANNEL_STATS.get(d.dataset) or channel_stats(train_x)
    net = model(plan, num_classes)

    def round_batches(ids, rng):
        return data.round_batches(shards, ids, epochs=d.local_epochs, batch_size=d.batch_size,
                                  rng=rng, steps=d.local_steps), None

    return Task(round_batches, np.full(clients, shard_size),
                losses.classification_loss(net.apply, mean, std, augment=own["augment"]),
                evaluator(net, (test_x, test_y), validation, mean, std), net,
                train_x.shape[1:], num_classes, steps(d, shard_size),
                train_x[0].nbytes + train_y[0].nbytes + 8)


def check(config) -> None:
    """The image fields' values (named config.task.images.<field>) and an image model."""
    own = own_fields(config)
    checks.check_choice(f"config.{_field('partition')}", own["partition"], PARTITIONS)
    checks.check_number(f"config.{_field('dirichlet_alpha')}", own["dirichlet_alpha"], 0.0,
                        low_open=True)
    checks.check_number(f"config.{_field('classes_per_client')}", own["classes_per_client"], 1,
                        integer=True)
    for name in ("client_noise", "category_noise"):
        checks.check_number(f"config.{_field(name)}", own[name], 0.0)
    checks.check_number(f"config.{_field('validation')}", own["validation"], 0.0, 0.5)
    if not isinstance(own["augment"], bool):
        fail_config(_field("augment"), own["augment"], "must be true or false")
    if config["model"] in models.SEQUENCE_MODELS:
        fail_config("model", config["model"],
                    f"{config['dataset']} is image classification: it takes an image model, and "
                    f"a sequence model ({', '.join(models.SEQUENCE_MODELS)}) only a text task "
                    "(shakespeare)")


def abstract(plan, slots: int) -> AbstractRound:
    """The round's shapes from SHAPES (no download): [N, K, B, H, W, C] uint8 images."""
    d = plan.data
    if d.dataset not in SHAPES:
        raise ValueError(f"dataset {d.dataset!r}: its shapes are not known without "
                         f"loading it (known: {', '.join(SHAPES)})")
    size, classes, example = SHAPES[d.dataset]
    size -= len(held_out(size, d.fields["validation"])[1])
    net = model(plan, classes, conv="xla")  # the conv form does not change shapes
    channels = example[-1]  # the statistics do not change the shapes
    loss = losses.classification_loss(net.apply, [0.5] * channels, [0.25] * channels,
                                     augment=d.fields["augment"])
    k = steps(d, size // plan.sampling.num_clients)
    b = d.batch_size
    batches = (jax.ShapeDtypeStruct((slots, k, b, *example), np.uint8),
               jax.ShapeDtypeStruct((slots, k, b), np.int32))
    return AbstractRound(net, loss, example, k, batches, None)


def channel_stats(images):
    """Per-channel mean and std (floored at 1e-3) of uint8 images, scaled to [0, 1]."""
    x = images.astype(np.float64) / 255.0
    return list(x.mean((0, 1, 2))), list(np.maximum(x.std((0, 1, 2)), 1e-3))


FAMILY = Family(build=build, check=check, abstract=abstract, fields=FIELDS)
