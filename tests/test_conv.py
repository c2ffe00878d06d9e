"""The matmul convolutions (fast, im2col) equal XLA's convolution in value and gradient."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from fedinit_jax import losses, models
from fedinit_jax.models.conv import cpu_conv, fast_conv, im2col_conv


# every conv shape of the models: ResNet-18's 7x7/2 stem, 3x3/1 and /2, 1x1/2 downsample,
# at odd sizes and down to 2x2 and 1x1 inputs; the CNN's 5x5 VALID; SAME padding
@pytest.mark.parametrize("conv", [fast_conv, im2col_conv, cpu_conv])
@pytest.mark.parametrize("kernel, stride, padding, size", [
    (3, 1, ((1, 1), (1, 1)), 11), (5, 1, "VALID", 11), (7, 2, ((3, 3), (3, 3)), 11),
    (1, 2, "VALID", 11), (3, 2, "SAME", 11), (3, 2, ((1, 1), (1, 1)), 2),
    (3, 1, ((1, 1), (1, 1)), 1), (1, 2, ((0, 0), (0, 0)), 2), (5, 1, "VALID", 16)])
def test_matmul_convs_match_stock(conv, kernel, stride, padding, size):
    rng = np.random.default_rng(0)
    x = jnp.asarray(rng.normal(size=(3, size, size, 4)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(kernel, kernel, 4, 5)), jnp.float32)
    dn = ("NHWC", "HWIO", "NHWC")

    def loss(conv, x, w):
        y = conv(x, w, (stride, stride), padding, dimension_numbers=dn)
        return jnp.sum(jnp.sin(y))

    stock = jax.grad(lambda x, w: loss(lax.conv_general_dilated, x, w), argnums=(0, 1))(x, w)
    fast = jax.grad(lambda x, w: loss(conv, x, w), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(conv(x, w, (stride, stride), padding),
                               lax.conv_general_dilated(x, w, (stride, stride), padding,
                                                        dimension_numbers=dn),
                               rtol=1e-5, atol=1e-5)
    for a, b in zip(stock, fast):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("conv", ["fast", "im2col"])
def test_cnn_gradients_equal_across_conv_implementations(conv):  # ResNet: below
    rng = np.random.default_rng(0)
    images = jnp.asarray(rng.integers(0, 256, (4, 32, 32, 3)), jnp.uint8)
    labels = jnp.arange(4) % 10
    grads = {}
    for impl in ("xla", conv):
        model = models.get("cnn", 10, conv=impl)
        params = model.init(jax.random.key(0), (32, 32, 3))
        loss = losses.classification_loss(model.apply, [0.5] * 3, [0.25] * 3, augment=False)
        grads[impl] = jax.jit(jax.grad(loss))(params, (images, labels), jax.random.key(0))
    for a, b in zip(jax.tree.leaves(grads["xla"]), jax.tree.leaves(grads[conv])):
        scale = float(jnp.max(jnp.abs(a))) + 1e-12
        assert float(jnp.max(jnp.abs(a - b))) / scale < 1e-4


@pytest.mark.slow  # ~8 s: every stride and padding of ResNet is in test_matmul_convs_match_stock
def test_im2col_resnet_gradients_equal_stock_in_float64():
    """The whole ImageNet-stem ResNet-18-GN: im2col's gradients equal XLA's convolution's in
    float64: the same function, so any float32 gap is rounding (in float32 both are ~1.5e-6
    of each leaf's largest entry from the float64 gradients, measured once)."""
    rng = np.random.default_rng(0)
    images = rng.normal(size=(4, 32, 32, 3))
    labels = np.arange(4)
    # any parameters serve (both forms get the same ones): N(0, 1/fan_in) from the shapes
    # alone, since ResNet-18's eager init compiles op by op (15 s of a cold suite)
    shapes = jax.eval_shape(lambda k: models.get("resnet18_gn", 10).init(k, (32, 32, 3)),
                            jax.random.key(0))
    params = jax.tree.map(lambda s: rng.normal(size=s.shape) / np.sqrt(np.prod(s.shape[:-1]) or 1),
                          shapes)
    with jax.enable_x64(True):
        grads = {}
        for impl, dtype in [("xla", jnp.float64), ("im2col", jnp.float64)]:
            model = models.get("resnet18_gn", 10, conv=impl)
            x = jnp.asarray(images, dtype)

            def loss(p, model=model, x=x):
                return -jnp.mean(jax.nn.log_softmax(model.apply(p, x))[jnp.arange(4), labels])

            p = jax.tree.map(lambda a, dtype=dtype: a.astype(dtype), params)
            grads[impl, dtype] = jax.tree.leaves(jax.jit(jax.grad(loss))(p))

        def worst(key):  # the largest error relative to its leaf's largest entry
            return max(float(np.max(np.abs(np.asarray(a, np.float64) - b)) / np.max(np.abs(b)))
                       for a, b in zip(grads[key], grads["xla", jnp.float64]))

        assert worst(("im2col", jnp.float64)) < 1e-12  # measured 4e-15


def test_unknown_conv():
    with pytest.raises(ValueError, match="conv="):
        models.get("cnn", 10, conv="cudnn")


@pytest.mark.parametrize("backend, execution, want", [
    ("cpu", "auto", cpu_conv), ("cpu", "vmap", cpu_conv), ("cpu", "sequential", cpu_conv),
    ("gpu", "auto", im2col_conv), ("gpu", "vmap", im2col_conv), ("gpu", "chunked", im2col_conv),
    ("gpu", "sequential", None), ("tpu", "auto", None), ("tpu", "vmap", None)])
def test_auto_conv_follows_backend_and_execution(monkeypatch, backend, execution, want):
    """conv='auto': cpu_conv on CPU; on GPU im2col for vmapped or chunked clients (auto
    execution is vmap there) and the stock conv (None) for sequential ones; stock on TPU."""
    from fedinit_jax.models.conv import conv_fn

    monkeypatch.setattr(jax, "default_backend", lambda: backend)
    assert conv_fn("auto", execution) is want
    assert conv_fn("xla", execution) is None and conv_fn("im2col", execution) is im2col_conv


@pytest.mark.parametrize("size", [8, 9])
def test_reshape_max_pool_equals_flax_max_pool(size):
    import flax.linen as nn

    from fedinit_jax.models.pool import max_pool_2x2

    x = jnp.asarray(np.random.default_rng(0).normal(size=(2, size, size, 3)), jnp.float32)
    np.testing.assert_array_equal(max_pool_2x2(x), nn.max_pool(x, (2, 2), strides=(2, 2)))
    g_ours = jax.grad(lambda x: jnp.sum(jnp.sin(max_pool_2x2(x))))(x)
    g_flax = jax.grad(lambda x: jnp.sum(jnp.sin(nn.max_pool(x, (2, 2), strides=(2, 2)))))(x)
    np.testing.assert_allclose(g_ours, g_flax, rtol=1e-6)  # no ties in continuous data
