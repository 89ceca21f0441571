"""kbench: compare Keras backends on the same model and data."""

__version__ = "0.1.0"
