"""A small calculator package (the sample SWE tasks' repository)."""

from calc.ops import add, mean, mul
from calc.text import slugify

__all__ = ["add", "mean", "mul", "slugify"]
