"""A run end to end: `compose` builds its parts from a RunConfig, `loop` trains them step by step,
`checkpoint` and `reporting` keep what it did, `cli` and `launch` start it (`python -m trainer`)."""
