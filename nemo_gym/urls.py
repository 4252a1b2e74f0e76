"""Credentials in URLs: taken out before a URL is recorded, logged or shown.

`http://user:SECRET@host/v1` is how many tools spell a server behind basic auth. The
credentials are for sending, never for run.json, rows, reports or logs: the HTTP
adapters send them as the `Authorization` header and keep the URL without them, and
anything that records options (the registry's specs) records the URL without them.
"""

from __future__ import annotations

import base64
from urllib.parse import unquote, urlsplit, urlunsplit

__all__ = ["basic_auth", "split_credentials", "without_credentials"]


def split_credentials(url: str) -> tuple[str, str | None, str | None]:
    """(the URL without its `user:password@`, the user, the password); both None when
    the URL carries none. Percent-escapes in them are decoded."""
    if "@" not in url or "://" not in url:
        return url, None, None
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, None
    userinfo, _, hostport = parts.netloc.rpartition("@")
    user, _, password = userinfo.partition(":")
    bare = urlunsplit((parts.scheme, hostport, parts.path, parts.query, parts.fragment))
    return bare, unquote(user), (unquote(password) if password or ":" in userinfo else None)


def without_credentials(url: str) -> str:
    """`url` without a `user:password@` (the text unchanged when it has none)."""
    return split_credentials(url)[0]


def basic_auth(user: str | None, password: str | None) -> dict[str, str]:
    """The `Authorization: Basic ...` header for URL credentials (empty when there are none)."""
    if user is None and password is None:
        return {}
    token = base64.b64encode(f"{user or ''}:{password or ''}".encode()).decode("ascii")
    return {"Authorization": f"Basic {token}"}
