"""Next-token data and greedy generation for a causal decoder of fixed length
(:mod:`.decoder_lm`, the registry's ``target="next_token"``); NumPy only, so any
backend, a twin or an exported runtime can be driven alike.

A decoder_lm built for ``steps`` positions takes a whole (batch, steps) window per call,
and its logits at position t depend on tokens 0..t only. So a shorter prompt is
right-padded (with id 0; what fills the tail does not matter) and the next token is the
argmax of the logits at the last real position. There is no key/value cache: every new
token reruns the whole window, which is what this model costs per token.
"""

from __future__ import annotations

from typing import Callable, Tuple

import numpy as np

PAD = 0


def next_token_pairs(sequences) -> Tuple[np.ndarray, np.ndarray]:
    """(batch, steps + 1) token sequences -> (inputs, targets), each (batch, steps): the
    target at position t is the input's token at t + 1."""
    sequences = np.asarray(sequences)
    if sequences.ndim != 2 or sequences.shape[1] < 2:
        raise ValueError(
            f"next_token_pairs: expected (batch, steps + 1) token ids with steps >= 1; "
            f"got shape {sequences.shape}"
        )
    return sequences[:, :-1], sequences[:, 1:]


def greedy_generate(
    predict: Callable[[np.ndarray], np.ndarray], prompt, max_new_tokens: int, steps: int
) -> np.ndarray:
    """``max_new_tokens`` greedy tokens after ``prompt`` (batch, length): (batch,
    max_new_tokens). ``predict`` maps a (batch, steps) window of ids to logits (or
    probabilities) of shape (batch, steps, vocabulary); the window keeps its dtype."""
    prompt = np.asarray(prompt)
    if prompt.ndim != 2 or prompt.shape[1] < 1:
        raise ValueError(
            f"greedy_generate: prompt must be (batch, length >= 1); got {prompt.shape}"
        )
    batch, length = prompt.shape
    if max_new_tokens < 1 or length + max_new_tokens > steps:
        raise ValueError(
            f"greedy_generate: the prompt ({length}) and the new tokens ({max_new_tokens}, at "
            f"least 1) must fit the model's {steps} positions"
        )
    window = np.full((batch, steps), PAD, dtype=prompt.dtype)
    window[:, :length] = prompt
    for position in range(length, length + max_new_tokens):
        logits = np.asarray(predict(window))
        if logits.shape[:2] != (batch, steps):
            raise ValueError(
                f"greedy_generate: predict returned shape {logits.shape}, expected "
                f"({batch}, {steps}, vocabulary)"
            )
        window[:, position] = logits[:, position - 1].argmax(axis=-1)
    return window[:, length : length + max_new_tokens].copy()
