"""Models: parameter counts pinned to the reference, output shapes, bad names."""
import jax
import jax.numpy as jnp
import pytest

from fedinit_jax import models

EXPECTED = {"cnn": 797_962, "resnet18_gn": 11_181_642, "resnet18_gn_cifar": 11_173_962,
            "vgg11": 9_750_922, "mlp": 3072 * 128 + 128 + 128 * 128 + 128 + 128 * 10 + 10,
            "linear": 3072 * 10 + 10,
            "lstm": 8 * 10 + 4 * 256 * (8 + 256 + 1) + 4 * 256 * (512 + 1) + 257 * 10}


@pytest.mark.parametrize("name", models.NAMES)
def test_param_counts_and_shapes(name):
    model = models.get(name, num_classes=10)
    shape = (80,) if name in models.SEQUENCE_MODELS else (32, 32, 3)
    params = jax.eval_shape(lambda k: model.init(k, shape), jax.random.key(0))
    assert models.num_params(params) == EXPECTED[name]
    logits = jax.eval_shape(model.apply, params, jnp.zeros((3, *shape)))
    assert logits.shape == ((3, 80, 10) if name in models.SEQUENCE_MODELS else (3, 10))


def test_cnn_forward_and_flops():
    model = models.get("cnn", num_classes=100)
    params = model.init(jax.random.key(0), (32, 32, 3))
    assert model.apply(params, jnp.zeros((2, 32, 32, 3))).shape == (2, 100)
    flops = models.forward_flops(model, params, (32, 32, 3))
    # conv1 28*28*5*5*3*64 + conv2 10*10*5*5*64*64 + dense layers, 2 FLOPs per MAC
    macs = 28 * 28 * 75 * 64 + 10 * 10 * 1600 * 64 + 1600 * 384 + 384 * 192 + 192 * 100
    assert 2 * macs <= flops <= 2 * macs * 1.1


@pytest.mark.slow  # ~6 s: a computation dtype the binaries never set by default
def test_cnn_in_bfloat16_keeps_float32_parameters_and_logits():
    """dtype=bfloat16 computes in bfloat16 (flax's mixed precision): float32 parameters and
    logits, within bfloat16 rounding of the float32 model's; the default keeps the inputs'
    dtype (float64 here), which the float64 gradient checks rely on."""
    x = jax.random.normal(jax.random.key(1), (4, 32, 32, 3))
    params = models.get("cnn", 10).init(jax.random.key(0), (32, 32, 3))
    want = models.get("cnn", 10).apply(params, x)
    got = models.get("cnn", 10, dtype=jnp.bfloat16).apply(params, x)
    assert got.dtype == jnp.float32
    assert float(jnp.max(jnp.abs(got - want))) <= 0.05 * float(jnp.max(jnp.abs(want)))
    assert float(jnp.max(jnp.abs(got - want))) > 0  # really computed in bfloat16
    with jax.enable_x64():
        params64 = jax.tree.map(lambda a: a.astype(jnp.float64), params)
        out = models.get("cnn", 10).apply(params64, x.astype(jnp.float64))
        assert out.dtype == jnp.float64


def test_unknown_model():
    with pytest.raises(ValueError, match="available: cnn"):
        models.get("resnet50", num_classes=10)
    with pytest.raises(ValueError, match="num_classes"):
        models.get("cnn", num_classes=1)


def test_matmul_flops_counts_inner_jaxprs_as_a_hand_count():
    """flops.matmul_flops against FLOPs counted by hand: a dot in a scan of length 5, the
    larger branch of a cond, a convolution (2 per multiply-add, elementwise work not counted)."""
    from fedinit_jax.models.flops import matmul_flops

    def f(a, x, k):
        def body(carry, _):
            return jnp.tanh(carry @ a), None  # [4, 6] @ [6, 6]: 2 * 4 * 6 * 6 each

        y, _ = jax.lax.scan(body, x, None, length=5)
        z = jax.lax.cond(y.sum() > 0, lambda v: v @ a @ a, lambda v: v, y)  # two dots
        img = jnp.zeros((2, 9, 9, 3))  # 3x3 conv, 3 -> 8 features, 'VALID': 7x7 outputs
        c = jax.lax.conv_general_dilated(img, k, (1, 1), "VALID",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return z.sum() + c.sum()

    a, x, k = jnp.ones((6, 6)), jnp.ones((4, 6)), jnp.ones((3, 3, 3, 8))
    want = 5 * 2 * 4 * 6 * 6 + 2 * (2 * 4 * 6 * 6) + 2 * (2 * 7 * 7 * 8) * (3 * 3 * 3)
    assert matmul_flops(jax.make_jaxpr(f)(a, x, k)) == want
