"""The run directory: its files (`files`), read and written by collect, resume,
reverify, aggregate, metrics and the analysis through one layer."""
