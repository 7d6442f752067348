"""The error a model that cannot be found or loaded raises. Apart from the loader so that the command
line can catch it without importing torch (its bad-argument errors come at once)."""


class ModelError(RuntimeError):
    """A model could not be found or loaded."""
