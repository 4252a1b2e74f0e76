"""Crash safety, proven: SIGKILL `collect` in a subprocess at random moments — during
start-up, the resume scan, the run and the metrics pass — and resume it each time; in
the end every (task, repeat) is in the file exactly once and every file parses."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CHILD = HERE / "crash_child.py"
ROLLOUTS = 4000
PHASES = ("startup", "scan", "run", "metrics")
ORDER = {phase: i for i, phase in enumerate((*PHASES, "done"))}
KILLS = 24  # at least, spread over the phases
RUNS = 6  # of which aimed at the run phase, first
MAX_STARTS = 120  # the loop is bounded whatever happens
# How long after reaching its phase a kill may land (uniform), per phase, sized to the
# phase on a fast machine (start-up ~0.13 s, a scan of 4,000 rows ~0.15 s, the metrics
# pass of a resumed run ~20 ms) so most kills land where they aim; a slower machine's
# phases are longer. The child's model answers in 10-30 ms at concurrency 64, so the
# whole run lasts over a second however fast the machine: the first run kills land in it.
DELAY_S = {"startup": 0.12, "scan": 0.12, "run": 0.3, "metrics": 0.015}


def read_phase(path: Path) -> str:
    try:
        phase = path.read_bytes().decode().strip()
    except (OSError, UnicodeDecodeError):
        return "startup"
    return phase if phase in ORDER else "startup"


def check_files(run: Path) -> dict[str, Any]:
    """Every file of a killed run parses; a JSONL file may end in one torn line."""
    seen: dict[str, Any] = {"torn": 0, "temp_files": []}
    for name in ("run.json", "metrics.json"):
        path = run / name
        if path.exists():
            json.loads(path.read_text())  # written atomically: whole or absent
    for name in ("rollouts.jsonl", "failures.jsonl"):
        path = run / name
        if not path.exists():
            continue
        data = path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()  # b"" when the file ends in a newline
        for number, line in enumerate(lines, 1):
            if line.strip():
                json.loads(line), f"{path}:{number}"
        if tail:
            seen["torn"] += 1
    seen["temp_files"] = sorted(p.name for p in run.glob(".*.tmp"))
    return seen


def start(run: Path, phase_file: Path) -> subprocess.Popen[bytes]:
    phase_file.write_bytes(b"")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent), *sys.path])}
    env.update(OMP_NUM_THREADS="1", PYTHONWARNINGS="ignore")
    return subprocess.Popen(
        [sys.executable, str(CHILD), str(run), str(phase_file), str(ROLLOUTS)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


def test_sigkill_at_random_moments_then_resume_loses_and_duplicates_nothing(
    tmp_path: Path,
) -> None:
    rng = random.Random(20261201)
    run, phase_file = tmp_path / "run", tmp_path / "phase"
    hit: Counter[str] = Counter()
    torn = starts = skipped = 0
    litter: set[str] = set()
    # The run phase shrinks with every kill that lands in it (the work left) and is
    # empty once the run is whole, so its kills come first, while most of the 4,000
    # rollouts are still to do; then the other phases take turns.
    others = [p for p in PHASES if p != "run"]
    targets = ["run"] * RUNS + [others[i % len(others)] for i in range(KILLS - RUNS)]
    while targets and starts < MAX_STARTS:
        target = targets[0]
        proc = start(run, phase_file)
        starts += 1
        deadline = time.monotonic() + 60
        # Wait for the target phase, or for any later one: a phase that lasts less than
        # a poll (the scan of an empty file) is not waited for through the whole run.
        while ORDER[read_phase(phase_file)] < ORDER[target] and proc.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        time.sleep(rng.uniform(0, DELAY_S[target]))
        phase = read_phase(phase_file) or "startup"
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            killed = True
        else:
            killed = False
            assert proc.returncode == 0, proc.stderr.read().decode()[-3000:] if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
        if killed and phase in PHASES:
            hit[phase] += 1
            if phase == target:
                targets.pop(0)
        elif not killed and target == "run":
            # It finished first: the run is whole, its run phase is empty from now on.
            skipped += sum(t == "run" for t in targets)
            targets = [t for t in targets if t != "run"]
        seen = check_files(run)
        torn += seen["torn"]
        litter.update(seen["temp_files"])

    assert not targets, f"phases never hit: {targets}; hit {dict(hit)} in {starts} starts"
    assert sum(hit.values()) >= KILLS - skipped and all(hit[p] >= 1 for p in PHASES), hit

    # Resume to the end, untouched.
    proc = start(run, phase_file)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert read_phase(phase_file) == "done"
    check_files(run)

    manifest = json.loads((run / "run.json").read_text())
    rows = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    keys = Counter((r["task_id"], r["repeat"]) for r in rows)
    expected = {(f"e{i}", r) for i in range(ROLLOUTS // 2) for r in range(2)}
    assert set(keys) == expected, "a (task, repeat) is missing or unexpected"
    assert max(keys.values()) == 1, [k for k, n in keys.items() if n > 1][:5]
    assert {r["run_id"] for r in rows} == {manifest["run_id"]}
    failed = Counter((r["task_id"], r["repeat"]) for r in rows if r["status"] != "ok")
    sidecar = Counter(
        (f["task_id"], f["repeat"])
        for f in map(json.loads, (run / "failures.jsonl").read_text().splitlines())
    )
    assert sidecar == failed and failed  # the faults did fail some
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["n_rollouts"] == len(expected)
    assert metrics["n_failed"] == sum(failed.values())
    assert metrics["failures_by_kind"] == dict(
        Counter(r["failure"]["kind"] for r in rows if r["status"] != "ok")
    )
    assert not list(run.glob(".*.tmp")), "temporary files left in the run directory"
    print(f"{starts} starts, kills by phase {dict(hit)}, {torn} torn tails, litter {litter}")
