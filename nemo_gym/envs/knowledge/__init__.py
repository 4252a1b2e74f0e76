"""knowledge environments."""
