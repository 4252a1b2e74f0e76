"""long_context environments."""
