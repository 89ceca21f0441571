"""The sizes and constants the attention models' Keras definitions (:mod:`._attention`)
and their native twins share. Standard library only."""

DIM = 32  # the width of every token (patch) vector
HEADS = 2  # of DIM // HEADS = 16 each
MLP_DIM = 64  # a block's hidden MLP width
BLOCKS = 2
MASKED = -1e9  # added to a score that must not be attended to
EPSILON = 1e-5  # LayerNorm's (PyTorch's default)


def block_layers(keras_layer, block) -> list:
    """A twin's block as Keras orders its weights (as it creates them): norm, query, key,
    value, output, norm, the MLP's two Dense. ``keras_layer``: the twin package's
    ``KerasLayer`` (kind, the framework's layer); ``block``: a twin's block, with
    ``norm1``, ``attention`` (``query``, ``key``, ``value``, ``output``), ``norm2``,
    ``fc1`` and ``fc2``, as both twin packages name them."""
    attention = block.attention
    return [
        keras_layer("LayerNorm", block.norm1),
        *(keras_layer("Dense", d) for d in (attention.query, attention.key, attention.value)),
        keras_layer("Dense", attention.output),
        keras_layer("LayerNorm", block.norm2),
        keras_layer("Dense", block.fc1),
        keras_layer("Dense", block.fc2),
    ]


def check_token_input(name: str, input_shape, num_classes: int) -> None:
    """A token model's twin takes (steps,) and at least 2 classes (or vocabulary ids)."""
    if len(input_shape) != 1:
        raise ValueError(f"{name}: input_shape must be (steps,); got {input_shape}")
    if num_classes < 2:
        raise ValueError(f"{name}: num_classes must be 2 or more; got {num_classes}")
