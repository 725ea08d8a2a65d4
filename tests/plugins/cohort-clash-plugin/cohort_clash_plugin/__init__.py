"""Test plugin for Cohort whose entry names clash with a built-in and with another plugin."""
