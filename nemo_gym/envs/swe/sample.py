"""The sample SWE tasks: a small Python package with two bugs, in SWE-bench's row layout.

`gym.make("swe")` with no rows runs these. `sample.json` holds the repository at its base
commit, the image recipe and the rows; `write_sample` writes them to a folder. The image
is built on first use from the engine's `nemo-gym-test:py` image (Debian's python3, built
by scripts/docker-engine.sh; `base=` names another image with python3 in it), with pytest
copied in from this interpreter (`host-packages.txt`): no package index needs to be
reachable from the engine.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

__all__ = ["BASE_IMAGE", "IMAGE", "sample", "write_sample"]

BASE_IMAGE = "nemo-gym-test:py"
IMAGE = "nemo-gym-swe/calc:sample"


def sample() -> dict[str, Any]:
    """The sample: `repo` (path -> text), `dockerfile`, `host_packages`, `rows`."""
    data: dict[str, Any] = json.loads((Path(__file__).parent / "sample.json").read_text())
    return data


def write_sample(folder: str | Path | None = None, *, base: str = BASE_IMAGE) -> Path:
    """Write the sample's rows (`tasks.jsonl`) and image recipe (`image/`) under `folder`
    (default: a folder per content in the user's cache); returns the rows file."""
    data = sample()
    recipe = {f"repo/{path}": text for path, text in data["repo"].items()}
    recipe["Dockerfile"] = data["dockerfile"].replace(f"ARG BASE={BASE_IMAGE}", f"ARG BASE={base}")
    recipe["host-packages.txt"] = "\n".join(data["host_packages"]) + "\n"
    digest = hashlib.sha256(json.dumps([recipe, data["rows"]], sort_keys=True).encode())
    if folder is None:
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        folder = cache / "nemo_gym" / "swe-sample" / digest.hexdigest()[:12]
    root = Path(folder)
    for path, text in recipe.items():
        target = root / "image" / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
    rows = root / "tasks.jsonl"
    lines = [json.dumps({**row, "image": IMAGE, "build": "image"}) for row in data["rows"]]
    text = "\n".join(lines) + "\n"
    if not rows.is_file() or rows.read_text() != text:
        rows.write_text(text)
    return rows
