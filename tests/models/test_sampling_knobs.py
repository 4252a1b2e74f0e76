"""Sampling knobs beyond `Sampling`'s fields (`nemo_gym.knobs`): honoured or refused,
adapter by adapter, never dropped.

VLLM's: `test_vllm.py::test_sampling_extra_reaches_sampling_params` (vLLM's venv).
"""

from __future__ import annotations

import pytest
from tinyllama import tiny_llama

import nemo_gym as gym
from nemo_gym.errors import ModelError
from nemo_gym.knobs import KNOBS, active_knobs
from nemo_gym.records import Message, ModelRequest, Sampling

torch = pytest.importorskip("torch")

ALL = {
    "top_k": 20,
    "min_p": 0.05,
    "repetition_penalty": 1.2,
    "presence_penalty": 0.5,
    "frequency_penalty": 0.25,
}


def ask(**extra: object) -> ModelRequest:
    return ModelRequest(
        messages=(Message.user("Count to ten."),),
        sampling=Sampling(temperature=1.0, max_tokens=6, seed=3, extra=dict(extra)),
    )


def test_neutral_values_are_no_knobs() -> None:
    assert set(ALL) == KNOBS
    neutral = {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1, "presence_penalty": 0}
    assert active_knobs({**neutral, "frequency_penalty": 0.0, "other": 1}) == {}
    assert active_knobs(ALL) == ALL


# -- LivePolicy / Local: the sampler applies them ----------------------------------------


def test_repetition_penalty_is_transformers_own() -> None:
    from transformers import RepetitionPenaltyLogitsProcessor

    from nemo_gym.models.policy import Knobs, _penalise

    scores = torch.randn(1, 40, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[3, 7, 7, 12, 39]])
    expected = RepetitionPenaltyLogitsProcessor(penalty=1.7)(ids, scores.clone())[0]
    seen = torch.unique(ids[0])
    ours = _penalise(scores[0], Knobs(repetition_penalty=1.7), seen, None)
    assert torch.allclose(ours, expected)


def test_presence_and_frequency_penalties_subtract_as_vllm_does() -> None:
    from nemo_gym.models.policy import Knobs, _penalise

    scores = torch.zeros(10)
    completion = torch.tensor([2, 2, 2, 5])
    counts = torch.unique(completion, return_counts=True)
    ours = _penalise(scores, Knobs(presence_penalty=0.5, frequency_penalty=0.25), None, counts)
    # vLLM: logits -= frequency_penalty * count + presence_penalty * (count > 0)
    assert ours[2] == pytest.approx(-(0.25 * 3 + 0.5))
    assert ours[5] == pytest.approx(-(0.25 + 0.5))
    assert ours[0] == 0.0 and scores.abs().sum() == 0  # a copy


def test_top_k_and_min_p_truncate_and_the_logprob_stays_the_tempered_one() -> None:
    from nemo_gym.models.policy import Knobs, sample_next

    logits = torch.tensor([[4.0, 3.9, 3.8, 0.0, -1.0]])
    gens = [torch.Generator().manual_seed(s) for s in range(60)]
    top2 = {sample_next(logits, [1.0], [1.0], [g], [Knobs(top_k=2)])[0][0] for g in gens}
    assert top2 == {0, 1}
    gens = [torch.Generator().manual_seed(s) for s in range(60)]
    kept = {sample_next(logits, [1.0], [1.0], [g], [Knobs(min_p=0.5)])[0][0] for g in gens}
    assert kept == {0, 1, 2}  # e^-0.2 > 0.5 > e^-4
    tokens, logprobs = sample_next(
        logits, [0.5], [1.0], [torch.Generator().manual_seed(1)], [Knobs(top_k=1)]
    )
    assert tokens == [0]
    assert logprobs[0] == pytest.approx(float(torch.log_softmax(logits[0] / 0.5, -1)[0]))


@pytest.fixture(scope="module")
def tiny():
    """A random-weight two-layer Llama with SmolLM2's tokenizer (no download)."""
    transformers = pytest.importorskip("transformers")
    from nemo_gym.models.local import converted_checkpoint, embedded_gguf_path

    directory, _ = converted_checkpoint(embedded_gguf_path())
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(directory))
    return tiny_llama(tokenizer), tokenizer


async def test_live_policy_applies_every_knob(tiny) -> None:
    model, tokenizer = tiny
    async with gym.models.LivePolicy(model, tokenizer) as policy:
        greedy = await policy.generate(
            ModelRequest(messages=ask().messages, sampling=Sampling(temperature=0.0, max_tokens=6))
        )
        # top_k=1 (and min_p=1) at temperature 1 can only pick the argmax: greedy's ids.
        # Dropped, as before, they sampled from all 49k tokens.
        for knob in ({"top_k": 1}, {"min_p": 1.0}):
            sampled = await policy.generate(ask(**knob))
            assert sampled.completion_token_ids == greedy.completion_token_ids, knob
            assert sampled.sampling.extra == knob
        # A frequency penalty pushes every token used once below the unused ones.
        repeated = await policy.generate(
            ModelRequest(
                messages=ask().messages,
                sampling=Sampling(temperature=0.0, max_tokens=12, extra={"frequency_penalty": 2}),
            )
        )
        ids = repeated.completion_token_ids
        assert len(set(ids)) == len(ids)
        everything = await policy.generate(ask(**ALL))
        assert everything.finish_reason in ("stop", "length")


async def test_live_policy_refuses_what_it_cannot_apply(tiny) -> None:
    model, tokenizer = tiny
    async with gym.models.LivePolicy(model, tokenizer) as policy:
        with pytest.raises(ModelError, match=r"LivePolicy cannot honour .*typical_p=0\.9") as info:
            await policy.generate(ask(typical_p=0.9))
        assert info.value.code == "unsupported"
        with pytest.raises(ModelError, match=r"top_k=2\.5 must be an integer"):
            await policy.generate(ask(top_k=2.5))
        with pytest.raises(ModelError, match=r"min_p=1.5 must be in \[0, 1\]"):
            await policy.generate(ask(min_p=1.5))


# -- HTTP adapters: the knobs go into the body their servers read ----------------------------


@pytest.mark.parametrize("kind", ["OpenAIChat", "OpenAICompletions", "OpenAIResponses"])
def test_openai_shaped_adapters_send_every_knob(kind: str) -> None:
    pytest.importorskip("openai")
    adapter = getattr(gym.models, kind)("policy", base_url="http://127.0.0.1:9/v1")
    body, sent = adapter.build(ask(**ALL))
    for name, value in ALL.items():
        assert body[name] == value  # the field names vLLM's servers read
    assert sent.extra == ALL


def test_anthropic_sends_top_k_and_refuses_the_rest() -> None:
    pytest.importorskip("anthropic")
    adapter = gym.models.Anthropic("claude", base_url="http://127.0.0.1:9")
    body, _ = adapter.build(ask(top_k=5, min_p=0.0))  # a neutral min_p changes nothing
    assert body["top_k"] == 5
    for name in ("min_p", "repetition_penalty", "presence_penalty", "frequency_penalty"):
        with pytest.raises(ModelError, match=f"Anthropic cannot honour .*{name}=") as info:
            adapter.build(ask(**{name: ALL[name]}))
        assert info.value.code == "unsupported" and not info.value.retryable


# -- ScriptedModel: the reply function is the model ------------------------------------------


async def test_scripted_model_hands_the_knobs_to_its_function() -> None:
    seen: list[dict[str, object]] = []

    def reply(request: ModelRequest) -> str:
        seen.append(dict(request.sampling.extra))
        return "ok"

    await gym.models.ScriptedModel(reply).generate(ask(**ALL))
    assert seen == [ALL]


async def test_unseeded_requests_do_not_follow_the_trainers_global_seed(tiny) -> None:
    """Every process of a distributed run seeds Python's `random` alike (transformers'
    set_seed): the seed drawn for an unseeded request must not come from it."""
    import random

    model, tokenizer = tiny
    request = ModelRequest(messages=ask().messages, sampling=Sampling(max_tokens=2))
    drawn = []
    async with gym.models.LivePolicy(model, tokenizer) as policy:
        for _ in range(2):  # two "processes", seeded alike
            random.seed(0)
            drawn.append((await policy.generate(request)).sampling.seed)
    assert drawn[0] != drawn[1]
