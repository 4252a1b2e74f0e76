"""games environments."""
