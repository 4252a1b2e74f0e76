"""The IFEval instruction registry: ids, their arguments, and validation.

`make_instruction(id, kwargs)` turns one entry of a dataset row (`instruction_id_list[i]`
with `kwargs[i]`) into a callable `Instruction`. The argument names are IFEval's, so rows
of `google/IFEval` work unchanged: an argument whose value is None (the Hugging Face
copy of the dataset lists every argument of every instruction, null where unused) is
treated as absent. Anything else that is wrong raises `VerifierError` naming the
instruction id and the field.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from nemo_gym.errors import VerifierError
from nemo_gym.verify.ifeval import checkers, extended
from nemo_gym.verify.ifeval.text import LANGDETECT_LANGUAGES

ParamKind = Literal["int", "str", "words", "relation", "letter", "language"]

RELATIONS = ("less than", "at least")


@dataclass(frozen=True)
class Param:
    """One keyword argument of an instruction: its name, kind and smallest value (ints)."""

    name: str
    kind: ParamKind
    minimum: int = 0


@dataclass(frozen=True)
class InstructionSpec:
    """An instruction id, its checker function and the arguments the checker takes."""

    id: str
    check: Callable[..., bool]
    params: tuple[Param, ...] = ()


@dataclass(frozen=True)
class Instruction:
    """One instruction with validated arguments; call it on a response to check it."""

    id: str
    check: Callable[..., bool] = field(repr=False)
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, response: str) -> bool:
        return bool(self.check(response, **self.kwargs))


def _spec(id: str, check: Callable[..., bool], *params: Param) -> InstructionSpec:
    return InstructionSpec(id=id, check=check, params=params)


_SPECS = (
    _spec("keywords:existence", checkers.keywords_existence, Param("keywords", "words")),
    _spec(
        "keywords:frequency",
        checkers.keywords_frequency,
        Param("keyword", "str"),
        Param("frequency", "int"),
        Param("relation", "relation"),
    ),
    _spec(
        "keywords:forbidden_words",
        checkers.keywords_forbidden_words,
        Param("forbidden_words", "words"),
    ),
    _spec(
        "keywords:letter_frequency",
        checkers.keywords_letter_frequency,
        Param("letter", "letter"),
        Param("let_frequency", "int"),
        Param("let_relation", "relation"),
    ),
    _spec(
        "language:response_language",
        checkers.language_response_language,
        Param("language", "language"),
    ),
    _spec(
        "length_constraints:number_sentences",
        checkers.length_number_sentences,
        Param("num_sentences", "int"),
        Param("relation", "relation"),
    ),
    _spec(
        "length_constraints:number_paragraphs",
        checkers.length_number_paragraphs,
        Param("num_paragraphs", "int"),
    ),
    _spec(
        "length_constraints:number_words",
        checkers.length_number_words,
        Param("num_words", "int"),
        Param("relation", "relation"),
    ),
    _spec(
        "length_constraints:nth_paragraph_first_word",
        checkers.length_nth_paragraph_first_word,
        Param("num_paragraphs", "int", minimum=1),
        Param("nth_paragraph", "int", minimum=1),
        Param("first_word", "str"),
    ),
    _spec(
        "detectable_content:number_placeholders",
        checkers.content_number_placeholders,
        Param("num_placeholders", "int"),
    ),
    _spec(
        "detectable_content:postscript",
        checkers.content_postscript,
        Param("postscript_marker", "str"),
    ),
    _spec(
        "detectable_format:number_bullet_lists",
        checkers.format_number_bullet_lists,
        Param("num_bullets", "int"),
    ),
    _spec("detectable_format:constrained_response", checkers.format_constrained_response),
    _spec(
        "detectable_format:number_highlighted_sections",
        checkers.format_number_highlighted_sections,
        Param("num_highlights", "int"),
    ),
    _spec(
        "detectable_format:multiple_sections",
        checkers.format_multiple_sections,
        Param("section_spliter", "str"),
        Param("num_sections", "int"),
    ),
    _spec("detectable_format:json_format", checkers.format_json_format),
    _spec("detectable_format:title", checkers.format_title),
    _spec("combination:two_responses", checkers.combination_two_responses),
    _spec(
        "combination:repeat_prompt",
        checkers.combination_repeat_prompt,
        Param("prompt_to_repeat", "str"),
    ),
    _spec("startend:end_checker", checkers.startend_end_checker, Param("end_phrase", "str")),
    _spec("startend:quotation", checkers.startend_quotation),
    _spec(
        "change_case:capital_word_frequency",
        checkers.case_capital_word_frequency,
        Param("capital_frequency", "int"),
        Param("capital_relation", "relation"),
    ),
    _spec("change_case:english_capital", checkers.case_english_capital),
    _spec("change_case:english_lowercase", checkers.case_english_lowercase),
    _spec("punctuation:no_comma", checkers.punctuation_no_comma),
)

_EXTENDED = tuple(
    _spec(id, check, *(Param(name, kind, minimum) for name, kind, minimum in params))  # type: ignore[arg-type]
    for id, check, params in extended.EXTENDED
)

INSTRUCTIONS: Mapping[str, InstructionSpec] = {spec.id: spec for spec in _SPECS}
"""IFEval's 25 instruction ids and their specs."""

EXTENDED_INSTRUCTIONS: Mapping[str, InstructionSpec] = {spec.id: spec for spec in _EXTENDED}
"""The IFBench-style instruction ids of `extended.py`, also accepted by `make_instruction`."""

_ALL = {**INSTRUCTIONS, **EXTENDED_INSTRUCTIONS}


def make_instruction(instruction_id: str, kwargs: Mapping[str, Any] | None = None) -> Instruction:
    """Validate one instruction id and its keyword arguments and bind them.

    Raises `VerifierError` (code "ifeval_unknown_instruction" or "ifeval_bad_kwargs")
    naming the id and the offending field.
    """
    spec = _ALL.get(instruction_id) if isinstance(instruction_id, str) else None
    if spec is None:
        raise VerifierError(
            f"unknown IFEval instruction id {instruction_id!r}; "
            f"known ids: {', '.join(sorted(_ALL))}",
            code="ifeval_unknown_instruction",
        )
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping):
        raise _bad(instruction_id, "kwargs", f"must be a JSON object, got {type(kwargs).__name__}")
    given = {key: value for key, value in kwargs.items() if not _is_null(value)}
    known = {param.name for param in spec.params}
    for key in given:
        if key not in known:
            expected = ", ".join(sorted(known)) or "no arguments"
            raise _bad(instruction_id, key, f"is not an argument of this instruction ({expected})")
    bound: dict[str, Any] = {}
    for param in spec.params:
        if param.name not in given:
            raise _bad(instruction_id, param.name, "is required")
        bound[param.name] = _coerce(instruction_id, param, given[param.name])
    if (
        instruction_id == "length_constraints:nth_paragraph_first_word"
        and bound["nth_paragraph"] > bound["num_paragraphs"]
    ):
        raise _bad(
            instruction_id,
            "nth_paragraph",
            f"is {bound['nth_paragraph']}, more than num_paragraphs={bound['num_paragraphs']}",
        )
    return Instruction(id=instruction_id, check=spec.check, kwargs=bound)


def _is_null(value: Any) -> bool:
    # Rows read through pandas carry NaN where the JSON had null.
    return value is None or (isinstance(value, float) and math.isnan(value))


def _bad(instruction_id: str, name: str, problem: str) -> VerifierError:
    return VerifierError(
        f"IFEval instruction {instruction_id!r}: argument {name!r} {problem}",
        code="ifeval_bad_kwargs",
    )


def _coerce(instruction_id: str, param: Param, value: Any) -> Any:
    """Check one argument value against its kind; return it in the form checkers take."""
    name = param.name
    if param.kind == "int":
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(instruction_id, name, f"must be an integer, got {value!r}")
        if value < param.minimum:
            raise _bad(instruction_id, name, f"must be >= {param.minimum}, got {value}")
        return value
    if param.kind == "words":
        if isinstance(value, str) or not isinstance(value, list | tuple) or not value:
            raise _bad(instruction_id, name, f"must be a non-empty list of strings, got {value!r}")
        for item in value:
            if not isinstance(item, str) or not item.strip():
                raise _bad(instruction_id, name, f"must hold non-empty strings, got {item!r}")
        return tuple(value)
    if not isinstance(value, str) or not value.strip():
        raise _bad(instruction_id, name, f"must be a non-empty string, got {value!r}")
    if param.kind == "relation" and value not in RELATIONS:
        raise _bad(instruction_id, name, f"must be one of {RELATIONS}, got {value!r}")
    if param.kind == "letter":
        letter = value.strip().lower()
        if len(letter) != 1 or not ("a" <= letter <= "z"):
            raise _bad(instruction_id, name, f"must be one ASCII letter, got {value!r}")
        return letter
    if param.kind == "language" and value not in LANGDETECT_LANGUAGES:
        raise _bad(
            instruction_id,
            name,
            f"must be a language code langdetect knows "
            f"({', '.join(sorted(LANGDETECT_LANGUAGES))}), got {value!r}",
        )
    return value
