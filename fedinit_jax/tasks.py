"""Image classification as a federated task: the clients' loss and the global evaluation.

loss_fn(params, (images uint8 [B, H, W, C], labels [B]), key) -> mean cross-entropy, with
normalisation by the dataset's per-channel mean/std and, for training, the reference's
augmentation drawn from `key` (data/augment.py). Evaluation: accuracy and mean loss of the
global model over a whole test split, in fixed-size batches (the last one masked).
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedinit_jax.data.augment import augment as augment_images
from fedinit_jax.data.augment import normalize


def classification_loss(apply_fn, mean, std, *, augment: bool = True):
    """(params, batch, key) -> mean softmax cross-entropy; augments on the device if asked."""

    def loss_fn(params, batch, key):
        images, labels = batch
        x = normalize(images, mean, std)
        if augment:
            x = augment_images(key, x)
        logits = apply_fn(params, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()

    return loss_fn


def make_evaluator(apply_fn, images, labels, mean, std, batch_size: int = 1000):
    """evaluate(params) -> {'test_accuracy', 'test_loss'} on the whole split (jit-compiled)."""
    n = len(labels)
    batch_size = min(batch_size, n)
    num_batches = -(-n // batch_size)
    pad = num_batches * batch_size - n
    xs = np.concatenate([images, np.zeros((pad, *images.shape[1:]), images.dtype)])
    ys = np.concatenate([labels, np.zeros((pad,), labels.dtype)]).astype(np.int32)
    mask = np.concatenate([np.ones(n, np.float32), np.zeros(pad, np.float32)])
    shape = (num_batches, batch_size)
    xs, ys, mask = (jnp.asarray(a.reshape(*shape, *a.shape[1:])) for a in (xs, ys, mask))

    @jax.jit
    def evaluate(params):
        def one_batch(args):
            x, y, m = args
            logits = apply_fn(params, normalize(x, mean, std))
            loss = optax.softmax_cross_entropy_with_integer_labels(logits, y)
            correct = (jnp.argmax(logits, -1) == y).astype(jnp.float32)
            return jnp.sum(loss * m), jnp.sum(correct * m)

        losses, corrects = jax.lax.map(one_batch, (xs, ys, mask))
        return {"test_accuracy": jnp.sum(corrects) / n, "test_loss": jnp.sum(losses) / n}

    return evaluate
