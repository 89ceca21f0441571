"""Transformer pieces written once for Keras 3 and Keras 2.2.4 (keras-mxnet), which
has neither MultiHeadAttention nor LayerNormalization.

Multi-head self-attention is composed from layers both generations have: one Dense(dim)
each for the queries, keys and values (all heads at once, as MultiHeadAttention keeps
them), a Lambda per head slicing its ``dim / heads`` columns out (the queries scaled by
1 / sqrt(dim / heads)), Dot(axes=2) for the scores, an additive mask (0 where
attention may look, -1e9 where it may not: exp underflows to exactly 0; the padding
mask made from the token ids, the causal one from arange inside a Lambda), a softmax,
Dot(axes=(2, 1)) with the values, Concatenate over the heads and a Dense(dim) output
projection. Parameters: 4 * (dim * dim + dim), whatever the number of heads.

:class:`LayerNorm` and :class:`PositionEmbedding` are two small layers of our own (a
Layer subclass with ``add_weight`` and a ``call`` in the operations both generations
name alike, ``_compat.ops``): LayerNorm over the last axis, epsilon 1e-5 (PyTorch's),
gamma and beta, 2 * dim parameters; PositionEmbedding adds a learned (steps, dim)
table, initialised uniform(+-0.05) like Keras' Embedding, steps * dim parameters.

A block is pre-norm (GPT-2, ViT): x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x))
with the MLP Dense(mlp_dim, relu) - Dense(dim) (relu: Keras 2.2.4 has no gelu).
Parameters of one block: 2 * 2 * dim (norms) + 4 * (dim^2 + dim) (attention) +
(dim * mlp_dim + mlp_dim) + (mlp_dim * dim + dim) (MLP).

The three models share :func:`trunk`: PositionEmbedding, BLOCKS (2) blocks of DIM (32)
with HEADS (2) heads and MLP_DIM (64), a final LayerNorm (``_attention_facts``).
Layers are created, and so ordered in ``model.layers`` by both generations, as a
block's twin lists them: norm, query, key, value, output, norm, MLP, MLP.

Under a mixed policy the layers compute in bfloat16 (or float16): the masks and the
pooling's weights made inside a Lambda are cast to the dtype of the tensor they meet
(TensorFlow adds and multiplies only tensors of one dtype; -1e9 is within bfloat16's
range), and LayerNorm computes in float32.

Custom layers and Lambdas are in-memory only: saving such a model to ``.keras`` and
loading it back would need them registered (and Lambda loading needs safe_mode off).
"""

import math

from keras import layers

from . import _compat
from ._attention_facts import BLOCKS, DIM, EPSILON, HEADS, MASKED, MLP_DIM


class LayerNorm(layers.Layer):
    """Layer normalisation over the last axis: (x - mean) / sqrt(var + eps) * gamma + beta
    (the biased variance, as Keras' and PyTorch's LayerNorm). Under a mixed policy
    (``--mixed-precision``) gamma, beta and the statistics stay float32 and the output is
    the policy's compute dtype, as in Keras' LayerNormalization and ``torch.autocast``."""

    def __init__(self, epsilon=EPSILON, **kwargs):
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        dim = int(input_shape[-1])
        # Keras 3: gamma and beta stay float32 under a mixed policy (Keras 2.2.4 has none)
        kept = {"autocast": False} if hasattr(self, "compute_dtype") else {}
        self.gamma = self.add_weight(name="gamma", shape=(dim,), initializer="ones", **kept)
        self.beta = self.add_weight(name="beta", shape=(dim,), initializer="zeros", **kept)
        super().build(input_shape)

    def call(self, x):
        ops = _compat.ops
        low = getattr(self, "compute_dtype", "float32")  # Keras 2.2.4: float32 only
        if low != "float32":  # a mixed policy: in float32, as Keras' and torch.autocast's
            x = ops.cast(x, "float32")
        centred = x - ops.mean(x, axis=-1, keepdims=True)
        variance = ops.mean(ops.square(centred), axis=-1, keepdims=True)
        y = centred / ops.sqrt(variance + self.epsilon) * self.gamma + self.beta
        return y if low == "float32" else ops.cast(y, low)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


class PositionEmbedding(layers.Layer):
    """Adds a learned embedding per position to a (steps, dim) sequence."""

    def build(self, input_shape):
        steps, dim = int(input_shape[-2]), int(input_shape[-1])
        self.embeddings = self.add_weight(
            name="embeddings", shape=(steps, dim), initializer="uniform"
        )
        super().build(input_shape)

    def call(self, x):
        return x + _compat.ops.expand_dims(self.embeddings, 0)

    def compute_output_shape(self, input_shape):
        return input_shape


def padding_mask(tokens):
    """(steps,) token ids -> (1, steps) additive mask: MASKED where the id is 0."""
    ops = _compat.ops

    def mask(t):
        return ops.expand_dims(ops.cast(ops.equal(t, 0), "float32"), 1) * MASKED

    return layers.Lambda(mask)(tokens)


def _causal(scores, steps: int):
    """Scores (steps, steps) with MASKED above the diagonal (a key after the query).

    Made from arange inside the layer, not from a constant: keras-mxnet predicts with a
    constant captured in a Lambda but cannot train with one (its Module loses it).
    """
    ops = _compat.ops

    def mask(s):
        positions = ops.arange(steps, dtype="float32")
        queries = ops.reshape(positions, (1, steps, 1))
        keys = ops.reshape(positions, (1, 1, steps))
        return s + ops.cast(ops.greater(keys, queries), _compat.dtype_of(s)) * MASKED

    return layers.Lambda(mask)(scores)


def _head(x, head: int, key_dim: int, scale: float = 1.0):
    start, stop = head * key_dim, (head + 1) * key_dim
    if scale == 1.0:
        return layers.Lambda(lambda t: t[:, :, start:stop])(x)
    return layers.Lambda(lambda t: t[:, :, start:stop] * scale)(x)


def self_attention(x, dim: int, heads: int, steps: int, mask=None, causal: bool = False):
    """Multi-head self-attention over (steps, dim); ``mask`` an additive (1, steps) or
    (steps, steps) tensor (e.g. :func:`padding_mask`), ``causal`` masks the future."""
    if dim % heads:
        raise ValueError(f"attention: dim ({dim}) must be a multiple of heads ({heads})")
    key_dim = dim // heads
    query, key, value = (layers.Dense(dim)(x) for _ in range(3))
    outputs = []
    for head in range(heads):
        scores = layers.Dot(axes=2)(
            [_head(query, head, key_dim, 1.0 / math.sqrt(key_dim)), _head(key, head, key_dim)]
        )
        if mask is not None:
            scores = layers.Add()([scores, mask])
        if causal:
            scores = _causal(scores, steps)
        weights = layers.Activation("softmax")(scores)
        outputs.append(layers.Dot(axes=(2, 1))([weights, _head(value, head, key_dim)]))
    x = outputs[0] if heads == 1 else layers.Concatenate()(outputs)
    return layers.Dense(dim)(x)


def block(x, dim: int, heads: int, mlp_dim: int, steps: int, mask=None, causal=False):
    """One pre-norm transformer block over (steps, dim)."""
    y = self_attention(LayerNorm()(x), dim, heads, steps, mask=mask, causal=causal)
    x = layers.Add()([x, y])
    y = layers.Dense(mlp_dim, activation="relu")(LayerNorm()(x))
    return layers.Add()([x, layers.Dense(dim)(y)])


def trunk(x, mask=None, causal: bool = False):
    """(steps, DIM) embeddings -> PositionEmbedding, BLOCKS blocks, a final LayerNorm."""
    x = PositionEmbedding()(x)
    steps = _compat.sequence_length(x)
    for _ in range(BLOCKS):
        x = block(x, DIM, HEADS, MLP_DIM, steps, mask=mask, causal=causal)
    return LayerNorm()(x)


def mean_over_steps(x):
    """(steps, dim) -> (dim,): the mean over the steps."""
    return layers.Lambda(lambda t: _compat.ops.mean(t, axis=1))(x)


def masked_mean_over_steps(x, tokens):
    """(steps, dim) -> (dim,): the mean over the steps whose token id is not 0 (zero for
    a sequence that is all padding)."""
    ops = _compat.ops

    def pool(inputs):
        t, ids = inputs
        keep = ops.cast(ops.not_equal(ids, 0), _compat.dtype_of(t))
        total = ops.sum(t * ops.expand_dims(keep, -1), axis=1)
        return total / ops.maximum(ops.sum(keep, axis=1, keepdims=True), 1.0)

    return layers.Lambda(pool)([x, tokens])
