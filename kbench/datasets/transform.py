"""Reshaping data for a model: resizing images, turning reviews into token rows.

Parent side, numpy only.
"""

from __future__ import annotations

from typing import Sequence, Tuple

import numpy as np

# Keras' imdb.load_data conventions: 1 starts a review, 2 stands for a word outside the
# vocabulary, word ranks are shifted by 3, 0 pads.
IMDB_START, IMDB_OOV, IMDB_INDEX_FROM = 1, 2, 3


def resize_images(images: np.ndarray, size: Tuple[int, int]) -> np.ndarray:
    """Bilinear resize of uint8 (N, H, W, C) images to (N, size[0], size[1], C).

    Half-pixel centres, edges clamped (as OpenCV and tf.image.resize do without
    antialiasing).
    """
    height, width = images.shape[1:3]
    if (height, width) == tuple(size):
        return images

    def axis(n_in: int, n_out: int):
        centres = (np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5
        low = np.clip(np.floor(centres).astype(np.int64), 0, n_in - 1)
        high = np.clip(low + 1, 0, n_in - 1)
        weight = np.clip(centres - low, 0.0, 1.0).astype(np.float32)
        return low, high, weight

    rows_low, rows_high, row_weight = axis(height, size[0])
    cols_low, cols_high, col_weight = axis(width, size[1])
    x = images.astype(np.float32)
    x = (x[:, rows_low] * (1 - row_weight)[None, :, None, None]
         + x[:, rows_high] * row_weight[None, :, None, None])  # fmt: skip
    x = (x[:, :, cols_low] * (1 - col_weight)[None, None, :, None]
         + x[:, :, cols_high] * col_weight[None, None, :, None])  # fmt: skip
    return np.clip(np.rint(x), 0, 255).astype(np.uint8)


def token_rows(reviews: Sequence[Sequence[int]], vocabulary: int, length: int) -> np.ndarray:
    """Reviews of word ranks to int32 (N, length) rows, as Keras' imdb loader and
    ``pad_sequences`` make them: start token, ranks shifted by 3, ranks at or past the
    vocabulary replaced by the out-of-vocabulary token, padded and truncated at the
    front to ``length``."""
    rows = np.zeros((len(reviews), length), dtype=np.int32)
    for i, review in enumerate(reviews):
        tokens = np.asarray(review, dtype=np.int64) + IMDB_INDEX_FROM
        tokens = np.concatenate(([IMDB_START], tokens))
        tokens[tokens >= vocabulary] = IMDB_OOV
        tokens = tokens[-length:]
        rows[i, length - len(tokens) :] = tokens
    return rows
