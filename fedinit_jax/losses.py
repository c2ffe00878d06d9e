"""The losses and evaluators of the built-in tasks: the clients' loss and the global evaluation.

Image classification:

loss_fn(params, (images uint8 [B, H, W, C], labels [B]), key) -> mean cross-entropy, with
normalisation by the dataset's per-channel mean/std and, for training, the reference's
augmentation drawn from `key` (data/augment.py). Evaluation: accuracy and mean loss of the
global model over a whole test split, in fixed-size batches (the last one masked).

Next-character prediction (Shakespeare, data/shakespeare.py):
loss_fn(params, (x, y), key) -> mean cross-entropy over the targets that are not
PAD (an all-PAD batch, a masked step, gives 0). Evaluation (make_text_evaluator), two
accuracies, each over targets the model can hit:
* test_accuracy, the published definition of Reddi et al. 2021 (the code behind their 56.9%,
  google-research/federated optimization/shakespeare: MaskedCategoricalAccuracy with PAD
  masked): argmax over every logit, counted over every target but PAD. Their windows never
  hold a BOS target (each speech is padded on its own); ours join speeches (fedjax's
  construction), so the BOS after each EOS is left out too, keeping the same kinds of targets
  (characters, OOV, EOS).
* test_accuracy_in_vocab, fedjax's "accuracy_in_vocab" (fedjax/models/shakespeare.py):
  argmax over the 86 characters only (PAD, BOS, EOS, OOV logits masked), counted over the
  targets that are characters; fedjax also counts BOS and OOV targets, which that mask makes
  always wrong.
test_loss is the mean cross-entropy over the non-PAD targets.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

from fedinit_jax.data import shakespeare
from fedinit_jax.data.augment import augment as augment_images
from fedinit_jax.data.augment import normalize

__all__ = ["classification_loss", "make_evaluator", "next_character_loss", "make_text_evaluator",
           "with_validation"]


def _in_batches(a, batch_size: int):
    """[n, ...] -> [ceil(n / batch_size), batch_size, ...] on the device, the last batch
    filled with zero rows (which the evaluators mask out)."""
    pad = -len(a) % batch_size
    a = np.concatenate([a, np.zeros((pad, *a.shape[1:]), a.dtype)])
    return jnp.asarray(a.reshape(-1, batch_size, *a.shape[1:]))


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
    xs = _in_batches(images, batch_size)
    ys = _in_batches(labels.astype(np.int32), batch_size)
    mask = _in_batches(np.ones(n, np.float32), batch_size)  # padded rows: 0

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


def next_character_loss(apply_fn):
    """(params, (x, y), key) -> mean cross-entropy over y != PAD (0 when every y is PAD)."""

    def loss_fn(params, batch, key):
        del key
        x, y = batch
        ce = optax.softmax_cross_entropy_with_integer_labels(apply_fn(params, x), y)
        real = (y != shakespeare.PAD).astype(ce.dtype)
        return jnp.sum(ce * real) / jnp.maximum(jnp.sum(real), 1.0)

    return loss_fn


def make_text_evaluator(apply_fn, x, y, batch_size: int = 256):
    """evaluate(params) -> {'test_accuracy', 'test_accuracy_in_vocab', 'test_loss'} over
    every test window (the module docstring defines each)."""
    batch_size = min(batch_size, len(x))
    xs, ys = _in_batches(x, batch_size), _in_batches(y, batch_size)  # padded rows: PAD = 0
    special = np.array([shakespeare.PAD, shakespeare.BOS, shakespeare.EOS, shakespeare.OOV])
    logit_mask = jnp.zeros((1, 1, shakespeare.VOCAB_SIZE)).at[..., special].set(-jnp.inf)
    targets = max(float(np.sum((y != shakespeare.PAD) & (y != shakespeare.BOS))), 1.0)
    characters = max(float(np.sum(~np.isin(y, special))), 1.0)
    tokens = max(float(np.sum(y != shakespeare.PAD)), 1.0)

    @jax.jit
    def evaluate(params):
        def one_batch(args):
            xb, yb = args
            logits = apply_fn(params, xb)
            ce = optax.softmax_cross_entropy_with_integer_labels(logits, yb)
            real = yb != shakespeare.PAD
            counted = real & (yb != shakespeare.BOS)
            character = ~jnp.isin(yb, special)
            correct = jnp.argmax(logits, -1) == yb
            correct_in_vocab = jnp.argmax(logits + logit_mask, -1) == yb
            return (jnp.sum(jnp.where(real, ce, 0.0)), jnp.sum(correct & counted),
                    jnp.sum(correct_in_vocab & character))

        losses, corrects, corrects_in_vocab = jax.lax.map(one_batch, (xs, ys))
        return {"test_accuracy": jnp.sum(corrects) / targets,
                "test_accuracy_in_vocab": jnp.sum(corrects_in_vocab) / characters,
                "test_loss": jnp.sum(losses) / tokens}

    return evaluate


def with_validation(on_test, on_validation):
    """evaluate(params) -> on_test's metrics and on_validation's, each of the latter renamed
    test_* -> val_* (val_accuracy, val_loss, ...): a held-out validation split evaluated
    beside the test split, what tuning selects by (experiments/tuning_report.py).

    Args:
      on_test, on_validation: evaluators (params -> {'test_...': value}) of the two splits.
    Returns:
      The evaluator of both."""

    def evaluate(params):
        return {**on_test(params), **{f"val_{k.removeprefix('test_')}": v
                                      for k, v in on_validation(params).items()}}

    return evaluate
