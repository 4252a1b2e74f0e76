"""structured environments."""
