"""The notebooks: stored without outputs, and each one runs top to bottom.

They run in a fresh kernel of this interpreter, in a temporary directory, with this
checkout first on the path. Their time is printed (each is meant to take under a minute
on 2 CPU cores) but not asserted: timing is for benchmarks, not tests.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

nbformat = pytest.importorskip("nbformat", reason="the notebook tests need nemo-gym[notebooks]")


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 4, [n.name for n in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path: Path) -> None:
    book = nbformat.read(path, as_version=4)
    for number, cell in enumerate(book.cells):
        if cell.cell_type == "code":
            assert not cell.outputs, f"{path.name} cell {number} has outputs: strip them"
            assert cell.execution_count is None, f"{path.name} cell {number} has a count"


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, tmp_path: Path, monkeypatch) -> None:
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("NEMO_GYM_ROOT", str(ROOT))
    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    # The kernel is this interpreter (its kernelspec says "python": put ours first).
    monkeypatch.setenv(
        "PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]])
    )
    book = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    started = time.perf_counter()
    client.execute()
    print(f"{path.name}: {time.perf_counter() - started:.1f}s")
