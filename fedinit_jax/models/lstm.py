"""The Shakespeare character model of the FedAvg paper (McMahan et al. 2017), as LEAF, TFF
and fedjax use it: an 8-dimensional character embedding, two LSTM layers of 256 units
(flax `nn.RNN` over `OptimizedLSTMCell`, a `lax.scan` over the 80 positions), and a dense
layer to the vocabulary, applied at every position (next-character logits [B, T, V]).

An LSTM layer holds 4 H (I + H) weights and 4 H biases (one bias per gate, as Keras and
haiku), so with V = 90 the model has 8 V + 271,360 + 525,312 + 257 V = 820,522 parameters
(docs/shakespeare.md compares the published counts).
"""
import flax.linen as nn
import jax.numpy as jnp


class CharLSTM(nn.Module):
    vocab_size: int
    embed_dim: int = 8
    hidden: int = 256
    num_layers: int = 2

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(self.vocab_size, self.embed_dim)(tokens.astype(jnp.int32))
        for _ in range(self.num_layers):
            # zeros_like of the input: under shard_map the carry varies over the client mesh
            # as the scanned outputs do (a fresh jnp.zeros would not, and scan refuses)
            zero = jnp.zeros_like(x[:, 0, 0], shape=(x.shape[0], self.hidden))
            x = nn.RNN(nn.OptimizedLSTMCell(self.hidden))(x, initial_carry=(zero, zero))
        return nn.Dense(self.vocab_size)(x)
