"""`citations`: NeMo Gym's citation_if gates (compared with its own scorer in
tests/interop/test_nemo_gym_servers.py); here the grammars its example rows lack and row errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nemo_gym as gym
from nemo_gym.envs.instructions.citations import score_citations
from nemo_gym.errors import ConfigError


def check(grammar: str, **over: object) -> dict[str, object]:
    return {
        "mode": "cite",
        "grammar": grammar,
        "id_regex": "citation_[a-z0-9]{4}",
        "valid_id_set": ["citation_aaaa", "citation_bbbb", "citation_cccc"],
        "expected_ids": ["citation_aaaa"],
        "expected_slack": 1,
        "min_valid_citations": 1,
        **over,
    }


@pytest.mark.parametrize(
    ("text", "reward", "gate"),
    [
        ('Yes <cite index="citation_aaaa">the page says so</cite>.', 1.0, None),
        # The claim alone is the answer.
        ('<cite index="citation_aaaa">Bern is on the Aare</cite>', 1.0, None),
        # An empty claim is no citation: the ID is left bare.
        ('Yes <cite index="citation_aaaa"> </cite>.', 0.0, "malformed_attempt"),
        ('Yes <cite index="citation_aaaa,citation_bbbb">so</cite>.', 1.0, None),
        ('Yes <cite index="citation_aaaa">so</cite> </cite>.', 0.0, "malformed_attempt"),
    ],
)
def test_claim_wrap_grammar(text: str, reward: float, gate: str | None) -> None:
    assert score_citations(text, 0, check("claim_wrap_xml")) == (reward, gate)


def test_gates_in_order() -> None:
    c = check("ascii_brackets")
    assert score_citations("", 0, c) == (0.0, "structural")
    assert score_citations("Yes [citation_aaaa].", 1, c) == (0.0, "structural")
    assert score_citations("[citation_aaaa]", 0, c) == (0.0, "no_answer")
    assert score_citations("Yes.", 0, c) == (0.0, "must_cite")
    assert score_citations("Yes [citation_zzzz] [citation_aaaa].", 0, c) == (
        0.0,
        "no_hallucination",
    )
    assert score_citations("Yes [citation_bbbb].", 0, c) == (0.0, "correctness_missed_gold")
    over = "Yes [citation_aaaa] [citation_bbbb] [citation_cccc]."
    assert score_citations(over, 0, c) == (0.0, "correctness_over_cap")
    assert score_citations(over, 0, check("ascii_brackets", expected_ids=None)) == (1.0, None)
    assert score_citations("Yes [citation_1].", 0, c) == (0.0, "malformed_attempt")


def test_no_cite_mode_rejects_bare_markup() -> None:
    c = check("cite_xml", mode="no_cite", expected_ids=None)
    assert score_citations("Eliot wrote it.", 0, c) == (1.0, None)
    assert score_citations("Eliot wrote it <cite>.", 0, c) == (0.0, "no_cite")


def test_the_sample_runs() -> None:
    assert gym.check_env(gym.make("citations")).ok


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"grammar": "bold"}, "grammar 'bold'"),
        ({"mode": "maybe"}, "mode must be"),
        ({"id_regex": "citation_("}, "id_regex"),
        ({"valid_id_set": "citation_aaaa"}, "valid_id_set must be a list"),
        ({"expected_slack": -1}, "expected_slack"),
    ],
)
def test_bad_rows_name_the_field(tmp_path: Path, change: dict[str, object], field: str) -> None:
    row = {
        "responses_create_params": {"input": "Q?"},
        "verifier": {**check("ascii_brackets"), **change},
    }
    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ConfigError, match=f"rows.jsonl:1: field 'verifier'.*{field}"):
        gym.make("citations", path=str(path)).tasks()
