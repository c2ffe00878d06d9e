"""Models as pure (init, apply) pairs; algorithms never see flax.

    model = models.get("cnn", num_classes=10)
    params = model.init(key, (32, 32, 3))
    logits = model.apply(params, images)        # images [B, H, W, C] float32

    model = models.get("lstm", num_classes=shakespeare.VOCAB_SIZE)
    params = model.init(key, (80,))
    logits = model.apply(params, tokens)        # tokens [B, 80] int32 -> [B, 80, V]
"""
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from fedinit_jax.models.cnn import CNN
from fedinit_jax.models.conv import IMPLEMENTATIONS as CONV_IMPLEMENTATIONS  # noqa: F401
from fedinit_jax.models.conv import conv_fn
from fedinit_jax.models.flops import matmul_flops
from fedinit_jax.models.lstm import CharLSTM
from fedinit_jax.models.mlp import MLP
from fedinit_jax.models.resnet import ResNet18GN
from fedinit_jax.models.vgg import VGG11Net

__all__ = ["Model", "CONV_MODELS", "SEQUENCE_MODELS", "WIDTH_MODELS", "NAMES", "get",
           "num_params", "forward_flops"]


class Model(NamedTuple):
    init: Callable   # (key, input_shape [H, W, C] or [T]) -> params
    apply: Callable  # (params, images [B, H, W, C]) -> logits [B, classes]; lstm: [B, T, V]


_MODULES = {
    "cnn": lambda n, **kw: CNN(num_classes=n, **kw),
    "resnet18_gn": lambda n, **kw: ResNet18GN(num_classes=n, imagenet_stem=True, **kw),
    "resnet18_gn_cifar": lambda n, **kw: ResNet18GN(num_classes=n, imagenet_stem=False, **kw),
    "vgg11": lambda n, **kw: VGG11Net(num_classes=n, **kw),
    "mlp": lambda n, **kw: MLP(num_classes=n, **kw),
    "linear": lambda n, **kw: MLP(num_classes=n, hidden_layers=0, **kw),
    "lstm": lambda n, **kw: CharLSTM(vocab_size=n, **kw),
}
CONV_MODELS = ("cnn", "resnet18_gn", "resnet18_gn_cifar", "vgg11")  # they take `conv`
SEQUENCE_MODELS = ("lstm",)  # inputs are token ids [B, T], outputs logits [B, T, V]
WIDTH_MODELS = ("cnn", "mlp")  # models that take a `width` multiplier
NAMES = tuple(_MODULES)


def get(name: str, num_classes: int, *, conv: str = "auto", execution: str = "auto",
        **kwargs) -> Model:
    """The model `name` (one of NAMES) as a pure (init, apply) pair.

    conv: how the convolutional models (CONV_MODELS) compute a convolution: 'auto' (on CPU
    per conv the fastest matmul form, `conv.cpu_conv`; on GPU `im2col` when the clients are
    vmapped, XLA's when sequential; XLA's on TPU), 'xla', 'fast' or 'im2col'
    (models/conv.py); forward values agree to float rounding. execution: how the clients
    that train the model are executed (the round's `execution`), read only by conv='auto'.
    The other models have no convolution and take no such module argument (the options
    change nothing for them).
    """
    if name not in _MODULES:
        raise ValueError(f"model={name!r} is unknown; available: {', '.join(NAMES)}")
    if not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(f"num_classes={num_classes!r} must be an int >= 2")
    convolution = conv_fn(conv, execution)  # checked for every model: a misspelling is an error
    if name in CONV_MODELS:
        kwargs["conv"] = convolution
    module = _MODULES[name](num_classes, **kwargs)

    def init(key, input_shape):
        return module.init(key, jnp.zeros((1, *input_shape), jnp.float32))["params"]

    def apply(params, images):
        return module.apply({"params": params}, images)

    return Model(init, apply)


def num_params(params) -> int:
    """Number of scalar parameters."""
    return sum(int(x.size) for x in jax.tree.leaves(params))


def forward_flops(model: Model, params, input_shape) -> float:
    """Forward FLOPs per example: the matmul and convolution FLOPs of one example's jaxpr
    (`flops.matmul_flops`; the same count on every backend, unlike XLA's cost analysis,
    which does not count cuDNN/cuBLAS custom calls on GPU)."""
    x = jnp.zeros((1, *input_shape), jnp.float32)
    return matmul_flops(jax.make_jaxpr(model.apply)(params, x))
