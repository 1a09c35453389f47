"""Incremental sentence splitting with the rules of the vllm-omni 0.30 worker.

Text arrives in pieces (an LLM's tokens); ``SentenceSplitter.feed`` returns the units that
are complete so far and keeps the rest, ``flush`` (the session's ``input.done``) returns
the tail as well. The rules are the worker's ``speech_text_splitter.py``, so a unit cut
here is the unit the worker would synthesize:

- ``sentence`` cuts after ``. ! ?`` and ``。 ！ ？ … । ॥ ؟``; ``clause`` also after
  ``, ;`` and ``， ； ، ؛``; ``none`` keeps everything for ``flush``.
- A run of marks and closing quotes or brackets stays with its unit (``Wait...``,
  ``"Hello."``). A run that ends the buffer waits for more text: the next piece may
  extend it, and an ASCII mark only cuts before whitespace.
- ASCII marks are ambiguous, so they never cut between digits (``3.14``, ``1,000``),
  after a single letter (``J. R. R.``) or after a known abbreviation (``Dr.``, ``e.g.``).
  Other scripts' marks always cut.
- No minimum or maximum length and no forced cut: a bare ``...`` is a unit.

Pure and dependency-free: the worker emulator and the gateway's sessions both use it.
"""

from __future__ import annotations

from typing import Literal, get_args

Granularity = Literal["none", "sentence", "clause"]
GRANULARITIES: tuple[str, ...] = get_args(Granularity)

# ASCII marks also end numbers and abbreviations: they cut only before whitespace.
_ASCII_SENTENCE_MARKS = frozenset(".!?")
_ASCII_CLAUSE_MARKS = _ASCII_SENTENCE_MARKS | frozenset(",;")
# CJK, Indic danda and Arabic marks are unambiguous: they cut whatever follows.
_SCRIPT_SENTENCE_MARKS = frozenset("。！？…।॥؟")
_SCRIPT_CLAUSE_MARKS = _SCRIPT_SENTENCE_MARKS | frozenset("，；،؛")

SENTENCE_MARKS = _ASCII_SENTENCE_MARKS | _SCRIPT_SENTENCE_MARKS
CLAUSE_MARKS = _ASCII_CLAUSE_MARKS | _SCRIPT_CLAUSE_MARKS

# Characters that close the unit they follow, so `He said "Hello."` stays one unit.
CLOSERS = frozenset("\"'”’»)]}』」）】")
_RUN_CHARS = CLAUSE_MARKS | CLOSERS

# Words whose `.` is not the end of a sentence, compared in lower case. Single letters
# (initials) are handled apart.
ABBREVIATIONS = frozenset(
    {
        "dr", "mr", "mrs", "ms", "prof", "sr", "jr", "st", "mt", "fig", "no", "vs", "etc", "approx",
        "dept", "inc", "ltd", "co", "al", "e.g", "i.e", "u.s", "u.k", "a.m", "p.m",
    }
)  # fmt: skip
# Looking back further than the longest abbreviation can only rule a word out, so the
# look-back is bounded: a long run of `a.a.a.` costs the same at every mark.
_LONGEST_ABBREVIATION = max(len(word) for word in ABBREVIATIONS)


def _is_word_char(ch: str) -> bool:
    return ch.isalnum() or ch == "."


def _is_number_separator(text: str, index: int) -> bool:
    """The `.` or `,` inside `3.14` or `1,000`."""
    return (
        text[index] in ".,"
        and index > 0
        and text[index - 1].isdigit()
        and index + 1 < len(text)
        and text[index + 1].isdigit()
    )


def _is_abbreviation(text: str, index: int) -> bool:
    """The `.` of `Dr.`, `e.g.` or an initial such as `J.`."""
    if text[index] != ".":
        return False
    limit = max(0, index - _LONGEST_ABBREVIATION)
    start = index
    while start > limit and _is_word_char(text[start - 1]):
        start -= 1
    if start > 0 and _is_word_char(text[start - 1]):
        return False  # the word is longer than any abbreviation
    word = text[start:index]
    if not word:
        return False
    if len(word) == 1 and word.isalpha():
        return True
    return word.lower().strip(".") in ABBREVIATIONS


def split_units(text: str, marks: frozenset[str], *, flush: bool, scan_from: int = 0) -> tuple[list[str], str, int]:
    """Cut the complete units off the front of ``text``.

    Returns ``(units, remainder, next_scan)``: units are stripped and never empty; the
    remainder is the text still waiting for its end (empty after a flush, which emits
    the stripped tail as a last unit); ``next_scan`` is the offset in the remainder from
    which a later call must look again, so appended text is not rescanned from the start.
    """
    units: list[str] = []
    unit_start = 0
    index = max(scan_from, 0)
    length = len(text)
    while index < length:
        ch = text[index]
        if ch not in marks or _is_number_separator(text, index) or _is_abbreviation(text, index):
            index += 1
            continue
        run_end = index + 1  # the marks and closers that follow belong to this unit
        while run_end < length and text[run_end] in _RUN_CHARS:
            run_end += 1
        if run_end >= length and not flush:
            # The run may still grow (`Wait.` → `Wait...`): look at this mark again next time.
            return units, text[unit_start:], index - unit_start
        if run_end < length and ch in _ASCII_CLAUSE_MARKS and not text[run_end].isspace():
            index = run_end  # `OK.Next`: an ASCII mark glued to a word does not cut
            continue
        if unit := text[unit_start:run_end].strip():
            units.append(unit)
        index = run_end
        while index < length and text[index].isspace():
            index += 1
        unit_start = index
    remainder = text[unit_start:]
    if flush:
        if tail := remainder.strip():
            units.append(tail)
        return units, "", 0
    return units, remainder, len(remainder)


class SentenceSplitter:
    """The units of one text stream: ``feed`` the pieces, ``flush`` at its end.

    ``none`` emits nothing until ``flush``, then the whole stripped text (or nothing if
    it is blank). After ``flush`` the splitter is empty and can take the next stream.
    """

    def __init__(self, granularity: Granularity = "sentence") -> None:
        if granularity not in GRANULARITIES:
            raise ValueError(f"Unsupported split_granularity: {granularity!r}")
        self.granularity: Granularity = granularity
        self._marks: frozenset[str] | None = {"none": None, "sentence": SENTENCE_MARKS, "clause": CLAUSE_MARKS}[granularity]
        self._buffer = ""
        self._scan = 0

    @property
    def pending(self) -> str:
        """Text fed but not yet emitted."""
        return self._buffer

    def feed(self, text: str) -> list[str]:
        self._buffer += text
        if self._marks is None:
            return []
        units, self._buffer, self._scan = split_units(self._buffer, self._marks, flush=False, scan_from=self._scan)
        return units

    def flush(self) -> list[str]:
        if self._marks is None:
            tail, self._buffer, self._scan = self._buffer.strip(), "", 0
            return [tail] if tail else []
        units, self._buffer, self._scan = split_units(self._buffer, self._marks, flush=True, scan_from=self._scan)
        return units
