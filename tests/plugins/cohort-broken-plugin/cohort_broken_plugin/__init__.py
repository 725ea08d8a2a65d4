"""Test plugin for Cohort that is broken on purpose (its program module raises on import)."""
