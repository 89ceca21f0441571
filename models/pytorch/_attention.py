"""Twins of :mod:`kbench_models._attention`: LayerNorm, PositionEmbedding, multi-head
self-attention and the pre-norm block, computing what the Keras compositions compute
(queries scaled before the dot product, an additive -1e9 mask, the softmax over the
keys, heads concatenated in order, relu MLP)."""

from __future__ import annotations

import math
from typing import List, Optional

import torch
from torch import nn

from .._attention_facts import BLOCKS, DIM, EPSILON, HEADS, MASKED, MLP_DIM, block_layers
from ._layers import KerasLayer


class LayerNorm(nn.LayerNorm):
    """Keras' side's LayerNorm: the biased variance, epsilon 1e-5, gamma and beta."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim, eps=EPSILON)


class PositionEmbedding(nn.Module):
    """Adds a learned (steps, dim) table, initialised uniform(+-0.05) as Keras does."""

    def __init__(self, steps: int, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(steps, dim))
        nn.init.uniform_(self.weight, -0.05, 0.05)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.weight


class SelfAttention(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        if dim % heads:
            raise ValueError(f"attention: dim ({dim}) must be a multiple of heads ({heads})")
        self.heads, self.key_dim = heads, dim // heads
        self.query, self.key, self.value, self.output = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
        batch, steps, dim = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:  # (batch, heads, steps, key_dim)
            return t.view(batch, steps, self.heads, self.key_dim).transpose(1, 2)

        query = split(self.query(x)) * (1.0 / math.sqrt(self.key_dim))
        scores = query @ split(self.key(x)).transpose(-1, -2)
        if mask is not None:  # (batch, 1, steps) or (1, steps, steps): the same per head
            scores = scores + mask[:, None]
        weights = torch.softmax(scores, dim=-1)
        heads = (weights @ split(self.value(x))).transpose(1, 2).reshape(batch, steps, dim)
        return self.output(heads)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_dim: int) -> None:
        super().__init__()
        self.norm1 = LayerNorm(dim)
        self.attention = SelfAttention(dim, heads)
        self.norm2 = LayerNorm(dim)
        self.fc1 = nn.Linear(dim, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, dim)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
        x = x + self.attention(self.norm1(x), mask)
        return x + self.fc2(torch.relu(self.fc1(self.norm2(x))))

    def keras_layers(self) -> List[KerasLayer]:
        return block_layers(KerasLayer, self)


class Trunk(nn.Module):
    """PositionEmbedding, BLOCKS blocks, a final LayerNorm over (steps, DIM)."""

    def __init__(self, steps: int) -> None:
        super().__init__()
        self.positions = PositionEmbedding(steps, DIM)
        self.blocks = nn.ModuleList(Block(DIM, HEADS, MLP_DIM) for _ in range(BLOCKS))
        self.norm = LayerNorm(DIM)

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor] = None) -> torch.Tensor:
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


def padding_mask(tokens: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(batch, steps) ids -> (batch, 1, steps): MASKED where the id is 0."""
    return (tokens == 0).to(dtype)[:, None, :] * MASKED


def causal_mask(steps: int, like: torch.Tensor) -> torch.Tensor:
    """(1, steps, steps): MASKED above the diagonal."""
    ones = torch.ones(steps, steps, dtype=like.dtype, device=like.device)
    return torch.triu(ones, diagonal=1)[None] * MASKED


def masked_mean(x: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """The mean over the steps whose id is not 0 (zero if there is none)."""
    keep = (tokens != 0).to(x.dtype)
    total = (x * keep[..., None]).sum(dim=1)
    return total / keep.sum(dim=1, keepdim=True).clamp(min=1.0)
