"""The Shakespeare character model of the FedAvg paper (McMahan et al. 2017), as LEAF, TFF
and fedjax use it: an 8-dimensional character embedding, two LSTM layers of 256 units, and a
dense layer to the vocabulary, applied at every position (next-character logits [B, T, V]).

An LSTM layer holds 4 H (I + H) weights and 4 H biases (one bias per gate, as Keras and
haiku), so with V = 90 the model has 8 V + 271,360 + 525,312 + 257 V = 820,522 parameters
(docs/shakespeare.md compares the published counts). The parameters are flax's
`OptimizedLSTMCell`'s (same names, shapes and initialisation) under both recurrences:

* `recurrence="fused"` (the default): `lstm_layer`, the recurrence with a hand-written
  backward pass that computes the weight gradients as one GEMM over all positions after the
  reverse time loop, as cuDNN and oneDNN do (autodiff of a scan adds a rank-B update into the
  [H, 4H] weight gradient at every position: the round's main cost at B = 4);
* `recurrence="scan"`: flax's `nn.RNN(OptimizedLSTMCell)`, a `lax.scan` differentiated by
  JAX (the reference; Shakespeare results made before this form existed used it).

The two agree to float rounding (tests/test_shakespeare.py checks the float64 gradients).
"""
import flax.linen as nn
import jax
import jax.numpy as jnp

__all__ = ["GATES", "lstm_layer", "cell_weights", "CharLSTM"]

GATES = "ifgo"


def _zeros(like, features):
    """Zeros [..., features] shaped and varying as `like` (under shard_map the carry must
    vary over the client mesh as the scanned inputs do; a fresh jnp.zeros would not)."""
    return jnp.zeros_like(like[..., :1], shape=like.shape[:-1] + (features,))


def _shift(a):
    """a[t - 1] at position t, zeros at t = 0 (h_{t-1} and c_{t-1} from h_t and c_t)."""
    return jnp.concatenate([jnp.zeros_like(a[:1]), a[:-1]])


def _recurrence(w_x, w_h, b, xs, residuals: bool):
    """xs [T, B, I] -> h [T, B, H], with residuals also c [T, B, H] and the gates
    [T, B, 4H] after their activations:
    z_t = x_t W_x + b + h_{t-1} W_h = [i, f, g, o] pre-activation,
    c_t = sigma(f) c_{t-1} + sigma(i) tanh(g),  h_t = sigma(o) tanh(c_t),  h_0 = c_0 = 0.
    Training (residuals) projects the inputs in one GEMM before the loop; evaluation, with
    its large batches, inside it (the [T, B, 4H] projection would not stay in cache)."""
    if residuals:
        inputs, project = jnp.einsum("tbi,ig->tbg", xs, w_x) + b[None, None], lambda z: z
    else:
        inputs, project = xs, lambda x_t: x_t @ w_x + b[None]

    def step(carry, input_t):
        c, h = carry
        i, f, g, o = jnp.split(project(input_t) + h @ w_h, 4, -1)
        i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
        c = f * c + i * g
        h = o * jnp.tanh(c)
        return (c, h), ((h, c, jnp.concatenate([i, f, g, o], -1)) if residuals else h)

    zero = _zeros(xs[0], w_h.shape[0])
    return jax.lax.scan(step, (zero, zero), inputs)[1]


@jax.custom_vjp
def lstm_layer(w_x, w_h, b, xs):
    """One LSTM layer, xs [T, B, I] -> h [T, B, H] (time-major), gates in the order i, f, g,
    o of w_x [I, 4H], w_h [H, 4H], b [4H]. Not differentiated (evaluation), only h is kept."""
    return _recurrence(w_x, w_h, b, xs, residuals=False)


def _forward(w_x, w_h, b, xs):
    hs, cs, gates = _recurrence(w_x, w_h, b, xs, residuals=True)
    return hs, (w_x, w_h, xs, hs, cs, gates)


def _backward(saved, dhs):
    """Backpropagation through time: the reverse loop carries only (dh, dc) and emits
    dz_t = dL/dz_t; then dW_x = sum_t x_t^T dz_t, dW_h = sum_t h_{t-1}^T dz_t, db = sum dz
    and dx_t = dz_t W_x^T, each one GEMM over all positions."""
    w_x, w_h, xs, hs, cs, gates = saved
    tanh_c = jnp.tanh(cs)

    def step(carry, t):
        dh_next, dc_next = carry
        dh_t, c_prev, gate, tc = t
        i, f, g, o = jnp.split(gate, 4, -1)
        dh = dh_t + dh_next                       # from the output and from step t + 1
        dc = dc_next + dh * o * (1 - tc * tc)
        dz = jnp.concatenate([dc * g * i * (1 - i), dc * c_prev * f * (1 - f),
                              dc * i * (1 - g * g), dh * tc * o * (1 - o)], -1)
        return (dz @ w_h.T, dc * f), dz

    zero = _zeros(dhs[0], w_h.shape[0])
    _, dz = jax.lax.scan(step, (zero, zero), (dhs, _shift(cs), gates, tanh_c), reverse=True)
    return (jnp.einsum("tbi,tbg->ig", xs, dz), jnp.einsum("tbh,tbg->hg", _shift(hs), dz),
            jnp.sum(dz, (0, 1)), jnp.einsum("tbg,ig->tbi", dz, w_x))


lstm_layer.defvjp(_forward, _backward)


def cell_weights(p):
    """(W_x [I, 4H], W_h [H, 4H], b [4H]) of an OptimizedLSTMCell's parameters."""
    return (jnp.concatenate([p["i" + g]["kernel"] for g in GATES], 1),
            jnp.concatenate([p["h" + g]["kernel"] for g in GATES], 1),
            jnp.concatenate([p["h" + g]["bias"] for g in GATES]))


class CharLSTM(nn.Module):
    vocab_size: int
    embed_dim: int = 8
    hidden: int = 256
    num_layers: int = 2
    recurrence: str = "fused"  # fused | scan (module docstring)

    @nn.compact
    def __call__(self, tokens):
        if self.recurrence not in ("fused", "scan"):
            raise ValueError(f"recurrence={self.recurrence!r}: use fused or scan")
        x = nn.Embed(self.vocab_size, self.embed_dim)(tokens.astype(jnp.int32))
        for layer in range(self.num_layers):
            zero = _zeros(x[:, 0], self.hidden)
            cell = nn.OptimizedLSTMCell(self.hidden, name=f"OptimizedLSTMCell_{layer}")
            if self.recurrence == "scan":
                x = nn.RNN(cell)(x, initial_carry=(zero, zero))
                continue
            if self.is_initializing():
                cell((zero, zero), x[:, 0])  # creates the cell's parameters
            x = jnp.swapaxes(lstm_layer(*cell_weights(cell.variables["params"]),
                                        jnp.swapaxes(x, 0, 1)), 0, 1)
        return nn.Dense(self.vocab_size)(x)
