"""The global model's loss and accuracy on the whole federation's training data, from each
run's newest checkpoint, beside the run's own train_loss (the mean local loss during the
clients' steps).

    TFDS_DATA_DIR=../shared/tfds .venv/bin/python -m experiments.global_train_loss \
        WORKDIR [WORKDIR ...]

The training data: an image dataset's pooled training split (every client's images,
unaugmented); a Synthetic federation's (`synthetic`, `synthetic_shared`) every client's 80
training examples, made from (seed, id) as the run made them.

Why: SCAFFOLD's train_loss is higher than FedAvg's while its test accuracy is higher
(docs/study_cross_device.md). train_loss measures each client's loss along its own corrected
steps; this measures w on the pooled training data, which is what SCAFFOLD minimises.
"""
import os
import sys

import jax
import numpy as np

from fedinit_jax import client_store, losses, models
from fedinit_jax.experiment import build, plan, saved_config, workdir
from fedinit_jax.experiment.checkpoint import Checkpointer
from fedinit_jax.experiment.tasks import images, own_fields, synthetic, synthetic_shared

CHUNK = 1000  # Synthetic clients made and evaluated at a time


def synthetic_evaluator(config):
    """params -> {"test_loss", "test_accuracy"} of the model on every Synthetic client's 80
    training examples (made chunk by chunk: 10^5 clients are 8 x 10^6 examples)."""
    fields = own_fields(config)
    if config["dataset"] == "synthetic":
        def make(i):
            return synthetic.client_data(i, fields["alpha"], fields["beta"], config["seed"])
    else:
        shared = synthetic_shared.shared_model(config["seed"])

        def make(i):
            return synthetic_shared.client_data(i, fields["alpha"], fields["beta"],
                                                config["seed"], shared)
    model = models.get(config["model"], synthetic.CLASSES)
    loss_and_accuracy = jax.jit(lambda p, x, y: synthetic.loss_and_accuracy(model.apply, p, x,
                                                                            y))

    def evaluate(params):
        sums = np.zeros(2)
        for start in range(0, config["num_clients"], CHUNK):
            x, y = synthetic.stacked(range(start, min(start + CHUNK, config["num_clients"])),
                                     make)
            x = x[:, :synthetic.TRAIN].reshape(-1, synthetic.FEATURES)
            sums += len(x) * np.array(loss_and_accuracy(params, x, y[:, :synthetic.TRAIN]
                                                        .reshape(-1)))
        loss, accuracy = sums / (config["num_clients"] * synthetic.TRAIN)
        return {"test_loss": loss, "test_accuracy": accuracy}
    return evaluate


def image_evaluator(config, num_classes):
    """params -> {"test_loss", "test_accuracy"} on the image dataset's whole training split."""
    train_x, train_y, _ = images.load_split(config, "train")
    mean, std = images.CHANNEL_STATS.get(config["dataset"]) or images.channel_stats(train_x)
    net = images.model(config, num_classes)
    return losses.make_evaluator(net.apply, train_x, train_y, mean, std)


def main(workdirs):
    print("| run | round | global train loss | global train accuracy % | train_loss (last 20 "
          "rounds) | test accuracy % |")
    print("|---|---|---|---|---|---|")
    evaluators = {}
    for path in workdirs:
        config = saved_config(os.path.join(path, "config.json"))
        exp = build(plan(config))
        like = (client_store.server_state(exp.algorithm, exp.init_params)  # w is all we read
                if exp.client_store != "device"
                else exp.algorithm.init(exp.init_params, num_clients=config["num_clients"]))
        checkpointer = Checkpointer(path, log=lambda line: None)
        step, state = checkpointer.restore(like)
        checkpointer.close()
        key = (config["dataset"], config["seed"], config["num_clients"],
               tuple(sorted(own_fields(config).items())))
        if key not in evaluators:
            evaluators[key] = (synthetic_evaluator(config)
                               if config["dataset"] in ("synthetic", "synthetic_shared")
                               else image_evaluator(config, exp.num_classes))
        pooled = evaluators[key](state.params)
        rows = workdir.read_metrics(path, upto_round=step)
        local = sum(r["train_loss"] for r in rows[-20:]) / len(rows[-20:])
        test = [r["test_accuracy"] for r in rows if "test_accuracy" in r][-1]
        print(f"| {os.path.basename(os.path.normpath(path))} | {step} | "
              f"{float(pooled['test_loss']):.4f} | {100 * float(pooled['test_accuracy']):.2f} | "
              f"{local:.4f} | {100 * test:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
