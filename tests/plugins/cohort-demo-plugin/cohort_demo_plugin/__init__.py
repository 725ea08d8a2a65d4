"""Test plugin for Cohort: a one-module program and three rewards, found by entry points."""
