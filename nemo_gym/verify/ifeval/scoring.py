"""Strict and loose IFEval scoring of one response against its instructions.

Strict: the response as written must follow the instruction. Loose (IFEval's definition):
the instruction is followed if any of eight variants of the response follows it: the
response, without its first line, without its last line, without both, and each of those
four with every `*` removed (so markdown emphasis and a chatty opening or closing line
do not count against a response). A response that is empty after `strip()` follows
nothing, in either mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nemo_gym.errors import VerifierError
from nemo_gym.verify.ifeval.registry import Instruction, make_instruction


@dataclass(frozen=True)
class InstructionResult:
    """Whether one instruction was followed, strictly and loosely."""

    instruction_id: str
    strict: bool
    loose: bool

    def as_dict(self) -> dict[str, Any]:
        return {"instruction_id": self.instruction_id, "strict": self.strict, "loose": self.loose}


@dataclass(frozen=True)
class IFEvalScore:
    """The per-instruction results of one response, with prompt- and instruction-level scores."""

    results: tuple[InstructionResult, ...]

    @property
    def prompt_strict(self) -> bool:
        """Every instruction followed, strictly."""
        return all(result.strict for result in self.results)

    @property
    def prompt_loose(self) -> bool:
        """Every instruction followed, loosely."""
        return all(result.loose for result in self.results)

    @property
    def instruction_strict(self) -> float:
        """The fraction of instructions followed, strictly."""
        return sum(result.strict for result in self.results) / len(self.results)

    @property
    def instruction_loose(self) -> float:
        """The fraction of instructions followed, loosely."""
        return sum(result.loose for result in self.results) / len(self.results)

    def components(self) -> dict[str, float]:
        """The four IFEval scores as floats, keyed as `Rewards.components`."""
        return {
            "prompt_strict": float(self.prompt_strict),
            "instruction_strict": self.instruction_strict,
            "prompt_loose": float(self.prompt_loose),
            "instruction_loose": self.instruction_loose,
        }


def loose_variants(response: str) -> list[str]:
    """The eight responses IFEval's loose mode tries, in its order."""
    lines = response.split("\n")
    without_first = "\n".join(lines[1:]).strip()
    without_last = "\n".join(lines[:-1]).strip()
    without_both = "\n".join(lines[1:-1]).strip()
    return [
        response,
        response.replace("*", ""),
        without_first,
        without_last,
        without_both,
        without_first.replace("*", ""),
        without_last.replace("*", ""),
        without_both.replace("*", ""),
    ]


def build_instructions(
    instruction_id_list: Sequence[str], kwargs: Sequence[Mapping[str, Any] | None] | None
) -> list[Instruction]:
    """Validate a row's `instruction_id_list` and `kwargs` into bound instructions.

    `kwargs` may be None (no instruction takes arguments) or one mapping (or None) per id.
    Raises `VerifierError` naming the id and field on any problem.
    """
    if isinstance(instruction_id_list, str) or not isinstance(instruction_id_list, Sequence):
        raise VerifierError(
            f"IFEval 'instruction_id_list' must be a list of ids, got {instruction_id_list!r}",
            code="ifeval_bad_kwargs",
        )
    if not instruction_id_list:
        raise VerifierError("IFEval 'instruction_id_list' is empty", code="ifeval_bad_kwargs")
    if kwargs is None:
        kwargs = [None] * len(instruction_id_list)
    if isinstance(kwargs, Mapping | str) or not isinstance(kwargs, Sequence):
        raise VerifierError(
            f"IFEval 'kwargs' must be a list with one object per instruction, got {kwargs!r}",
            code="ifeval_bad_kwargs",
        )
    if len(kwargs) != len(instruction_id_list):
        raise VerifierError(
            f"IFEval 'kwargs' has {len(kwargs)} entries for "
            f"{len(instruction_id_list)} instruction ids",
            code="ifeval_bad_kwargs",
        )
    pairs = zip(instruction_id_list, kwargs, strict=True)
    return [make_instruction(instruction_id, args) for instruction_id, args in pairs]


def score_instructions(response: str, instructions: Sequence[Instruction]) -> IFEvalScore:
    """Check already-built instructions against a response, strictly and loosely."""
    variants = loose_variants(response)
    results = []
    for instruction in instructions:
        strict = bool(response.strip()) and instruction(response)
        # The first variant is the response itself, so strict implies loose.
        loose = strict or any(v.strip() and instruction(v) for v in variants[1:])
        results.append(InstructionResult(instruction.id, strict, loose))
    return IFEvalScore(results=tuple(results))


def score_response(
    response: str,
    instruction_id_list: Sequence[str],
    kwargs: Sequence[Mapping[str, Any] | None] | None = None,
) -> IFEvalScore:
    """Score one response against an IFEval row's instructions (strict and loose).

    ```python
    score = score_response("hello there", ["change_case:english_lowercase"], [{}])
    assert score.prompt_strict
    ```
    """
    return score_instructions(response, build_instructions(instruction_id_list, kwargs))
