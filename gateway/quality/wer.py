"""A word error rate of what a recogniser heard against the text the worker was asked to say.

Both sides are normalised to what a recogniser can write down: lower case, markup in
brackets dropped (``[laugh]``, ``<break/>``: nothing anyone hears as words), numbers
spelled out ("42" -> "forty two", "2.5" -> "two point five", as the recogniser's dictionary
has them), "&" and "%"
as words, hyphens and slashes between words as spaces, every other punctuation mark gone
but the apostrophe inside a word ("don't"). The rate is jiwer's: (substitutions +
deletions + insertions) / reference words, so more than 1.0 when the recogniser hears words
that are not there. Needs the ``recogniser`` extra (jiwer), imported only where the rate is
computed (the recogniser's process).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

_MARKUP = re.compile(r"\[[^\]]*\]|<[^>]*>")
_NUMBER = re.compile(r"(\d+(?:,\d{3})*)(?:\.(\d+))?")
_WORD_GAP = re.compile(r"[-\u2010-\u2015/_]+")
_NOT_WORD = re.compile(r"[^\w\s']+")
_LONE_APOSTROPHE = re.compile(r"(?<!\w)'|'(?!\w)")
_SYMBOLS = {"&": " and ", "%": " percent ", "+": " plus ", "@": " at "}

_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen"
    " sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()
_SCALES = ((1_000_000_000, "billion"), (1_000_000, "million"), (1000, "thousand"), (100, "hundred"))
MAX_SPELLED = 999_999_999_999  # beyond this a number is read digit by digit


def spell(number: int) -> str:
    """An integer in words, as a speaker reads it: 1999 -> "one thousand nine hundred ninety nine"."""
    if number < 20:
        return _ONES[number]
    if number < 100:
        tens, ones = divmod(number, 10)
        return _TENS[tens] + ("" if ones == 0 else " " + _ONES[ones])
    for scale, name in _SCALES:
        if number >= scale:
            high, rest = divmod(number, scale)
            return f"{spell(high)} {name}" + ("" if rest == 0 else " " + spell(rest))
    raise AssertionError(number)  # unreachable: every number >= 100 has a scale


def _digits(digits: str) -> str:
    return " ".join(_ONES[int(d)] for d in digits)


def _spelled(match: re.Match[str]) -> str:
    digits, decimals = match.group(1).replace(",", ""), match.group(2)
    number = int(digits)
    if number > MAX_SPELLED or (len(digits) > 1 and digits.startswith("0")):
        words = _digits(digits)  # a code or a phone number
    else:
        words = spell(number)
    return f" {words} " + ("" if decimals is None else f"point {_digits(decimals)} ")


def normalise(text: str) -> str:
    """The words of ``text`` as a recogniser writes them, single-spaced."""
    text = unicodedata.normalize("NFKC", text).lower().replace("\u2019", "'").replace("\u2018", "'")
    text = _MARKUP.sub(" ", text)
    for symbol, word in _SYMBOLS.items():
        text = text.replace(symbol, word)
    text = _NUMBER.sub(_spelled, text)
    text = _WORD_GAP.sub(" ", text)
    text = _NOT_WORD.sub(" ", text)
    text = _LONE_APOSTROPHE.sub(" ", text)
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class WordErrors:
    """One clip's alignment: the rate and what it is made of (no words: the texts are users')."""

    wer: float
    reference_words: int
    hypothesis_words: int
    substitutions: int
    deletions: int
    insertions: int


def word_errors(reference: str, hypothesis: str) -> WordErrors | None:
    """``hypothesis`` (what was heard) against ``reference`` (what was asked), both normalised
    here; None when the reference has no word to say (nothing to measure against)."""
    import jiwer  # the recogniser extra

    ref, hyp = normalise(reference), normalise(hypothesis)
    if not ref:
        return None
    if not hyp:  # jiwer wants words on both sides: every reference word deleted
        words = len(ref.split())
        return WordErrors(1.0, words, 0, 0, words, 0)
    out = jiwer.process_words(ref, hyp)
    return WordErrors(
        float(out.wer), len(ref.split()), len(hyp.split()), out.substitutions, out.deletions, out.insertions
    )
