"""A reward named `twin`, like the broken plugin's: both are refused."""


def twin(example, output, trajectory) -> float:
    """Always 0."""
    return 0.0
