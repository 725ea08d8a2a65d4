"""Test plugin: a DSPy program whose query predictor runs a variable number of times, and metrics."""
