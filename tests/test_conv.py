"""The matmul-gradient convolution equals XLA's convolution in value and gradient."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from fedinit_jax import models, tasks
from fedinit_jax.models.conv import fast_conv


@pytest.mark.parametrize("kernel, stride, padding", [
    (3, 1, ((1, 1), (1, 1))), (5, 1, "VALID"), (7, 2, ((3, 3), (3, 3))), (1, 2, "VALID"),
    (3, 2, "SAME")])
def test_fast_conv_matches_stock(kernel, stride, padding):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, 11, 11, 4)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(kernel, kernel, 4, 5)), jnp.float32)
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(conv, x, w):
        y = conv(x, w, (stride, stride), padding, dimension_numbers=dn)
        return jnp.sum(jnp.sin(y))

    stock = jax.grad(lambda x, w: loss(lax.conv_general_dilated, x, w), argnums=(0, 1))(x, w)
    fast = jax.grad(lambda x, w: loss(fast_conv, x, w), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(fast_conv(x, w, (stride, stride), padding),
                               lax.conv_general_dilated(x, w, (stride, stride), padding,
                                                        dimension_numbers=dn), rtol=1e-6)
    for a, b in zip(stock, fast):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", ["cnn", "resnet18_gn_cifar"])
def test_model_gradients_equal_across_conv_implementations(name):
    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.integers(0, 256, (4, 32, 32, 3)), jnp.uint8)
    labels = jnp.arange(4) % 10
    grads = {}
    for conv in ("xla", "fast"):
        model = models.get(name, 10, conv=conv)
        params = model.init(jax.random.key(0), (32, 32, 3))
        loss = tasks.classification_loss(model.apply, [0.5] * 3, [0.25] * 3, augment=False)
        grads[conv] = jax.jit(jax.grad(loss))(params, (images, labels), jax.random.key(0))
    for a, b in zip(jax.tree.leaves(grads["xla"]), jax.tree.leaves(grads["fast"])):
        scale = float(jnp.max(jnp.abs(a))) + 1e-12
        assert float(jnp.max(jnp.abs(a - b))) / scale < 1e-4


def test_unknown_conv():
    with pytest.raises(ValueError, match="conv="):
        models.get("cnn", 10, conv="cudnn")


@pytest.mark.parametrize("size", [8, 9])
def test_reshape_max_pool_equals_flax_max_pool(size):
    import flax.linen as nn

    from fedinit_jax.models.pool import max_pool_2x2

    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, size, size, 3)), jnp.float32)
    np.testing.assert_array_equal(max_pool_2x2(x), nn.max_pool(x, (2, 2), strides=(2, 2)))
    g_ours = jax.grad(lambda x: jnp.sum(jnp.sin(max_pool_2x2(x))))(x)
    g_flax = jax.grad(lambda x: jnp.sum(jnp.sin(nn.max_pool(x, (2, 2), strides=(2, 2)))))(x)
    np.testing.assert_allclose(g_ours, g_flax, rtol=1e-6)  # no ties in continuous data
