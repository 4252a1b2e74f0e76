"""`ruler2`: RULER v2's match modes and routes (NeMo Gym's own verifier is compared on its
example rows in tests/interop/test_nemo_gym_servers.py); here the `2steps` mode its rows
lack, the copy rule per row kind, and row errors."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

import nemo_gym as gym
from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Message, Task, Trajectory
from nemo_gym.verify.long_context import ReferenceMatch

QUESTION = "What is the boiling point of water?\nA. 90\nB. 100"


def rows_env(tmp_path: Path, *rows: dict[str, Any]) -> Any:
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return gym.make("ruler2", path=str(path))


def row(prompt: str, gold: Any, **fields: Any) -> dict[str, Any]:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": prompt}]},
        "expected_answer": gold,
        **fields,
    }


def score(env: Any, reply: str, index: int = 0) -> float:
    task = env.tasks()[index]
    done = asyncio.run(gym.rollout(env, gym.models.ScriptedModel([Message.assistant(reply)]), task))
    assert done.reward is not None
    return done.reward


def test_the_sample_runs() -> None:
    assert gym.check_env(gym.make("ruler2")).ok


def test_2steps_reads_the_last_paragraph_only(tmp_path: Path) -> None:
    env = rows_env(tmp_path, row(f"Copy it.\n\n{QUESTION}", [QUESTION], match_type="2steps"))
    assert score(env, f"Thinking.\n\n{QUESTION}") == 1.0
    # The copy first, then more text: the last paragraph lacks it (soft: 1 - WER, 0 here).
    assert score(env, f"{QUESTION}\n\nDone.") == 0.0


def test_part_drops_quoted_documents_and_takes_the_best_reference(tmp_path: Path) -> None:
    prompt = "Document 11:\nBern.\n\nDocument 22:\nZurich.\n\nWhich document says Zurich?"
    env = rows_env(tmp_path, row(prompt, ["22", "33"], match_type="part"))
    assert score(env, "22") == 1.0  # the best of the two references
    assert score(env, "Document 22:\nZurich.\n\n") == 0.0  # the quote is not the answer


def test_copying_counts_only_where_the_answer_is_a_passage(tmp_path: Path) -> None:
    filler = " ".join(f"word{i}" for i in range(30))
    needle = f"{filler} The magic number is 5551234. {filler}"
    env = rows_env(
        tmp_path,
        row(needle, ["5551234"]),
        row(f"Copy the question.\n\n{QUESTION}", [QUESTION]),
    )
    assert score(env, needle) == 0.0  # the context echoed: no needle found in it
    assert score(env, f"Question:\n{QUESTION.upper()}", 1) == 1.0  # the copy asked for


def test_a_passage_copied_with_the_rest_of_the_context_scores_0(tmp_path: Path) -> None:
    other = "Which metal is liquid at room temperature and used in old thermometers?"
    prompt = f"{other}\nA. Iron\nB. Mercury\n\n{QUESTION}\n\nCopy the second question."
    env = rows_env(tmp_path, row(prompt, [QUESTION]))
    assert score(env, f"Sure.\n{QUESTION}") == 1.0
    assert score(env, prompt) == 0.0  # NeMo Gym: 1 (the passage is in it)


def test_multichoice_reads_the_committed_letter(tmp_path: Path) -> None:
    env = rows_env(tmp_path, row("Pick one of A, B, C, D.", "c", eval_type="multichoice"))
    assert score(env, "The final answer is C") == 1.0
    assert score(env, "\\boxed{C}") == 1.0
    assert score(env, "\\boxed{A} or \\boxed{C}") == 0.0


@pytest.mark.parametrize(
    ("fields", "field", "problem"),
    [
        ({"eval_type": "judge"}, "eval_type", "one of 'ruler2', 'multichoice'"),
        ({"match_type": "best"}, "match_type", "one of all, part, 2steps"),
        ({"expected_answer": []}, "expected_answer", "at least one"),
        ({"expected_answer": "AB", "eval_type": "multichoice"}, "expected_answer", "a letter"),
    ],
)
def test_bad_rows_name_the_field(
    tmp_path: Path, fields: dict[str, Any], field: str, problem: str
) -> None:
    env = rows_env(tmp_path, {**row("Q?", ["x"]), **fields})
    with pytest.raises(ConfigError, match=f"rows.jsonl:1: field '{field}'.*{problem}"):
        env.tasks()


def test_reference_match_refuses_an_unknown_mode() -> None:
    with pytest.raises(ConfigError, match="mode must be one of"):
        ReferenceMatch("best")  # type: ignore[arg-type]
    task = Task(id="t", prompt="Q?", answer=["x"], metadata={"match": "best"})
    trajectory = Trajectory(messages=[*task.messages, Message.assistant("x")])
    with pytest.raises(VerifierError, match="match must be one of"):
        asyncio.run(ReferenceMatch().verify(task, trajectory))
