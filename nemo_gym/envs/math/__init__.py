"""math environments."""
