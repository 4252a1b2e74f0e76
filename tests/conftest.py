"""Suite-wide pytest setup."""

pytest_plugins = ["pytester"]
