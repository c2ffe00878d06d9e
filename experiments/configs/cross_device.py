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
methods are in results/cross_device (their commands and numbers in its README).
"""
from ml_collections import config_dict

from experiments.configs import default

CLIENTS_PER_ROUND = 100


def get_config():
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
