"""instructions environments."""
