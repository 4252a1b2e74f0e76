"""Answer statements in the languages models answer in: one table for math and choices.

Each entry is a phrase that ends where the answer starts ("la respuesta es", "答案是",
"Ответ:"), with the literal stem it begins with, so that a reader can find candidates
with `str.rfind` and check only those. Full-width punctuation (``：``) is matched as
written; the choice reader folds it with NFKC first, the math reader does not (NFKC
would turn ``x²`` into ``x2``). Numbers in the answer keep their script: Arabic-Indic,
Persian and Devanagari digits are decimal digits to the number reader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# What may join an answer noun to its answer: a colon (also full-width), a dash, "=".
_COLON = r"\s{0,3}(?:[:：=]|[-–—](?!\d))"
# Verb-final languages put the answer right after the noun ("उत्तर 42 है", "Cevap 42'dir",
# "پاسخ صحیح C است"):
# a bare noun is a phrase only when a number, a math span or a lone letter follows it on
# the same line (a noun ending a paragraph does not claim the next one's first letter).
_BARE = r"(?=[ \t\u00a0]{1,3}(?:[-−(\d$\\]|[A-Za-z](?![A-Za-z])))"


@dataclass(frozen=True, slots=True)
class Phrase:
    """An answer statement of one language: `pattern` matches at an occurrence of `stem`
    (lowercase) and ends where the answer starts. `decimal_comma` says that numbers in
    that language write ``3,5`` for 3.5."""

    language: str
    stem: str
    pattern: re.Pattern[str]
    decimal_comma: bool


def _phrase(language: str, stem: str, tail: str, *, decimal_comma: bool = False) -> Phrase:
    return Phrase(language, stem, re.compile(re.escape(stem) + tail, re.I), decimal_comma)


# A noun phrase followed by a copula or a colon. Adjectives that may sit between the
# noun and the copula ("final", "correct") are optional; articles before the noun are
# not matched (the stem is the noun). Letter options count as answers too ("the correct
# option is C"), so option nouns are here as well.
PHRASES: tuple[Phrase, ...] = (
    # Spanish
    _phrase(
        "es",
        "respuesta",
        r"(?:\s+(?:final|correcta|definitiva))?\s{1,3}(?:es|ser[áa]|ser[íi]a)(?![\w])|respuesta(?:\s+(?:final|correcta))?"
        + _COLON,
        decimal_comma=True,
    ),
    _phrase(
        "es",
        "opción",
        r"\s+correcta\s+(?:es|ser[áa])(?!\w)(?:\s+la)?(?:\s+opci[óo]n)?|"
        + "opción"
        + r"\s+correcta"
        + _COLON,
        decimal_comma=True,
    ),
    _phrase(
        "es", "alternativa", r"\s+correcta\s+(?:es|é)(?!\w)(?:\s+(?:la|a))?", decimal_comma=True
    ),
    # French
    _phrase(
        "fr",
        "réponse",
        r"(?:\s+(?:finale|correcte|exacte))?\s{1,3}(?:est|sera|serait)(?!\w)(?:\s+donc)?(?:\s+(?:la|l'option|le\s+choix))?|réponse(?:\s+(?:finale|correcte))?"
        + _COLON,
        decimal_comma=True,
    ),
    _phrase(
        "fr",
        "reponse",
        r"(?:\s+(?:finale|correcte))?\s{1,3}(?:est|sera)(?!\w)|reponse(?:\s+finale)?" + _COLON,
        decimal_comma=True,
    ),
    _phrase("fr", "option", r"\s+correcte\s+est(?!\w)", decimal_comma=True),
    # German
    _phrase(
        "de",
        "antwort",
        r"(?:\s{1,3}(?:lautet|ist|wäre)(?:\s+(?:also|daher|somit))?(?:\s+(?:option|antwort))?|"
        + _COLON
        + r")",
        decimal_comma=True,
    ),
    _phrase("de", "endergebnis", r"(?:\s{1,3}(?:lautet|ist)|" + _COLON + r")", decimal_comma=True),
    _phrase("de", "lösung", r"(?:\s{1,3}(?:lautet|ist)|" + _COLON + r")", decimal_comma=True),
    # Portuguese
    _phrase(
        "pt",
        "resposta",
        r"(?:\s+(?:final|correta|certa))?\s{1,3}(?:é|e|será|seria)(?!\w)(?:\s+(?:a|o))?(?:\s+(?:alternativa|opção|letra))?|resposta(?:\s+(?:final|correta))?"
        + _COLON,
        decimal_comma=True,
    ),
    _phrase("pt", "opção", r"\s+correta\s+é(?:\s+a)?", decimal_comma=True),
    # Italian
    _phrase(
        "it",
        "risposta",
        r"(?:\s+(?:finale|corretta|giusta|esatta))?\s{1,3}(?:è|e'|é|sarà|sarebbe)(?:\s+(?:la|l'opzione))?|risposta(?:\s+(?:finale|corretta))?"
        + _COLON,
        decimal_comma=True,
    ),
    _phrase("it", "opzione", r"\s+(?:corretta|giusta)\s+(?:è|e')", decimal_comma=True),
    # Russian, Ukrainian
    _phrase(
        "ru",
        "ответ",
        r"(?:\s{1,3}(?:будет|является|равен|это)|" + _COLON + r")",
        decimal_comma=True,
    ),
    _phrase(
        "ru",
        "вариант",
        r"(?:\s+ответа)?(?:\s{1,3}(?:это|будет)|" + _COLON + r")",
        decimal_comma=True,
    ),
    _phrase("uk", "відповідь", r"(?:\s{1,3}(?:буде|є|це)|" + _COLON + r")", decimal_comma=True),
    _phrase("uk", "варіант", r"(?:\s{1,3}(?:це|буде)|" + _COLON + r")", decimal_comma=True),
    # Chinese, Japanese, Korean (a topic marker or a colon ends the phrase)
    _phrase("zh", "答案", r"\s{0,2}(?:应该是|应为|應為|是|为|為|[:：])"),
    _phrase("zh", "正确选项", r"\s{0,2}(?:是|为|為|[:：])"),
    _phrase("zh", "结果", r"\s{0,2}(?:是|为|[:：])"),
    _phrase("ja", "答え", r"\s{0,2}(?:は|[:：])"),
    _phrase("ja", "解答", r"\s{0,2}(?:は|[:：])"),
    _phrase("ja", "正解", r"\s{0,2}(?:は|[:：])"),
    _phrase("ja", "選択肢", r"\s{0,2}(?:は|[:：])"),
    _phrase("ko", "정답", r"\s{0,2}(?:은|는|[:：])"),
    _phrase("ko", "답", r"(?:변)?\s{0,2}(?:은|는|[:：])"),
    # Arabic, Hebrew, Persian
    _phrase("ar", "الإجابة", r"(?:\s+(?:النهائية|الصحيحة))?(?:\s+(?:هي|هو)|" + _COLON + r")"),
    _phrase("ar", "الجواب", r"(?:\s+(?:النهائي|الصحيح))?(?:\s+(?:هو|هي)|" + _COLON + r")"),
    _phrase("he", "התשובה", r"(?:\s+(?:הסופית|הנכונה))?(?:\s+(?:היא|הוא)|" + _COLON + r")"),
    _phrase(
        "fa",
        "پاسخ",
        r"(?:\s+(?:نهایی|صحیح|درست))?(?:\s+(?:برابر\s+است\s+با|است|عبارت\s+است\s+از)|"
        + _COLON
        + r"|"
        + _BARE
        + r")",
    ),
    _phrase(
        "fa",
        "جواب",
        r"(?:\s+(?:نهایی|صحیح|درست))?(?:\s+(?:برابر\s+است\s+با|است)|"
        + _COLON
        + r"|"
        + _BARE
        + r")",
    ),
    # Hindi (verb-final like Persian and Turkish: "उत्तर 42 है")
    _phrase("hi", "उत्तर", r"(?:\s+(?:है|होगा))?(?:" + _COLON + r"|" + _BARE + r")"),
    _phrase("hi", "विकल्प", r"(?:\s+(?:है|होगा))?(?:" + _COLON + r"|" + _BARE + r")"),
    # Turkish ("Cevap 42'dir")
    _phrase(
        "tr",
        "cevap",
        r"(?:\s{1,3}(?:şudur|budur)|" + _COLON + r"|" + _BARE + r")",
        decimal_comma=True,
    ),
    _phrase(
        "tr",
        "yanıt",
        r"(?:\s{1,3}(?:şudur|budur)|" + _COLON + r"|" + _BARE + r")",
        decimal_comma=True,
    ),
    _phrase("tr", "seçenek", r"(?:\s{1,3}(?:şudur|budur)|" + _COLON + r")", decimal_comma=True),
    # Vietnamese, Indonesian, Thai
    _phrase(
        "vi",
        "đáp án",
        r"(?:\s+(?:cuối\s+cùng|đúng))?(?:\s{1,3}là|" + _COLON + r")",
        decimal_comma=True,
    ),
    _phrase(
        "vi",
        "câu trả lời",
        r"(?:\s+(?:cuối\s+cùng|đúng))?(?:\s{1,3}là|" + _COLON + r")",
        decimal_comma=True,
    ),
    _phrase(
        "id",
        "jawaban",
        r"(?:nya)?(?:\s+(?:akhir(?:nya)?|yang\s+benar|yang\s+tepat))?(?:\s{1,3}(?:adalah|ialah)|"
        + _COLON
        + r")",
        decimal_comma=True,
    ),
    _phrase(
        "id",
        "pilihan",
        r"\s+yang\s+(?:benar|tepat)(?:\s{1,3}(?:adalah|ialah)|" + _COLON + r")",
        decimal_comma=True,
    ),
    _phrase("th", "คำตอบ", r"(?:สุดท้าย|ที่ถูกต้อง)?\s{0,2}(?:คือ|[:：])"),
    _phrase("th", "ตัวเลือก", r"(?:ที่ถูกต้อง)\s{0,2}(?:คือ|[:：])"),
    # Polish, Dutch, Czech, Swedish, Romanian, Greek
    _phrase(
        "pl",
        "odpowiedź",
        r"(?:\s+(?:końcowa|ostateczna|poprawna|prawidłowa))?(?:\s{1,3}(?:to|brzmi|wynosi|jest)|"
        + _COLON
        + r")",
        decimal_comma=True,
    ),
    _phrase(
        "pl",
        "odpowiedz",
        r"(?:\s+(?:koncowa|poprawna))?(?:\s{1,3}(?:to|brzmi|wynosi)|" + _COLON + r")",
        decimal_comma=True,
    ),
    _phrase("nl", "antwoord", r"(?:\s{1,3}is|" + _COLON + r")", decimal_comma=True),
    _phrase("nl", "eindantwoord", r"(?:\s{1,3}is|" + _COLON + r")", decimal_comma=True),
    _phrase("cs", "odpověď", r"(?:\s{1,3}(?:je|zní)|" + _COLON + r")", decimal_comma=True),
    _phrase("sv", "svaret", r"\s{1,3}är", decimal_comma=True),
    _phrase(
        "ro", "răspunsul", r"(?:\s+(?:final|corect))?\s{1,3}(?:este|e)(?!\w)", decimal_comma=True
    ),
    _phrase("el", "απάντηση", r"(?:\s{1,3}είναι|" + _COLON + r")", decimal_comma=True),
)

LANGUAGES: tuple[str, ...] = tuple(dict.fromkeys(p.language for p in PHRASES))

_OCCURRENCES = 4  # per stem, from the end: only the last statements matter


_ASCII_PHRASES = tuple(p for p in PHRASES if p.stem.isascii())


def last_phrases(text: str, limit: int = 3) -> list[tuple[int, int, Phrase]]:
    """The last `limit` answer statements of `text` in any language: (start, end, phrase).

    Found with `str.rfind` on each stem in a tail of the text growing from the end (the
    stems of other scripts only when the text is not ASCII), and checked by its pattern
    there: one regex alternation of every phrase scanned at every position costs ~3 ms
    a kilobyte.
    """
    phrases = _ASCII_PHRASES if text.isascii() else PHRASES
    window = 4096
    while True:
        start = max(0, len(text) - window)
        region = text[start:]
        low = region.lower()
        if len(low) != len(region):  # "İ".lower() is two characters: offsets would drift
            low = region
        found = _phrases_in(text, low, start, phrases)
        if found or start == 0:
            found.sort(key=lambda item: item[0])
            return found[-limit:]
        window *= 4


def _phrases_in(
    text: str, low: str, offset: int, phrases: tuple[Phrase, ...]
) -> list[tuple[int, int, Phrase]]:
    found: list[tuple[int, int, Phrase]] = []
    for phrase in phrases:
        end = len(low)
        for _ in range(_OCCURRENCES):
            at = low.rfind(phrase.stem, 0, end)
            if at < 0:
                break
            end = at
            if at > 0 and low[at - 1].isalpha() and phrase.stem.isascii():
                continue  # inside a word: "corespuesta"
            m = phrase.pattern.match(text, offset + at)
            if m is not None:
                found.append((offset + at, m.end(), phrase))
                break
    return found


# A decimal comma ("3,5"), never a thousands group ("1,500" stays as written: either).
_DECIMAL_COMMA = re.compile(r"(?<![\d,.])(-?\d+),(\d{1,2}|\d{4,})(?![\d,])")


def decimal_commas(answer: str) -> str:
    """`3,5` as `3{,}5` (the number reader's decimal comma), for a language that writes it."""
    return _DECIMAL_COMMA.sub(r"\1{,}\2", answer)
