"""Suite-wide pytest setup. Its presence puts tests/ on sys.path, so test modules in
sub-folders can import the helpers beside it (`charpolicy`)."""

pytest_plugins = ["pytester"]
