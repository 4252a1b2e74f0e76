"""safety environments."""
