"""Tests for chrF and spBLEU.

The FLORES-200 SentencePiece model is not available offline, so spBLEU is tested with
a small SentencePiece model trained here, and checked against sacrebleu's own
``BLEU(tokenize="flores200")`` by placing that model where sacrebleu looks for it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nemo_gym.errors import ConfigError, VerifierError
from nemo_gym.records import Message, Task, Trajectory
from nemo_gym.verify.translation import ChrF, SpBLEU, flores200_model_path

sacrebleu = pytest.importorskip("sacrebleu")
spm = pytest.importorskip("sentencepiece")

SENTENCES = [
    "The cat sat on the mat.",
    "A quick brown fox jumps over the lazy dog.",
    "Le chat est assis sur le tapis.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El gato está sentado en la alfombra.",
    "Machine translation quality is measured with BLEU and chrF.",
    "Sentence piece models split words into subword units.",
    "Reinforcement learning environments reward correct translations.",
] * 8


def reply(text: str) -> Trajectory:
    return Trajectory(messages=[Message.user("translate"), Message.assistant(text)])


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("spm")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES), encoding="utf-8")
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(root / "tiny"),
        vocab_size=80,
        model_type="unigram",
        num_threads=1,
        minloglevel=2,
    )
    return root / "tiny.model"


async def test_chrf_matches_sacrebleu() -> None:
    task = Task(prompt="q", answer="The cat sat on the mat.")
    result = await ChrF().verify(task, reply("The cat is on the mat."))
    expected = sacrebleu.metrics.CHRF().sentence_score(
        "The cat is on the mat.", ["The cat sat on the mat."]
    )
    assert result.reward == pytest.approx(expected.score / 100)
    assert result.components == {"chrf": result.reward}
    perfect = await ChrF().verify(task, reply("The cat sat on the mat."))
    assert perfect.reward == pytest.approx(1.0)


async def test_chrf_plus_plus_and_multiple_references() -> None:
    task = Task(prompt="q", answer=["Hello there.", "Hi, how are you?"])
    plus = await ChrF(word_order=2).verify(task, reply("Hi, how are you?"))
    assert plus.reward == pytest.approx(1.0)
    unrelated = await ChrF().verify(task, reply("Zzz qqq"))
    assert unrelated.reward < 0.1


async def test_spbleu_with_a_model_file(spm_model: Path) -> None:
    task = Task(prompt="q", answer="The cat sat on the mat.")
    verifier = SpBLEU(spm_model)
    assert (await verifier.verify(task, reply("The cat sat on the mat."))).reward == pytest.approx(
        1.0
    )
    partial = await verifier.verify(task, reply("The cat sat on a mat."))
    assert 0.0 < partial.reward < 1.0
    assert partial.components == {"spbleu": partial.reward}


async def test_spbleu_equals_sacrebleu_flores200(
    spm_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the model at sacrebleu's path, SpBLEU equals BLEU(tokenize="flores200")."""
    from sacrebleu.tokenizers import tokenizer_spm

    monkeypatch.setenv("SACREBLEU", str(tmp_path))
    monkeypatch.setattr(tokenizer_spm, "SACREBLEU_DIR", str(tmp_path))
    target = flores200_model_path()
    assert target.parent.parent == tmp_path
    target.parent.mkdir(parents=True)
    target.write_bytes(spm_model.read_bytes())
    ours = SpBLEU()  # finds the model at sacrebleu's path
    theirs = sacrebleu.metrics.BLEU(tokenize="flores200", effective_order=True)
    pairs = [
        ("Le chat est sur le tapis.", ["Le chat est assis sur le tapis."]),
        ("A brown fox jumps over a dog.", ["A quick brown fox jumps over the lazy dog."]),
        ("Der Fuchs springt.", ["Der schnelle braune Fuchs springt über den faulen Hund."]),
    ]
    for hypothesis, references in pairs:
        result = await ours.verify(Task(prompt="q", answer=references), reply(hypothesis))
        expected = theirs.sentence_score(hypothesis, references).score
        assert result.metadata["score"] == pytest.approx(expected)


def test_spbleu_without_model_says_where(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SACREBLEU", str(tmp_path))
    with pytest.raises(ConfigError, match="flores200sacrebleuspm"):
        SpBLEU()
    with pytest.raises(ConfigError, match="no SentencePiece model"):
        SpBLEU(tmp_path / "missing.model")
    bad = tmp_path / "bad.model"
    bad.write_bytes(b"not a model")
    with pytest.raises(ConfigError, match="not a SentencePiece model"):
        SpBLEU(bad)


async def test_missing_gold_raises() -> None:
    with pytest.raises(VerifierError):
        await ChrF().verify(Task(prompt="q"), reply("x"))
