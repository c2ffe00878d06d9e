"""The global model's loss and accuracy on the whole training split, from each run's newest
checkpoint, beside the run's own train_loss (the mean local loss during the clients' steps).

    TFDS_DATA_DIR=../shared/tfds .venv/bin/python \
        results/cross_device_cifar10/global_train_loss.py WORKDIR [WORKDIR ...]

Why: SCAFFOLD's train_loss is higher than FedAvg's while its test accuracy is higher
(docs/study_cross_device.md). train_loss measures each client's loss along its own corrected
steps; this measures w on the pooled training data, which is what SCAFFOLD minimises.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from fedinit_jax import losses  # noqa: E402
from fedinit_jax.experiment import build, plan, saved_config, workdir  # noqa: E402
from fedinit_jax.experiment.checkpoint import Checkpointer  # noqa: E402
from fedinit_jax.experiment.tasks import images  # noqa: E402


def main(workdirs):
    print("| run | round | global train loss | global train accuracy % | train_loss (last 20 "
          "rounds) | test accuracy % |")
    print("|---|---|---|---|---|---|")
    evaluators = {}
    for path in workdirs:
        config = saved_config(os.path.join(path, "config.json"))
        exp = build(plan(config))
        like = exp.algorithm.init(exp.init_params, num_clients=config["num_clients"])
        checkpointer = Checkpointer(path, log=lambda line: None)
        step, state = checkpointer.restore(like)
        checkpointer.close()
        key = (config["dataset"], config["seed"])
        if key not in evaluators:
            train_x, train_y, _ = images.load_split(config, "train")
            mean, std = images.CHANNEL_STATS.get(config["dataset"]) or images.channel_stats(
                train_x)
            net = images.model(config, exp.num_classes)
            evaluators[key] = losses.make_evaluator(net.apply, train_x, train_y, mean, std)
        pooled = evaluators[key](state.params)
        rows = workdir.read_metrics(path, upto_round=step)
        local = sum(r["train_loss"] for r in rows[-20:]) / len(rows[-20:])
        test = [r["test_accuracy"] for r in rows if "test_accuracy" in r][-1]
        print(f"| {os.path.basename(os.path.normpath(path))} | {step} | "
              f"{float(pooled['test_loss']):.4f} | {100 * float(pooled['test_accuracy']):.2f} | "
              f"{local:.4f} | {100 * test:.2f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
