"""The `code` environment: our problems (each reference passes, wrong code fails) and the
APPS / LiveCodeBench loaders, checked end to end through `CodeVerifier`."""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import zlib
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.envs.code import CodeEnv
from nemo_gym.envs.code.loaders import (
    decode_test_cases,
    load_hf,
    shipped_problems,
    task_from_problem,
    tasks_from_records,
)
from nemo_gym.errors import ConfigError, MissingDependency
from nemo_gym.records import Message, Task, Trajectory
from nemo_gym.verify.code import CodeVerifier

# `process` runs everywhere (no namespaces needed) and is the fastest to start.
PROVIDER = "process"


def _reply(code: str) -> Trajectory:
    return Trajectory(messages=[Message.assistant(f"Here it is:\n```python\n{code}\n```")])


async def _scores(tasks: list[Task], codes: list[str]) -> list[gym.Rewards]:
    async with CodeVerifier(provider=PROVIDER, pool_size=2, timeout_per_test=10) as verifier:
        return list(
            await asyncio.gather(
                *(verifier.verify(t, _reply(c)) for t, c in zip(tasks, codes, strict=True))
            )
        )


# ------------------------------------------------------------------ shipped problems


def test_shipped_problems_are_complete() -> None:
    problems = shipped_problems()
    assert len(problems) >= 20
    assert len({p["id"] for p in problems}) == len(problems)
    assert {p["split"] for p in problems} == {"train", "test"}
    assert len(shipped_problems("train")) + len(shipped_problems("test")) == len(problems)
    for p in problems:
        assert p["statement"] and p["reference"] and len(p["tests"]) >= 2, p["id"]
        assert p["kind"] in ("stdin", "functional"), p["id"]
        if p["kind"] == "functional":
            assert p["fn_name"] in p["starter_code"] and p["fn_name"] in p["reference"]
            for t in p["tests"]:
                assert isinstance(t["input"], list), p["id"]
    kinds = {p["kind"] for p in problems}
    assert kinds == {"stdin", "functional"}


async def test_every_reference_solution_passes() -> None:
    tasks = CodeEnv(provider=PROVIDER).tasks("all")
    rewards = await _scores(tasks, [t.metadata["reference_solution"] for t in tasks])
    failed = {t.id: r.metadata for t, r in zip(tasks, rewards, strict=True) if r.reward != 1.0}
    assert not failed, failed


async def test_wrong_solutions_fail_every_problem() -> None:
    tasks = CodeEnv(provider=PROVIDER).tasks("all")
    # A program that prints a wrong constant, and functions returning a wrong constant.
    wrong = []
    for task in tasks:
        fn = task.metadata.get("fn_name")
        if fn == "min_distance":
            wrong.append("class Solution:\n    def min_distance(self, a, b):\n        return -1")
        elif fn:
            wrong.append(f"def {fn}(*args):\n    return None")
        else:
            wrong.append("print('nope')")
    rewards = await _scores(tasks, wrong)
    passed = [t.id for t, r in zip(tasks, rewards, strict=True) if r.reward != 0.0]
    assert not passed, f"tests that a wrong program passes: {passed}"


def test_tasks_splits_and_prompts() -> None:
    env = gym.make("code", provider=PROVIDER)
    assert isinstance(env, CodeEnv) and env.name == "code"
    test = env.tasks()
    assert len(test) == len(shipped_problems("test"))
    assert len(env.tasks("train", limit=3)) == 3
    by_id = {t.id: t for t in env.tasks("all")}
    stdin_task = by_id["code-a-plus-b"]
    prompt = stdin_task.messages[0].content or ""
    assert prompt.startswith("# A + B\n\nRead two integers") and "standard input" in prompt
    assert stdin_task.metadata["tests"][0] == {"input": "1 2\n", "output": "3\n"}
    assert "fn_name" not in stdin_task.metadata
    fn_task = by_id["code-two-sum"]
    assert fn_task.metadata["fn_name"] == "two_sum"
    assert "def two_sum(nums: list[int], target: int)" in (fn_task.messages[0].content or "")
    assert env.tasks("all") == env.tasks("all"), "tasks are deterministic"
    with pytest.raises(ConfigError, match="unknown split 'validation'"):
        env.tasks("validation")


def test_env_rejects_bad_options() -> None:
    with pytest.raises(ConfigError, match="unknown options"):
        CodeEnv(provider=PROVIDER, version_tag="v2")
    with pytest.raises(ConfigError, match="not both"):
        CodeEnv(provider=PROVIDER, tasks=[], dataset="x")


async def test_env_verifier_scores_a_reply() -> None:
    env = CodeEnv(provider=PROVIDER, partial_credit=True)
    task = next(t for t in env.tasks("all") if t.id == "code-gcd-lcm")
    good_code = (
        "from math import gcd\na, b = map(int, input().split())\n"
        "print(gcd(a, b), a * b // gcd(a, b))"
    )
    try:
        good = await env.verifier.verify(task, _reply(good_code))
        # Right exactly when gcd(a, b) == 1: three of the four tests.
        partial = await env.verifier.verify(
            task, _reply("a, b = map(int, input().split())\nprint(1, a * b)")
        )
    finally:
        await env.aclose()
    assert good.reward == 1.0
    assert partial.reward == 0.75


def test_problem_with_missing_field_names_it() -> None:
    with pytest.raises(ConfigError, match="'broken'"):
        task_from_problem({"id": "broken", "statement": "x"})


# ------------------------------------------------------------------ dataset loaders


def _apps_rows() -> list[dict]:
    return [
        {
            "problem_id": 11,
            "question": "Print the sum of two integers.",
            "solutions": json.dumps(["print(sum(map(int, input().split())))"]),
            "input_output": json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]}),
            "difficulty": "introductory",
            "url": "https://example.org/11",
            "starter_code": "",
        },
        {
            "problem_id": 12,
            "question": "Return the square of x.",
            "solutions": "[]",
            "input_output": json.dumps(
                {"fn_name": "square", "inputs": [[3], [-2]], "outputs": [[9], [4]]}
            ),
            "difficulty": "interview",
            "url": "",
            "starter_code": "def square(x):\n",
        },
        {  # APPS has problems without tests: skipped
            "problem_id": 13,
            "question": "?",
            "solutions": "[]",
            "input_output": "",
            "difficulty": "interview",
            "url": "",
            "starter_code": "",
        },
    ]


def _compress(cases: list[dict]) -> str:
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


def _lcb_rows() -> list[dict]:
    return [
        {
            "question_title": "Double It",
            "question_content": "Read n and print 2n.",
            "platform": "atcoder",
            "question_id": "abc001_a",
            "contest_id": "abc001",
            "contest_date": "2024-01-01T00:00:00",
            "starter_code": "",
            "difficulty": "easy",
            "public_test_cases": json.dumps(
                [{"input": "4\n", "output": "8\n", "testtype": "stdin"}]
            ),
            "private_test_cases": _compress(
                [
                    {"input": "0\n", "output": "0\n", "testtype": "stdin"},
                    {"input": "-7\n", "output": "-14\n", "testtype": "stdin"},
                ]
            ),
            "metadata": "{}",
        },
        {
            "question_title": "Max of Two",
            "question_content": "Return the larger of a and b.",
            "platform": "leetcode",
            "question_id": "9001",
            "contest_id": "weekly-1",
            "contest_date": "2024-02-02T00:00:00",
            "starter_code": (
                "class Solution:\n    def larger(self, a: int, b: int) -> int:\n        "
            ),
            "difficulty": "easy",
            "public_test_cases": json.dumps(
                [{"input": "3\n5", "output": "5", "testtype": "functional"}]
            ),
            "private_test_cases": json.dumps(
                [{"input": "-1\n-9", "output": "-1", "testtype": "functional"}]
            ),
            "metadata": json.dumps({"func_name": "larger"}),
        },
    ]


def test_apps_rows_become_tasks() -> None:
    from datasets import Dataset

    tasks = list(tasks_from_records(Dataset.from_list(_apps_rows())))
    assert [t.id for t in tasks] == ["apps-11", "apps-12"]  # 13 has no tests
    assert tasks[0].metadata["input_output"]["inputs"] == ["1 2\n", "5 5\n"]
    assert "standard input" in (tasks[0].messages[0].content or "")
    assert tasks[1].metadata["input_output"]["fn_name"] == "square"
    assert "def square(x):" in (tasks[1].messages[0].content or "")


def test_livecodebench_rows_become_tasks() -> None:
    from datasets import Dataset

    tasks = list(tasks_from_records(Dataset.from_list(_lcb_rows()), format="livecodebench"))
    stdin_task, fn_task = tasks
    assert stdin_task.id == "lcb-abc001_a" and stdin_task.metadata["title"] == "Double It"
    assert len(stdin_task.metadata["private_test_cases"]) == 2  # decompressed
    assert fn_task.metadata["fn_name"] == "larger"
    assert "class Solution:" in (fn_task.messages[0].content or "")


async def test_loaded_tasks_verify_end_to_end() -> None:
    from datasets import Dataset

    tasks = [
        *tasks_from_records(Dataset.from_list(_apps_rows())),
        *tasks_from_records(Dataset.from_list(_lcb_rows())),
    ]
    right = [
        "print(sum(map(int, input().split())))",
        "def square(x):\n    return x * x",
        "print(2 * int(input()))",
        "class Solution:\n    def larger(self, a, b):\n        return max(a, b)",
    ]
    wrong = [
        "print(3)",
        "def square(x):\n    return x + x",
        "print(2 * abs(int(input())))",  # fails only a private test
        "class Solution:\n    def larger(self, a, b):\n        return b",
    ]
    rewards = await _scores(tasks + tasks, right + wrong)
    assert [r.reward for r in rewards] == [1.0] * 4 + [0.0] * 4


def test_compressed_cases_refuse_code(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):  # type: ignore[no-untyped-def]
            return (Path(tmp_path / "pwned").touch, ())

    payload = base64.b64encode(zlib.compress(pickle.dumps(Evil()))).decode()
    with pytest.raises(ConfigError, match="neither JSON nor compressed"):
        decode_test_cases(payload, row_id="evil")
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"question": "q"}, "cannot tell the layout"),
        ({"input_output": "{not json", "problem_id": 5}, "row 5: input_output is not valid JSON"),
        ({"public_test_cases": "@@@", "question_id": "q7"}, "row q7: public_test_cases"),
        (
            {"input_output": json.dumps({"inputs": ["1"], "outputs": []}), "problem_id": 6},
            "APPS row 6",
        ),
    ],
)
def test_malformed_rows_name_the_row(row: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        list(tasks_from_records([row]))


def test_unknown_format() -> None:
    with pytest.raises(ConfigError, match="unknown code dataset format 'mbpp'"):
        list(tasks_from_records([], format="mbpp"))  # type: ignore[arg-type]


def test_load_hf_from_local_json(tmp_path: Path) -> None:
    data = tmp_path / "apps.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in _apps_rows()))
    tasks = load_hf("json", split="train", data_files=str(data), limit=1)
    assert [t.id for t in tasks] == ["apps-11"]
    env = CodeEnv(provider=PROVIDER, dataset="json", data_files=str(data))
    assert [t.id for t in env.tasks("train")] == ["apps-11", "apps-12"]


def test_load_hf_without_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "datasets", None)
    with pytest.raises(MissingDependency, match=r"nemo-gym\[datasets\]"):
        load_hf("codeparrot/apps")
