"""Diagnostics, paired comparison and the profile, each with answers known in advance."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nemo_gym as gym
from nemo_gym.analysis import (
    CLASSES,
    bootstrap_interval,
    classify,
    compare,
    diagnose,
    profile,
    sign_test,
    task_scores,
)
from nemo_gym.analysis.diagnose import tool_problem
from nemo_gym.collect import Part
from nemo_gym.models import ScriptedModel


def ok(reward: float, **extra: Any) -> dict[str, Any]:
    rewards = {"reward": reward, **extra.pop("rewards", {})}
    return {"status": "ok", "rewards": rewards, "trajectory": extra.pop("trajectory", {}), **extra}


def failed(kind: str, code: str, message: str = "boom") -> dict[str, Any]:
    return {"status": "failed", "failure": {"kind": kind, "code": code, "message": message}}


# ---------------------------------------------------------------------- classify


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        (ok(1.0), ("passed", "passed")),
        (failed("timeout", "timeout"), ("timeout", "timeout/timeout")),
        (failed("verifier", "timeout"), ("timeout", "verifier/timeout")),
        (failed("model", "server_error"), ("infrastructure", "model/server_error")),
        (failed("sandbox", "sandbox"), ("infrastructure", "sandbox/sandbox")),
        (
            failed("tool", "tool", "tool call 'x' failed: unknown tool 'x'; available: a"),
            ("tool_misuse", "unknown_tool"),
        ),
        (failed("tool", "tool", "tool 'db' raised MemoryError"), ("infrastructure", "tool/tool")),
        (
            ok(0.0, trajectory={"model_calls": [{"response": {"finish_reason": "length"}}]}),
            ("truncated", "length"),
        ),
        (
            ok(0.0, trajectory={"tool_results": [{"error": "invalid arguments for 'f': x"}]}),
            ("tool_misuse", "bad_arguments"),
        ),
        (
            ok(
                0.0,
                trajectory={
                    "tool_results": [
                        {"error": "TypeError: f() got an unexpected keyword argument 'y'"}
                    ]
                },
            ),
            ("tool_misuse", "bad_arguments"),
        ),
        (
            ok(0.0, trajectory={"tool_results": [{"error": "KeyError: 'acct'"}]}),
            ("tool_misuse", "tool_error"),
        ),
        (
            ok(0.0, rewards={"metadata": {"extracted_answer": None}}),
            ("no_answer", "extracted_answer=None"),
        ),
        (
            ok(
                0.5,
                rewards={
                    "components": {"accuracy": 1.0, "format": 0.0},
                    "metadata": {"extracted_answer": "4"},
                },
            ),
            ("format", "format<1"),
        ),
        (
            ok(
                0.0,
                rewards={
                    "components": {"accuracy": 0.0, "format": 0.0},
                    "metadata": {"extracted_answer": "5"},
                },
            ),
            ("wrong", "extracted"),
        ),
        (ok(0.0, rewards={"metadata": {"extracted_answer": "5"}}), ("wrong", "extracted")),
        (ok(0.3), ("wrong", "not_reported")),
    ],
)
def test_every_rollout_gets_its_most_upstream_cause(row: dict, expected: tuple[str, str]) -> None:
    assert classify(row) == expected


ROWS = st.one_of(
    st.builds(
        failed,
        st.sampled_from(["model", "tool", "timeout", "verifier", "environment", "cancelled"]),
        st.sampled_from(["x", "timeout", "tool"]),
        st.sampled_from(["boom", "unknown tool 'q'", "invalid arguments for 'f'"]),
    ),
    st.builds(
        lambda reward, finish, error, extracted, form: ok(
            reward,
            trajectory={
                "model_calls": [{"response": {"finish_reason": finish}}],
                "tool_results": [{"error": error}] if error else [],
            },
            rewards={
                "components": {} if form is None else {"format": form},
                "metadata": {} if extracted == "absent" else {"extracted_answer": extracted},
            },
        ),
        st.floats(-1, 2),
        st.sampled_from(["stop", "length", None]),
        st.sampled_from([None, "unknown tool 'x'", "ValueError: no"]),
        st.sampled_from(["absent", None, "4"]),
        st.sampled_from([None, 0.0, 1.0]),
    ),
)


@settings(max_examples=200, deadline=None)
@given(ROWS, st.floats(0.1, 1.5))
def test_classes_are_exhaustive_and_consistent(row: dict, threshold: float) -> None:
    cls, detail = classify(row, threshold)
    assert cls in (*CLASSES, "passed") and detail
    if row["status"] == "ok":
        assert cls not in ("timeout", "infrastructure")
        assert (cls == "passed") == (row["rewards"]["reward"] >= threshold)
    else:
        assert cls in ("timeout", "infrastructure", "tool_misuse")


def test_tool_problem_reads_the_harness_messages() -> None:
    assert tool_problem("unknown tool 'x'; available: a, b") == "unknown_tool"
    assert tool_problem("invalid arguments for 'f': Expecting value") == "bad_arguments"
    assert tool_problem("tool 'f' timed out after 2s") == "tool_error"


def test_diagnose_shares_and_points_add_up() -> None:
    rows = [
        {**ok(1.0), "env": "a", "task_id": "t1", "repeat": 0},
        {
            **ok(0.0, rewards={"metadata": {"extracted_answer": None}}),
            "env": "a",
            "task_id": "t2",
            "repeat": 0,
        },
        {**ok(0.5), "env": "a", "task_id": "t3", "repeat": 0},
        {**failed("model", "server_error"), "env": "b", "task_id": "t1", "repeat": 0},
        # A retried key: the last row wins, as in the metrics.
        {**ok(1.0), "env": "b", "task_id": "t1", "repeat": 0},
        {**failed("timeout", "timeout"), "env": "b", "task_id": "t2", "repeat": 0},
    ]
    result = diagnose(rows)
    everything = result["*"]
    assert (everything.rollouts, everything.passed, everything.lost) == (5, 2, 2.5)
    assert {n: (c.count, c.lost) for n, c in everything.classes.items()} == {
        "timeout": (1, 1.0),
        "no_answer": (1, 1.0),
        "wrong": (1, 0.5),
    }
    assert math.isclose(sum(c.share for c in everything.classes.values()), 1.0)
    assert everything.classes["wrong"].points == pytest.approx(0.5 / 5)
    assert result["b"].classes["timeout"].share == 1.0 and result["a"].rollouts == 3


# ---------------------------------------------------------------------- compare


def test_the_sign_test_has_its_exact_values() -> None:
    assert sign_test(10, 0) == 2 / 2**10 == 0.001953125
    assert sign_test(8, 2) == 2 * (1 + 10 + 45) / 1024 == 0.109375
    assert sign_test(2, 8) == 0.109375
    assert sign_test(5, 5) == 1.0 and sign_test(0, 0) == 1.0
    assert sign_test(1, 0) == 1.0


def test_the_bootstrap_interval_is_the_binomial_quantiles_for_0_1_values() -> None:
    # 30 ones in 100: the bootstrap mean is Binomial(100, 0.3) / 100, whose 2.5% and
    # 97.5% quantiles are 0.21 and 0.39.
    values = [1.0] * 30 + [0.0] * 70
    low, high = bootstrap_interval(values, resamples=20_000, seed=1)
    assert low == pytest.approx(0.21, abs=0.011) and high == pytest.approx(0.39, abs=0.011)
    assert bootstrap_interval([0.25] * 7) == (0.25, 0.25)
    # Deterministic given the seed; another seed, another draw.
    spread = [(i * 0.37) % 1 for i in range(40)]
    assert bootstrap_interval(spread, seed=3) == bootstrap_interval(spread, seed=3)
    assert bootstrap_interval(spread, seed=3) != bootstrap_interval(spread, seed=4)


def test_compare_pairs_by_task() -> None:
    a = {("e", f"t{i}"): 0.5 for i in range(10)}
    b = {**{("e", f"t{i}"): 1.0 for i in range(8)}, ("e", "t8"): 0.0, ("e", "t9"): 0.5}
    b[("e", "extra")] = 1.0
    result = compare(a, b, seed=0)
    assert (result.n, result.wins, result.losses, result.ties) == (10, 8, 1, 1)
    assert result.diff == pytest.approx((8 * 0.5 - 0.5) / 10)
    assert result.p_value == sign_test(8, 1) == pytest.approx(20 / 512)
    assert result.low <= result.diff <= result.high
    assert result.only_b == 1 and result.only_a == 0
    assert compare(a, b, seed=0).low == result.low  # deterministic


def test_task_scores_mask_failures_and_keep_the_last_row() -> None:
    rows = [
        {**ok(1.0), "env": "e", "task_id": "t", "repeat": 0},
        {**ok(0.0), "env": "e", "task_id": "t", "repeat": 1},
        {**failed("model", "x"), "env": "e", "task_id": "t", "repeat": 2},
        {**failed("model", "x"), "env": "e", "task_id": "u", "repeat": 0},
        {**ok(0.6), "env": "e", "task_id": "u", "repeat": 0},
        {**ok(0.2), "env": "e", "task_id": "v", "repeat": 0, "metadata": {"variant": "x"}},
    ]
    assert task_scores(rows) == {("e", "t"): 0.5, ("e", "u"): 0.6}
    assert task_scores(rows, metric="pass", success_threshold=0.5) == {
        ("e", "t"): 0.5,
        ("e", "u"): 1.0,
    }
    assert task_scores(rows, variant="x") == {("e", "v"): 0.2}


# ---------------------------------------------------------------------- profile


async def test_profile_of_a_run_with_variants(tmp_path: Path) -> None:
    async def exact(task: gym.Task, trajectory: gym.Trajectory) -> gym.Rewards:
        text = trajectory.final_text.strip()
        answer = text if text.isdigit() else None
        return gym.Rewards(reward=float(text == task.answer), metadata={"extracted_answer": answer})

    tasks = [gym.Task(id=f"t{i}", prompt=f"say {i}", answer=str(i)) for i in range(4)]
    env = gym.Env(exact, name="echo", tasks=tasks)

    def reply(request: gym.ModelRequest) -> str:
        asked = request.messages[-1].content.removeprefix("say ")
        terse = request.messages[0].content == "terse"
        # Repeats 0 and 1 say "9" on t0; so majority@2 on t0 picks the wrong "9" while
        # pass@2 counts it solved when a repeat was right; "terse" is always right.
        if terse:
            return asked
        if asked == "0":
            return (
                "9"
                if request.sampling.seed is not None and seeds[request.sampling.seed] < 2
                else "0"
            )
        return "no idea" if asked == "3" else asked

    seeds = {gym.derive_seed(0, "t0", r): r for r in range(4)}
    parts = [
        Part(env, variant="plain", harness=gym.harnesses.SingleTurn(system_prompt="plain")),
        Part(env, variant="terse", harness=gym.harnesses.SingleTurn(system_prompt="terse")),
    ]
    await gym.collect(parts, ScriptedModel(reply), output=tmp_path, repeats=4)
    result = profile(tmp_path, resamples=500)
    by_task = {(t.variant, t.task_id): t for t in result.tasks}
    assert by_task[("plain", "t0")].pass_rate == 0.5
    assert by_task[("plain", "t3")].pass_rate == 0.0 and by_task[("terse", "t3")].pass_rate == 1
    # majority@k over the first k repeats: plain t0 votes 9,9 | 9,9,0,0 (tie: 9 first).
    assert result.majority["*"][1] == pytest.approx((0 + 1 + 1 + 0 + 4) / 8)
    assert result.majority["*"][4] == pytest.approx((0 + 1 + 1 + 0 + 4) / 8)
    assert result.metrics.pass_at_k[4] == pytest.approx(7 / 8)
    diagnosis = result.diagnoses["echo"]
    assert diagnosis.classes["no_answer"].count == 4 and diagnosis.classes["wrong"].count == 2
    assert [e.task_id for e in diagnosis.classes["no_answer"].examples] == ["t3"] * 3
    assert diagnosis.classes["no_answer"].examples[0].response == "no idea"
    assert [v.name for v in result.variants] == ["plain", "terse"]
    terse = result.variants[1]
    assert terse.versus is not None and terse.versus.wins == 2 and terse.versus.losses == 0
    assert result.variant_diagnoses["terse"].lost == 0
