"""translation environments."""
