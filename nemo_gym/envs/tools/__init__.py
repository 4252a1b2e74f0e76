"""tools environments."""
