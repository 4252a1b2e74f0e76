"""The workplace world's initial tables, read once per process and copied per world."""

from __future__ import annotations

import functools
from pathlib import Path

import pandas as pd

_DATA = Path(__file__).parent / "data"


@functools.cache
def _read(name: str) -> pd.DataFrame:
    if name == "email_addresses.csv":
        return pd.read_csv(_DATA / name, header=None, names=["email_address"])
    return pd.read_csv(_DATA / name, dtype=str)


def frame(name: str) -> pd.DataFrame:
    """A fresh copy of the table `name` as NeMo Gym's tools read it (`dtype=str`)."""
    return _read(name).copy(deep=True)
