"""Text helpers."""

import re


def slugify(title: str) -> str:
    """A URL slug: words joined by hyphens."""
    words = re.findall(r"[A-Za-z0-9]+", title)
    return "-".join(words)
