"""A cross-device federation: Synthetic(1, 1) of FedProx (fedinit_jax/experiment/tasks/
synthetic.py) with 1,000,000 clients, 100 a round, each client's data made when it is
sampled and its state kept in host memory from its first visit (client_store=host).

    python -m experiments.train --config experiments/configs/cross_device.py --workdir /tmp/xd \
        --config.algorithm=fedinit
    # C: --config.num_clients=N (participation follows: 100 clients a round);
    # where the clients' state lives: --config.client_store=auto|device|host|disk

FedInit with first_visit="global": in 100 rounds of 100 out of 10^6 clients nearly every
sampled client is new, and Algorithm 1's first visit (from w + beta (w - w^0)) would carry
its offset into w every round (docs/algorithms.md, "First visit"). The runs of the three
methods are in studies/cross_device (their commands and numbers in its README). What that
preset measures is cost: each Synthetic(1, 1) client labels with its own random model and the
test clients are never sampled, so its test accuracy is chance by construction (10.7-10.9 %
for every method); it cannot tell methods apart.

Preset `cifar10-dir0.1` / `cifar10-dir0.6` (`--config experiments/configs/cross_device.py:
cifar10-dir0.1`): a learnable cross-device federation of real data where clients return after
long gaps: CIFAR-10's 50,000 training images over 1,000 clients (50 each, Dirichlet over the
labels), 10 clients a round (1 %: a client returns every ~100 rounds), the reference CNN at
width 0.25 (as experiments/configs/cpu_cifar10.py), 10 local steps of 10 examples (2 epochs),
local lr 0.1 x 0.998^t, 1,000 rounds, tested on the CIFAR-10 test split every 20 rounds.
    TFDS_DATA_DIR=../shared/tfds python -m experiments.train \
        --config experiments/configs/cross_device.py:cifar10-dir0.1 --workdir /tmp/xd_c10 \
        --config.algorithm=fedinit --config.ri_offset=next

Preset `synthetic-shared` (`--config experiments/configs/cross_device.py:synthetic-shared`): a
learnable synthetic federation of 100,000 clients, each a perturbation of one shared linear
model (fedinit_jax/experiment/tasks/synthetic_shared.py, alpha 0.5, beta 1), 100 clients a
round (0.1 %), multinomial logistic regression, 8 local steps of 10 examples, local lr 0.05,
300 rounds, tested every 10 rounds on held-out examples of 500 clients that were sampled
(test_accuracy) and of 500 that never were (test_accuracy_new); the shared model's accuracy
(the Bayes-optimal global classifier) is in run_info.json.
    python -m experiments.train --config experiments/configs/cross_device.py:synthetic-shared \
        --workdir /tmp/xd_shared --config.algorithm=fedinit --config.ri_offset=momentum
"""
from ml_collections import config_dict

from experiments.configs import default

CLIENTS_PER_ROUND = 100


PRESETS = ("synthetic", "synthetic-shared", "cifar10-dir0.1", "cifar10-dir0.6")


def get_config(preset: str = "synthetic"):
    if preset not in PRESETS:
        raise ValueError(f"cross_device preset {preset!r}: use one of {', '.join(PRESETS)}")
    if preset.startswith("cifar10"):
        return _cifar10(float(preset.split("dir")[1]))
    if preset == "synthetic-shared":
        return _synthetic_shared()
    c = default.get_config()
    c.dataset = "synthetic"
    c.model = "linear"              # FedProx's multinomial logistic regression
    c.task.synthetic.alpha = 1.0    # how much the clients' models differ
    c.task.synthetic.beta = 1.0     # how much their inputs differ
    c.num_clients = config_dict.FieldReference(1_000_000)
    c.participation = CLIENTS_PER_ROUND / c.get_ref("num_clients").to_float()
    c.client_store = "host"
    c.algorithm = "fedavg"
    c.first_visit = "global"
    c.local_lr = 0.05
    c.batch_size = 10
    c.local_epochs = 1              # 8 local steps of 10 of a client's 80 examples
    c.rounds = 100
    c.eval_every = 10
    c.checkpoint_every = 20
    return c


def _cifar10(alpha: float):
    c = default.get_config()
    c.dataset = "cifar10"
    c.num_clients = 1000
    c.participation = 0.01          # 10 clients a round
    c.task.images.partition = "dirichlet"
    c.task.images.dirichlet_alpha = alpha
    c.task.images.augment = False
    c.model = "cnn"
    c.model_width = 0.25
    c.algorithm = "fedavg"
    c.first_visit = "global"        # a client's first visit without Algorithm 1's w - w^0
    c.local_lr = 0.1
    c.weight_decay = 1e-3
    c.clip_norm = 10.0
    c.batch_size = 10
    c.local_epochs = 2              # 10 steps of 10 of a client's 50 examples
    c.num_devices = 1
    c.rounds = 1000
    c.eval_every = 20
    c.checkpoint_every = 100
    c.keep_checkpoints = 1
    return c


def _synthetic_shared():
    c = get_config("synthetic")
    c.dataset = "synthetic_shared"
    c.task.synthetic_shared.alpha = 0.5   # how much a client's model differs from the shared one
    c.task.synthetic_shared.beta = 1.0    # how much the clients' inputs differ
    c.num_clients = 100_000         # participation follows: 100 clients a round
    c.client_store = "auto"
    c.num_devices = 1
    c.rounds = 300
    c.checkpoint_every = 50
    c.keep_checkpoints = 1
    return c
