"""Synthetic(alpha, beta) of FedProx (Li et al. 2020, Section 5.1) as a cross-device task:
any number of clients, each client's data made on demand from (seed, its id), so nothing of
size C is built but the [C] client sizes.

Client k: u_k ~ N(0, alpha), W_k ~ N(u_k, 1) [10 x 60], b_k ~ N(u_k, 1); B_k ~ N(0, beta),
v_k ~ N(B_k, 1); x ~ N(v_k, diag(j^-1.2)), y = argmax(W_k x + b_k), 100 examples, 80 to train
on. The test set is the other 20 examples of the first 500 clients (10,000 examples). alpha and
beta are the family's own fields, config.task.synthetic.alpha and .beta (default 1, 1).
FedProx's model is multinomial logistic regression: config.model "linear" (or "mlp").

    python -m experiments.train --config experiments/configs/cross_device.py --workdir /tmp/xd
"""
import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedinit_jax import checks, data, models
from fedinit_jax.experiment.tasks.family import AbstractRound, Family, Task, own_fields

__all__ = ["TEST_CLIENTS", "MODELS", "client_data", "stacked", "held_out", "steps",
           "loss_and_accuracy", "generated_task", "build",
           "check", "abstract", "FAMILY"]

FEATURES, CLASSES, PER_CLIENT, TRAIN = 60, 10, 100, 80
TEST_CLIENTS = 500
MODELS = ("linear", "mlp")


def client_data(client_id: int, alpha: float, beta: float, seed: int):
    """Client `client_id`'s 100 examples: x [100, 60] float32, y [100] int32, from (seed, id)
    alone (the same wherever and whenever it is asked for)."""
    rng = np.random.default_rng([seed, 5, int(client_id)])
    u, big_b = rng.normal(0, np.sqrt(alpha)), rng.normal(0, np.sqrt(beta))
    w, b = rng.normal(u, 1, (CLASSES, FEATURES)), rng.normal(u, 1, CLASSES)
    v = rng.normal(big_b, 1, FEATURES)
    sigma = np.arange(1, FEATURES + 1) ** -1.2
    x = (v + rng.normal(size=(PER_CLIENT, FEATURES)) * np.sqrt(sigma)).astype(np.float32)
    return x, np.argmax(x @ w.T + b, axis=1).astype(np.int32)


def stacked(ids, make):
    """(x [N, 100, 60], y [N, 100]) of the clients `ids`, each made by make(id)."""
    xs, ys = zip(*(make(i) for i in np.asarray(ids).tolist()))
    return np.stack(xs), np.stack(ys)


def held_out(x, y):
    """Clients' 20 test examples (those after the first 80), pooled: [M, 60], [M]."""
    return x[:, TRAIN:].reshape(-1, FEATURES), y[:, TRAIN:].reshape(-1)


def steps(plan_data):
    """K: config.local_steps, else local_epochs passes over the 80 training examples."""
    return plan_data.local_steps or plan_data.local_epochs * (TRAIN // plan_data.batch_size)


def loss_and_accuracy(apply_fn, params, x, y):
    """(mean cross-entropy, accuracy) of the model on examples x [M, 60] with labels y [M]."""
    logits = apply_fn(params, x)
    return (optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(),
            jnp.mean(jnp.argmax(logits, -1) == y))


def generated_task(plan, make, tests, info) -> Task:
    """The Task of a federation whose clients' data make(id) generates on demand.

    Args:
      plan: the run's Plan (its model, C, local epochs or steps, batch size).
      make: client id -> (x [100, 60], y [100]); its first 80 examples are trained on.
      tests: {suffix: (x [M, 60], y [M])}: evaluate reports test_accuracy<suffix> and
        test_loss<suffix> of each.
      info: what the run was built from (Task.data_info).
    Returns:
      the Task.
    """
    d = plan.data
    model = models.get(d.model, CLASSES)
    tests = {suffix: (jnp.asarray(x), jnp.asarray(y)) for suffix, (x, y) in tests.items()}

    def loss_fn(params, batch, key):
        del key
        return loss_and_accuracy(model.apply, params, *batch)[0]

    @jax.jit
    def evaluate(params):
        metrics = {}
        for suffix, (x, y) in tests.items():
            loss, accuracy = loss_and_accuracy(model.apply, params, x, y)
            metrics.update({f"test_accuracy{suffix}": accuracy, f"test_loss{suffix}": loss})
        return metrics

    def round_batches(ids, rng):
        """The sampled clients' data made now, then batched as any shards are."""
        x, y = stacked(ids, make)
        shards = data.ClientShards(x[:, :TRAIN], y[:, :TRAIN])
        return data.round_batches(shards, np.arange(len(ids)), epochs=d.local_epochs,
                                  batch_size=d.batch_size, rng=rng, steps=d.local_steps), None

    return Task(round_batches, np.full(plan.sampling.num_clients, TRAIN, np.int32), loss_fn,
                evaluate, model, (FEATURES,), CLASSES, steps(d), 4 * FEATURES + 4 + 8, info)


def build(plan) -> Task:
    fields, seed, clients = plan.data.fields, plan.schedule.seed, plan.sampling.num_clients

    def make(i):
        return client_data(i, fields["alpha"], fields["beta"], seed)

    test_x, test_y = held_out(*stacked(range(min(TEST_CLIENTS, clients)), make))
    info = {"clients": clients, "generated": "per client, from (seed, id)",
            "test_examples": int(test_y.shape[0])}
    return generated_task(plan, make, {"": (test_x, test_y)}, info)


def check(config) -> None:
    if config["model"] not in MODELS:
        checks.fail("config.model", config["model"],
                    f"the synthetic dataset takes {' or '.join(MODELS)}")
    if config["batch_size"] > TRAIN:
        checks.fail("config.batch_size", config["batch_size"],
                    f"a synthetic client has {TRAIN} training examples: at most {TRAIN}")
    for name, value in own_fields(config).items():
        checks.check_number(f"config.task.{config['dataset']}.{name}", value, 0.0)


def abstract(plan, slots: int) -> AbstractRound:
    model = models.get(plan.data.model, CLASSES)
    k, b = steps(plan.data), plan.data.batch_size
    batches = (jax.ShapeDtypeStruct((slots, k, b, FEATURES), np.float32),
               jax.ShapeDtypeStruct((slots, k, b), np.int32))
    return AbstractRound(model, lambda p, batch, key: loss_and_accuracy(
        model.apply, p, *batch)[0], (FEATURES,), k, batches, None)


FAMILY = Family(build=build, check=check, abstract=abstract, natural_split="synthetic",
                fields={"alpha": 1.0, "beta": 1.0})
