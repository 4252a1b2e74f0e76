"""Numbers written in words: "five", "one hundred and twenty", "a third", `\\text{four}`,
"the fifth", "negative two", and the common words of other languages ("cinq",
"fünf", "五十").

`spelled_number` reads a whole answer (it never finds a number inside prose: "no one"
is not 1); `last_spelled_number` finds the last number phrase of a closing sentence.
"""

from __future__ import annotations

import re
from fractions import Fraction

_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
    "fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_ORDINALS = (
    "zeroth first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth "
    "thirteenth fourteenth fifteenth sixteenth seventeenth eighteenth nineteenth"
).split()
_TENTHS = "twentieth thirtieth fortieth fiftieth sixtieth seventieth eightieth ninetieth".split()

_CARDINAL: dict[str, int] = {w: i for i, w in enumerate(_UNITS)}
_CARDINAL.update({w: 20 + 10 * i for i, w in enumerate(_TENS)})
_ORDINAL: dict[str, int] = {w: i for i, w in enumerate(_ORDINALS)}
_ORDINAL.update({w: 20 + 10 * i for i, w in enumerate(_TENTHS)})
_ORDINAL.update({"hundredth": 100, "thousandth": 1000})
# Denominators: "a third", "two thirds", "three quarters", "one half".
_DENOMINATOR: dict[str, int] = {"half": 2, "halves": 2, "quarter": 4, "quarters": 4}
_DENOMINATOR.update({w: n for w, n in _ORDINAL.items() if n >= 3})
_DENOMINATOR.update({w + "s": n for w, n in _ORDINAL.items() if n >= 3})

# Single words of other languages (compounds such as "veintitrés" are not read).
_FOREIGN: dict[str, int] = {}
for _words in (
    # Spanish, French, German, Italian, Portuguese, Dutch
    "cero uno dos tres cuatro cinco seis siete ocho nueve diez once doce trece catorce quince",
    "zéro un deux trois quatre cinq six sept huit neuf dix onze douze treize quatorze quinze",
    "- eins zwei drei vier fünf sechs sieben acht neun zehn elf zwölf",
    "zero uno due tre quattro cinque sei sette otto nove dieci undici dodici",
    "zero um dois três quatro cinco seis sete oito nove dez onze doze",
    "- een twee drie vier vijf zes zeven acht negen tien elf twaalf",
    # Russian, Ukrainian, Polish, Turkish, Indonesian
    "ноль один два три четыре пять шесть семь восемь девять десять",
    "нуль один два три чотири п'ять шість сім вісім дев'ять десять",
    "zero jeden dwa trzy cztery pięć sześć siedem osiem dziewięć dziesięć",
    "sıfır bir iki üç dört beş altı yedi sekiz dokuz on",
    "nol satu dua tiga empat lima enam tujuh delapan sembilan sepuluh",
):
    for _value, _word in enumerate(_words.split()):
        if _word != "-":
            _FOREIGN.setdefault(_word, _value)
_FOREIGN.update({"veinte": 20, "vingt": 20, "zwanzig": 20, "venti": 20, "vinte": 20, "twintig": 20})
_FOREIGN.update({"cien": 100, "cent": 100, "hundert": 100, "cento": 100, "cem": 100})
_FOREIGN.update({"une": 1, "una": 1, "ein": 1, "eine": 1, "uma": 1, "één": 1})

_CJK_DIGITS = {c: i for i, c in enumerate("零一二三四五六七八九")}
_CJK_DIGITS.update({"〇": 0, "两": 2, "兩": 2})
_CJK_SCALES = {"十": 10, "百": 100, "千": 1000, "万": 10_000, "萬": 10_000, "亿": 10**8}

_WRAPPERS = re.compile(
    r"\\(?:text|textbf|textrm|mathrm|mbox)\s*\{([^{}]*)\}|\$|\\[()\[\]]|[*_`]|\\,|\\ "
)
_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[^\W\d_]")
_ARTICLES = re.compile(r"^(?:the|exactly|just|only|about)\s+", re.I)
_SIGN = re.compile(r"^(?:negative|minus)\s+", re.I)


def _english(words: list[str]) -> Fraction | None:
    """An English number phrase (already split, lowercase, no "and"), or None."""
    if not words:
        return None
    if len(words) == 1 and words[0] in _ORDINAL:
        return Fraction(_ORDINAL[words[0]])  # "the fifth": a count asked as an ordinal
    if len(words) >= 2 and words[-1] in _DENOMINATOR:
        numerator = 1 if words[:-1] in (["a"], ["an"]) else _cardinal(words[:-1])
        if numerator is None:
            return None
        return Fraction(numerator, _DENOMINATOR[words[-1]])
    value = _cardinal(words)
    return Fraction(value) if value is not None else None


def _cardinal(words: list[str]) -> int | None:
    total = current = 0
    seen = False
    for index, word in enumerate(words):
        if word in ("a", "an") and index == 0 and len(words) > 1 and words[1] in _SCALES:
            current, seen = 1, True
        elif word in _CARDINAL:
            if seen and current % 10 != 0 and current < 100 and current % 100 != 0:
                return None  # "five three"
            current += _CARDINAL[word]
            seen = True
        elif word in _SCALES and seen:
            scale = _SCALES[word]
            if scale == 100:
                current *= 100
            else:
                total += current * scale
                current = 0
        else:
            return None
    return total + current if seen else None


def _cjk(text: str) -> int | None:
    if not text or any(c not in _CJK_DIGITS and c not in _CJK_SCALES for c in text):
        return None
    total = section = digit = 0
    for c in text:
        if c in _CJK_DIGITS:
            digit = _CJK_DIGITS[c]
        elif _CJK_SCALES[c] >= 10_000:
            total += (section + digit) * _CJK_SCALES[c]
            section = digit = 0
        else:
            section += (digit or 1) * _CJK_SCALES[c]  # "十二" is 12
            digit = 0
    return total + section + digit


def spelled_number(text: str) -> str | None:
    """The number an answer spells out in words, as digits ("one hundred and twenty" ->
    "120", "a third" -> "1/3", "-2" for "negative two"), or None when `text` is not
    wholly a number phrase."""
    if len(text) > 120 or _DIGIT.search(text) or not _LETTER.search(text):
        return None
    plain = _WRAPPERS.sub(lambda m: m.group(1) or " ", text).strip().strip(".!。")
    plain = _ARTICLES.sub("", plain.strip())
    sign = 1
    if _SIGN.match(plain):
        sign, plain = -1, _SIGN.sub("", plain)
    low = plain.lower()
    value: Fraction | int | None
    if low in _FOREIGN:
        value = _FOREIGN[low]
    elif (cjk := _cjk(plain)) is not None:
        value = cjk
    else:
        words = [w for w in re.split(r"[\s\-]+", low) if w and w != "and"]
        value = _english(words)
    if value is None:
        return None
    value = Fraction(value) * sign
    return str(value.numerator) if value.denominator == 1 else f"{value}"


_PHRASE = re.compile(
    r"(?i)(?<![\w-])(?:(?:negative|minus)\s+)?(?:(?:a|an|"
    + "|".join(sorted(list(_CARDINAL) + list(_SCALES), key=len, reverse=True))
    + r")(?:[\s-]+(?:and[\s-]+)?)?)*(?:"
    + "|".join(sorted(list(_CARDINAL) + list(_SCALES) + list(_DENOMINATOR), key=len, reverse=True))
    + r")(?![\w-])"
)
_SOLITARY = frozenset(("one", "a", "an"))  # "no one", "one of them": not numbers


def last_spelled_number(sentence: str) -> str | None:
    """The last English number phrase of a closing sentence with no digits, as digits
    ("So she has twelve apples left." -> "12"); "one" alone is not read (prose)."""
    last = None
    for last in _PHRASE.finditer(sentence):  # noqa: B007 (the last one)
        pass
    if last is None or last.group(0).lower() in _SOLITARY:
        return None
    return spelled_number(last.group(0))
