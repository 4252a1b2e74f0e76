"""NeMo Gym's execution-based servers (nemo_gym/interop/nemo_gym/executed.py) on its own
example rows: oracle, wrong, NeMo Gym's own example rollouts and adversarial replies run
in our sandbox, and the rewards are compared with NeMo Gym's own `verify` (through the
reference venv of tests/interop/test_nemo_gym_servers.py; without it those tests skip).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

import nemo_gym as gym
from interop.test_nemo_gym_servers import DATA, PYTHON, run_reference
from nemo_gym.errors import ConfigError
from nemo_gym.interop import nemo_gym as ng
from nemo_gym.records import Message

# NeMo Gym's example rollouts for its scicodepile rows (the reply text and its reward).
REPLIES = json.loads((DATA / "scicodepile_replies.json").read_text())

# Written here for the rows whose example rollout fails (the check's stubs say what to do).
SOLUTIONS = {
    "alignment/python/5": """
def _build_model(data_path, hyperparameters):
    method = hyperparameters["method"]
    init_param = {method: {"params": ["initialization"]}}
    model = ProteinModel(data_path, [method], root_path + "config/config.json", **init_param)
    model.build_models(**{method: {"initialization": [hyperparameters["initialization"]]}})
    path = model.save("latest")
    logging.info(f"model saved to {path}")
    return path
""",
}

# The result line NeMo Gym's runner reads: fd 1 duplicated before any task code runs.
_VERDICT = '{"status": "pass", "details": {}}'


def _fenced(code: str) -> str:
    return f"Here it is.\n\n```python\n{code.strip()}\n```"


def adversarial(entry: str) -> dict[str, str]:
    """Replies that try to pass without solving; (ours, NeMo Gym's) in EXPECTED."""
    return {
        # Leaves before the test runs, with exit code 0.
        "exit_early": f"import os\n\ndef {entry}(*args, **kwargs):\n    return None\n\nos._exit(0)",
        # Prints what a pass looks like on stdout.
        "prints_pass": (
            f"print({_VERDICT!r})\nprint('all tests passed')\n\n"
            f"def {entry}(*args, **kwargs):\n    return None"
        ),
        # Its own `check`, and the entry point a no-op: the row's test rebinds `check`.
        "own_check": f"def check(candidate):\n    return None\n\n{entry} = lambda *a, **k: None",
        # Ends the process from inside the call the test makes.
        "exits_in_call": f"def {entry}(*args, **kwargs):\n    raise SystemExit(0)",
        # Writes a pass verdict onto NeMo Gym's runner's result descriptor, then exits.
        "forged_verdict": (
            "import os\n"
            f"os.write(3, b{(_VERDICT + chr(10))!r})\n"
            "os._exit(0)\n"
            f"def {entry}(*args, **kwargs):\n    return None"
        ),
    }


# reply -> (ours, NeMo Gym's, why) where the two differ on purpose.
DIFFERENCES: dict[str, tuple[float, float, str]] = {
    "forged_verdict": (
        0.0,
        1.0,
        "NeMo Gym's runner takes the first line on its result descriptor as the verdict, "
        "which the reply's code can write; ours needs a nonce the reply cannot read",
    ),
}


async def _cases() -> list[dict[str, Any]]:
    env = ng.load(DATA / "scicodepile.jsonl", server="scicodepile", provider="process")
    cases = []
    try:
        for task in env.tasks():
            row = task.metadata["nemo_gym"]["row"]
            task_id = row["verifier_metadata"]["task_id"]
            entry = task.metadata["entry_point"]
            texts = {"nemo_rollout": REPLIES[task_id]["text"]}
            if REPLIES[task_id]["reward"] == 1.0:
                texts["oracle"] = REPLIES[task_id]["text"]
            elif task_id in SOLUTIONS:
                texts["oracle"] = _fenced(SOLUTIONS[task_id])
            texts.update({k: _fenced(v) for k, v in adversarial(entry).items()})
            replies = {k: [Message.assistant(v)] for k, v in texts.items()}
            replies["wrong"] = env.wrong(task)
            for reply, turns in replies.items():
                done = await gym.rollout(env, gym.models.ScriptedModel(turns), task)
                cases.append(
                    {
                        "task_id": task_id,
                        "reply": reply,
                        "ours": done.reward,
                        "ok": done.ok,
                        "rewards": done.rewards,
                        "row": row,
                        "response": ng.to_row(done)["response"],
                    }
                )
    finally:
        await env.aclose()
    return cases


@pytest.fixture(scope="module")
def cases() -> list[dict[str, Any]]:
    return asyncio.run(_cases())


def test_scicodepile_rows_score_as_their_tests_say(cases: list[dict[str, Any]]) -> None:
    oracles = [c for c in cases if c["reply"] == "oracle"]
    assert len(oracles) >= 2
    for case in cases:
        assert case["ok"], case  # a reply's failure is a reward of 0, never a failed rollout
        if case["reply"] == "oracle":
            assert case["ours"] == 1.0, case
        elif case["reply"] == "nemo_rollout":
            assert case["ours"] == REPLIES[case["task_id"]]["reward"], case
        else:
            assert case["ours"] == 0.0, (case["task_id"], case["reply"], case["rewards"])


def test_scicodepile_rewards_equal_nemo_gyms_own(cases: list[dict[str, Any]]) -> None:
    from pathlib import Path

    if not Path(PYTHON).is_file():
        pytest.skip("no NeMo Gym reference venv: bash scripts/test-nemo-gym-reference.sh")
    theirs = run_reference([("scicodepile", c["row"], c["response"]) for c in cases])
    seen = set()
    for case, result in zip(cases, theirs, strict=True):
        assert "error" not in result, (case["task_id"], case["reply"], result)
        ours, nemo, _ = DIFFERENCES.get(case["reply"], (result["reward"], result["reward"], ""))
        assert (case["ours"], result["reward"]) == (ours, nemo), (case["task_id"], case["reply"])
        seen.add(case["reply"])
    assert set(DIFFERENCES) <= seen


def test_a_scicodepile_row_without_its_test_is_a_load_error() -> None:
    row = json.loads((DATA / "scicodepile.jsonl").read_text().splitlines()[0])
    del row["verifier_metadata"]["entry_point"]
    with pytest.raises(ConfigError, match=r"row 0.*verifier_metadata\.entry_point"):
        ng.load([row], server="scicodepile", provider="process")


def test_every_difference_is_on_the_page() -> None:
    page = " ".join((DATA.parents[2] / "docs" / "coming-from-nemo-gym.md").read_text().split())
    for _, _, why in DIFFERENCES.values():
        assert "| `scicodepile` |" in page and why in page, why
