"""A plugin module with a bug: importing it raises, as a plugin with a missing dependency would."""

raise RuntimeError("broken on purpose")
