"""Twins of :mod:`kbench_models._attention` in Gluon: LayerNorm, PositionEmbedding,
multi-head self-attention and the pre-norm block, computing what the Keras compositions
compute (each head's columns sliced out, the queries scaled before the dot product, an
additive -1e9 mask (padding or causal), the softmax over the keys, heads concatenated in
order, relu MLP). Every piece is a ``HybridBlock``: imperative and hybridized alike."""

from __future__ import annotations

import math
from typing import List

import mxnet as mx
from mxnet.gluon import HybridBlock, nn

from .._attention_facts import BLOCKS, DIM, EPSILON, HEADS, MASKED, MLP_DIM, block_layers
from ._layers import KerasLayer


def layer_norm(dim: int) -> nn.LayerNorm:
    """Keras' side's LayerNorm: over the last axis, the biased variance, epsilon 1e-5."""
    return nn.LayerNorm(axis=-1, epsilon=EPSILON, in_channels=dim)


def dense(in_units: int, units: int) -> nn.Dense:
    """Keras' Dense on a (batch, steps, in_units) sequence: per step (``flatten=False``)."""
    return nn.Dense(units, flatten=False, in_units=in_units)


class PositionEmbedding(HybridBlock):
    """Adds a learned (steps, dim) table, initialised uniform(+-0.05) as Keras does."""

    def __init__(self, steps: int, dim: int) -> None:
        super().__init__()
        with self.name_scope():
            self.weight = self.params.get("weight", shape=(steps, dim), init=mx.init.Uniform(0.05))

    def hybrid_forward(self, F, x, weight):  # noqa: N803 - Gluon's spelling
        return F.broadcast_add(x, F.expand_dims(weight, axis=0))


class SelfAttention(HybridBlock):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"attention: dim ({dim}) must be a multiple of heads ({heads})")
        self.heads, self.key_dim = heads, dim // heads
        with self.name_scope():
            self.query, self.key, self.value, self.output = (dense(dim, dim) for _ in range(4))

    def hybrid_forward(self, F, x, mask=None):  # noqa: N803 - Gluon's spelling
        """``mask``: additive, (batch, 1, steps) or (1, steps, steps), the same per head."""
        query, key, value = self.query(x), self.key(x), self.value(x)
        scale = 1.0 / math.sqrt(self.key_dim)
        outputs = []
        for head in range(self.heads):
            start = head * self.key_dim

            def part(t, start=start):
                return F.slice_axis(t, axis=2, begin=start, end=start + self.key_dim)

            scores = F.batch_dot(part(query) * scale, part(key), transpose_b=True)
            if mask is not None:
                scores = F.broadcast_add(scores, mask)
            weights = F.softmax(scores, axis=-1)
            outputs.append(F.batch_dot(weights, part(value)))
        heads = outputs[0] if self.heads == 1 else F.concat(*outputs, dim=2)
        return self.output(heads)


class Block(HybridBlock):
    def __init__(self, dim: int, heads: int, mlp_dim: int) -> None:
        super().__init__()
        with self.name_scope():
            self.norm1 = layer_norm(dim)
            self.attention = SelfAttention(dim, heads)
            self.norm2 = layer_norm(dim)
            self.fc1 = dense(dim, mlp_dim)
            self.fc2 = dense(mlp_dim, dim)

    def hybrid_forward(self, F, x, mask=None):  # noqa: N803 - Gluon's spelling
        x = x + self.attention(self.norm1(x), mask)
        return x + self.fc2(F.relu(self.fc1(self.norm2(x))))

    def keras_layers(self) -> List[KerasLayer]:
        return block_layers(KerasLayer, self)


class Trunk(HybridBlock):
    """PositionEmbedding, BLOCKS blocks, a final LayerNorm over (steps, DIM)."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        with self.name_scope():
            self.positions = PositionEmbedding(steps, DIM)
            self.blocks = nn.HybridSequential()
            for _ in range(BLOCKS):
                self.blocks.add(Block(DIM, HEADS, MLP_DIM))
            self.norm = layer_norm(DIM)

    def hybrid_forward(self, F, x, mask=None):  # noqa: N803 - Gluon's spelling
        x = self.positions(x)
        for block in self.blocks:
            x = block(x, mask)
        return self.norm(x)

    def keras_layers(self) -> List[KerasLayer]:
        return [
            KerasLayer("PositionEmbedding", self.positions),
            *(layer for block in self.blocks for layer in block.keras_layers()),
            KerasLayer("LayerNorm", self.norm),
        ]


def padding_mask(F, tokens):  # noqa: N803 - Gluon's spelling
    """(batch, steps) ids -> (batch, 1, steps): MASKED where the id is 0."""
    padding = F.broadcast_equal(tokens, F.zeros_like(tokens))
    return F.expand_dims(padding, axis=1) * MASKED


def masked_mean(F, x, tokens):  # noqa: N803 - Gluon's spelling
    """The mean over the steps whose id is not 0 (zero if there is none)."""
    keep = F.broadcast_not_equal(tokens, F.zeros_like(tokens))
    total = F.sum(F.broadcast_mul(x, F.expand_dims(keep, axis=-1)), axis=1)
    return F.broadcast_div(total, F.maximum(F.sum(keep, axis=1, keepdims=True), 1.0))


def causal_mask(F, steps: int):  # noqa: N803 - Gluon's spelling
    """(1, steps, steps): MASKED above the diagonal (a key after the query)."""
    positions = F.arange(steps)
    queries = F.reshape(positions, (1, steps, 1))
    keys = F.reshape(positions, (1, 1, steps))
    return F.broadcast_greater(keys, queries) * MASKED
