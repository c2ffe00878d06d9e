"""A learnable cross-device federation: every client a perturbation of one shared model.

Synthetic(alpha, beta) (synthetic.py) gives each client a model of its own, so nothing global
is learnable. Here the clients share structure (config.dataset = "synthetic_shared"):

    W^0 [10 x 60], b^0 [10] ~ N(0, 1)                   (the shared model, from the seed)
    W_k = W^0 + alpha Z_k,  b_k = b^0 + alpha z_k       (client k's model, Z_k, z_k ~ N(0, 1))
    v_k ~ N(0, beta^2 I)                                (client k's input shift)
    x ~ N(v_k, I),  y = argmax(W_k x + b_k)             (100 examples, 80 to train on)

alpha and beta are the family's own fields (config.task.synthetic_shared.alpha, .beta;
default 0.5 and 1). Given x, the clients' logits are the shared model's plus independent
Gaussian noise of one variance in every class, so the most likely label is
argmax(W^0 x + b^0): the shared model is the Bayes-optimal global classifier, and its
accuracy (run_info.json's data_info, `shared_model_accuracy`) is the ceiling a global model
is measured against (a client's own model labels its data exactly).

Two test sets of 20 held-out examples per client, both evaluated every time:
  test_accuracy / test_loss          500 clients of the federation sampled in its first
                                     rounds (drawn as every run draws them:
                                     data.round_rng), so every one has trained;
  test_accuracy_new / test_loss_new  500 clients outside the federation (ids C, ..., C + 499),
                                     never sampled.
Each client's data is made from (seed, id) when it is needed: nothing of size C is built but
the [C] client sizes.
"""
import numpy as np

from fedinit_jax import checks, data
from fedinit_jax.experiment.tasks import synthetic
from fedinit_jax.experiment.tasks.family import AbstractRound, Family, Task
from fedinit_jax.experiment.tasks.synthetic import (
    CLASSES,
    FEATURES,
    PER_CLIENT,
    TEST_CLIENTS,
)

__all__ = ["shared_model", "client_data", "sampled_test_clients", "build", "check", "abstract",
           "FAMILY"]


def shared_model(seed: int):
    """(W^0 [10, 60], b^0 [10]) of the federation made from `seed`."""
    rng = np.random.default_rng([seed, 6])
    return rng.normal(size=(CLASSES, FEATURES)), rng.normal(size=CLASSES)


def client_data(client_id: int, alpha: float, beta: float, seed: int, shared=None):
    """Client `client_id`'s 100 examples: x [100, 60] float32, y [100] int32, from (seed, id)
    alone. shared: shared_model(seed), when the caller has it."""
    w0, b0 = shared or shared_model(seed)
    rng = np.random.default_rng([seed, 7, int(client_id)])
    w = w0 + alpha * rng.normal(size=w0.shape)
    b = b0 + alpha * rng.normal(size=b0.shape)
    v = beta * rng.normal(size=FEATURES)
    x = (v + rng.normal(size=(PER_CLIENT, FEATURES))).astype(np.float32)
    return x, np.argmax(x @ w.T + b, axis=1).astype(np.int32)


def sampled_test_clients(plan) -> np.ndarray:
    """Up to 500 distinct clients sampled in the run's first rounds, in order of sampling
    (fixed participation: the ids of data.sample_clients under the run's round rng)."""
    clients, per_round = plan.sampling.num_clients, plan.sampling.expected_clients
    seen, t = [], 0
    while len(seen) < min(TEST_CLIENTS, clients) and t < plan.schedule.rounds:
        rng = data.round_rng(plan.schedule.seed, t)
        seen.extend(int(i) for i in data.sample_clients(rng, clients, per_round)
                    if i not in seen)
        t += 1
    return np.asarray(seen[:TEST_CLIENTS], np.int64)


def build(plan) -> Task:
    fields, seed, clients = plan.data.fields, plan.schedule.seed, plan.sampling.num_clients
    shared = shared_model(seed)

    def make(i):
        return client_data(i, fields["alpha"], fields["beta"], seed, shared)

    new_ids = np.arange(clients, clients + TEST_CLIENTS)
    tests = {"": synthetic.held_out(*synthetic.stacked(sampled_test_clients(plan), make)),
             "_new": synthetic.held_out(*synthetic.stacked(new_ids, make))}
    ceiling = {f"test_accuracy{suffix}": float(np.mean(np.argmax(x @ shared[0].T + shared[1],
                                                                 axis=1) == y))
               for suffix, (x, y) in tests.items()}
    info = {"clients": clients, "generated": "per client, from (seed, id)",
            "test_examples": {f"test_accuracy{s}": int(y.shape[0]) for s, (_, y) in
                              tests.items()},
            "shared_model_accuracy": ceiling}
    return synthetic.generated_task(plan, make, tests, info)


def check(config) -> None:
    synthetic.check(config)
    if config["participation_mode"] != "fixed":
        checks.fail("config.participation_mode", config["participation_mode"],
                    "synthetic_shared's test clients are those its fixed sampling draws first: "
                    "use participation_mode=fixed")


def abstract(plan, slots: int) -> AbstractRound:
    return synthetic.abstract(plan, slots)


FAMILY = Family(build=build, check=check, abstract=abstract,
                natural_split="synthetic_shared", fields={"alpha": 0.5, "beta": 1.0})
