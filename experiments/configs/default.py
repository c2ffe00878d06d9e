"""Default: FedInit on the embedded digits dataset (scikit-learn), ~6 s on 2 CPU cores.

    python -m experiments.train --config experiments/configs/default.py --workdir /tmp/fedinit_default

20 clients, Dirichlet-0.1 split, 25% participation, an MLP, 60 rounds of 2 local epochs.
Every other config starts from this one and overrides what differs; any field can be
overridden on the command line, e.g. --config.algorithm=scaffold --config.beta=0.1.
"""
import ml_collections
from ml_collections import config_dict

from fedinit_jax import algorithms
from fedinit_jax.experiment import tasks


def get_config():
    c = ml_collections.ConfigDict()
    c.seed = 0
    # data
    c.dataset = "digits"            # 'digits' (embedded), 'shakespeare' (one client per role,
                                    # configs/shakespeare.py) or a TFDS name: cifar10, ...
    c.data_dir = ""                 # TFDS data dir ('' = $TFDS_DATA_DIR or TFDS's default);
                                    # shakespeare: the play texts ('' = found or fetched)
    c.cache_dir = ""                # decoded-array cache; '' = $FEDINIT_CACHE_DIR or ~/.cache
    c.num_clients = 20
    c.participation = 0.25          # clients per round = round(participation * num_clients)
    c.participation_mode = "fixed"  # fixed (that many, uniform) | bernoulli (each client with
                                    # probability participation, as the authors' code)
    c.participation_draw = "per_client"  # bernoulli only: per_client (a uniform per client,
                                    # O(C) a round) | count (|S| ~ Binomial(C, p), then |S|
                                    # clients: O(|S|), for millions of clients); one
                                    # distribution, different random streams
    # a dataset family's own fields, task.<namespace>.<field>: the image family's (digits,
    # cifar10, any TFDS image dataset) under task.images: partition (iid | dirichlet |
    # pathological), dirichlet_alpha, classes_per_client (pathological only), client_noise
    # (client-based RGB strength), category_noise (category-based brightness), augment
    # (flip + padded crop; off for 8x8 digits), validation (the fraction of the training
    # split held out and evaluated as val_accuracy, for tuning; 0: none);
    # task.synthetic.alpha, ... (tasks/*.py)
    c.task = ml_collections.ConfigDict(tasks.field_defaults())
    # model
    c.model = "mlp"
    c.model_width = 1.0             # cnn / mlp width multiplier
    c.conv = "auto"                 # auto (by backend and execution) | xla | fast | im2col
    # algorithm; every hyperparameter of a registered algorithm (beta, server_lr, rho, lam,
    # alpha, mu, b1, b2, eps, ...) is a field, None = the builder's documented default
    c.algorithm = "fedinit"
    for name in algorithms.hparam_names():
        c[name] = config_dict.placeholder(float)
    c.delta_from = "global"         # global (paper) | start (authors' code)
    c.first_visit = "init"          # init (Algorithm 1: w_i = w^0) | global (a client never
                                    # sampled starts from w: no RI offset on its first visit)
    c.ri_offset = "model"           # the RI offset o_i, w_i0 = w + beta o_i: model (Algorithm 1,
                                    # w - w_i) | next (w^{tau_i+1} - w_i) | drift (w^{tau_i} -
                                    # w_i) | momentum (next + m^t, the expected server steps
                                    # since the visit) | shared (m^t alone, every client
                                    # alike) | lookahead (the server's last step, FedACG's)
                                    # | any ri_offset.register-ed rule; all but model need
                                    # first_visit=global
    # local training
    c.local_lr = 0.1
    c.lr_decay = config_dict.placeholder(float)  # None: 0.998 (FedDyn 0.9995) per round
    c.weight_decay = config_dict.placeholder(float)
    c.weight_decay = 1e-3           # None (--config.weight_decay=None) or 0: no weight decay
    c.clip_norm = config_dict.placeholder(float)
    c.clip_norm = 10.0              # None (--config.clip_norm=None) or 0: no gradient clipping
    c.local_epochs = 2
    c.local_steps = 0               # 0: local_epochs over each client's data (clients of
                                    # unequal size: masked steps); K > 0: K steps drawn from it
    c.batch_size = 16
    c.aggregation = "uniform"       # uniform (paper: mean over S) | size (FedAvg's n_i / n)
    c.execution = "auto"            # auto | vmap | sequential | chunked
    c.chunk_size = config_dict.placeholder(int)
    c.num_devices = 0               # shard clients over devices; 0 = all that divide N evenly
    c.client_state_dtype = "float32"  # float32 | bfloat16 | float16: storage of every w_i, c_i...
    c.client_store = "auto"         # auto | device | host | disk: where w_i, c_i... live
                                    # (auto: the device when it fits, else host memory)
    # loop
    c.rounds = 60
    c.eval_every = 5
    c.checkpoint_every = 20
    c.keep_checkpoints = 2
    return c
