"""reasoning environments."""
