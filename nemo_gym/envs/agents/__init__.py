"""agents environments."""
