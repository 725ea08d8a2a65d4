"""A working reward whose name, `twin`, the clash plugin declares too: neither may have it."""


def twin(example, output, trajectory) -> float:
    """Always 1."""
    return 1.0
