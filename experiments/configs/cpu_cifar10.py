"""The CPU-sized CIFAR-10 study (README, "Findings"; docs/study.md).

    TFDS_DATA_DIR=../shared/tfds python -m experiments.train \
        --config experiments/configs/cpu_cifar10.py --workdir /tmp/cell --config.algorithm=fedinit

The paper's 10%-of-100-clients setting (Section 5.1) on the real CIFAR-10, scaled to what a
2-core CPU runs in a session: Dirichlet with replacement (alpha 0.1 here; the sweep adds 0.6),
100 clients, 10 sampled per round, batch 50, local lr 0.1 decayed by 0.998 per round (FedDyn
0.9995, the paper's), weight decay 1e-3, clip 10 - as the paper. What differs, for the budget:
  * model: the reference CNN at width 0.25 (conv5x5 16 - conv5x5 16 - fc 96 - fc 48 - fc 10,
    51,274 parameters; the paper uses ResNet-18-GN / VGG-11, 11.2M / 9.8M);
  * 1 local epoch (10 steps) instead of 5, and 60 rounds instead of 500;
  * no flip/crop augmentation (a regulariser for long training; here every run underfits);
  * evaluation every 5 rounds on the whole test split, one XLA CPU device (at this size a
    second device does not speed a round up).
Round and evaluation times: studies/cpu_cifar10 (train_seconds, eval_seconds per row).
studies/cpu_cifar10/run.sh runs the whole grid with experiments/sweep.py.

Preset `authors_e5` (`--config experiments/configs/cpu_cifar10.py:authors_e5`): the authors'
configuration at full model width, where their code and this library can be compared curve
by curve: the reference CNN at width 1 (their LeNet: conv5x5 64 - conv5x5 64 - fc 384 -
fc 192 - fc 10), Bernoulli participation (each of the 100 clients with probability 0.1, as
their simulator), 5 local epochs, flip + crop augmentation; the rest as above (Dir-0.1, batch
50, lr 0.1 x 0.998^t, wd 1e-3, clip 10, 60 rounds, test accuracy every 5 rounds).
studies/cpu_cifar10_authors_e5/run.sh runs FedAvg and FedInit (beta 0.1) under both
delta_from, 3 seeds.
"""
from experiments.configs import default


def get_config(preset: str = "study"):
    if preset not in ("study", "authors_e5"):
        raise ValueError(f"cpu_cifar10 preset {preset!r}: use study or authors_e5")
    c = default.get_config()
    c.dataset = "cifar10"
    c.num_clients = 100
    c.participation = 0.1
    c.task.images.partition = "dirichlet"
    c.task.images.dirichlet_alpha = 0.1
    c.task.images.augment = False
    c.model = "cnn"
    c.model_width = 0.25
    c.algorithm = "fedavg"
    c.local_lr = 0.1
    c.weight_decay = 1e-3
    c.clip_norm = 10.0
    c.local_epochs = 1
    c.batch_size = 50
    c.num_devices = 1
    c.rounds = 60
    c.eval_every = 5
    c.checkpoint_every = 20
    c.keep_checkpoints = 1
    if preset == "authors_e5":
        c.model_width = 1.0
        c.participation_mode = "bernoulli"
        c.local_epochs = 5
        c.task.images.augment = True
    return c
