"""Example Cohort plugin: HotpotQA as a two-module DSPy program, registered by entry points."""
