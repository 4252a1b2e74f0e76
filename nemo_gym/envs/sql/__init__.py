"""sql environments."""
