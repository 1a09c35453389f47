"""The sentence splitter against the released worker's rules.

Line references: SPL = vllm-omni 0.30.0 ``entrypoints/openai/speech_text_splitter.py``, and
the lines of the speech-stream reference notes (``REF:65``) that quote them.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.worker.sentences import SentenceSplitter, split_units


def run(granularity: str, *pieces: str) -> tuple[list[list[str]], list[str]]:
    """What each ``feed`` emitted, then what ``flush`` emitted."""
    splitter = SentenceSplitter(granularity)  # type: ignore[arg-type]
    fed = [splitter.feed(piece) for piece in pieces]
    return fed, splitter.flush()


def units(granularity: str, text: str) -> list[str]:
    fed, flushed = run(granularity, text)
    return fed[0] + flushed


# REF:63 (SPL:20–32): sentence marks, Latin and other scripts.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("One. Two! Three? Four", ["One.", "Two!", "Three?", "Four"]),
        ("你好。世界！真的？", ["你好。", "世界！", "真的？"]),
        ("Wait… what", ["Wait…", "what"]),
        ("नमस्ते। ठीक॥ हाँ", ["नमस्ते।", "ठीक॥", "हाँ"]),
        ("كيف؟ بخير", ["كيف؟", "بخير"]),
        ("a, b; c", ["a, b; c"]),  # commas and semicolons are clause marks only
        ("一，二；三", ["一，二；三"]),
    ],
)
def test_sentence_marks(text: str, expected: list[str]) -> None:
    assert units("sentence", text) == expected


# REF:64 (SPL:33–38): clause adds , ; and their CJK and Arabic forms.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a, b; go. d", ["a,", "b;", "go.", "d"]),
        ("一，二；三。", ["一，", "二；", "三。"]),
        ("واحد، اثنان؛ ثلاثة", ["واحد،", "اثنان؛", "ثلاثة"]),
    ],
)
def test_clause_marks(text: str, expected: list[str]) -> None:
    assert units("clause", text) == expected


# REF:65 (SPL:45–46,140–143): a run of marks and closers stays with its unit.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Wait... Go", ["Wait...", "Go"]),
        ('He said "Hello." Then left', ['He said "Hello."', "Then left"]),
        ("(Really?!) Yes", ["(Really?!)", "Yes"]),
        ("「好。」走", ["「好。」", "走"]),
        ("It’s ‘done.’ Next", ["It’s ‘done.’", "Next"]),
        ("Fine.» Then", ["Fine.»", "Then"]),
    ],
)
def test_a_run_of_marks_and_closers_stays_with_its_unit(text: str, expected: list[str]) -> None:
    assert units("sentence", text) == expected


# REF:65 (SPL:145–147): a run that ends the buffer waits for more text, CJK included.
def test_a_mark_at_the_end_of_the_buffer_waits() -> None:
    assert run("sentence", "Hello.", " World") == ([[], ["Hello."]], ["World"])
    assert run("sentence", "Wait.", "..", " Go") == ([[], [], ["Wait..."]], ["Go"])
    assert run("sentence", "Hi!", '"', " Bye") == ([[], [], ['Hi!"']], ["Bye"])
    assert run("sentence", "你好。世界！") == ([["你好。"]], ["世界！"])  # REF:68 (run)


# REF:65 (SPL:149–152): ASCII marks cut only before whitespace, other scripts' always.
def test_ascii_marks_cut_only_before_whitespace() -> None:
    assert run("sentence", "OK.", "Next") == ([[], []], ["OK.Next"])  # REF:68 (run)
    assert units("sentence", "v1.2.3 is out. Yes") == ["v1.2.3 is out.", "Yes"]
    assert units("sentence", "Go!Now") == ["Go!Now"]
    assert units("sentence", "Hello.\nNext") == ["Hello.", "Next"]
    assert units("sentence", "好。Next") == ["好。", "Next"]
    assert units("clause", "a,b, c") == ["a,b,", "c"]


# REF:66 (SPL:86–92): `.` and `,` between digits do not cut.
@pytest.mark.parametrize("text", ["Pi is 3.14 today", "It costs 1,000 dollars", "Version 2.0.1 ships"])
def test_numbers_do_not_cut(text: str) -> None:
    assert units("clause", text) == [text]


def test_a_number_split_across_pieces_still_does_not_cut() -> None:
    assert run("sentence", "Pi is 3.", "14 today. Yes") == ([[], ["Pi is 3.14 today."]], ["Yes"])
    # A digit before the mark but none after: a sentence end like any other.
    assert units("sentence", "Chapter 3. Next") == ["Chapter 3.", "Next"]


# REF:66 (SPL:50–113): single letters and the abbreviation list, in any case.
@pytest.mark.parametrize(
    "abbreviation",
    ["Dr", "Mr", "Mrs", "Ms", "Prof", "Sr", "Jr", "St", "Mt", "Fig", "No", "vs", "etc", "approx",
     "Dept", "Inc", "Ltd", "Co", "al", "e.g", "i.e", "U.S", "U.K", "a.m", "p.m", "DR", "E.G"],
)  # fmt: skip
def test_abbreviations_do_not_cut(abbreviation: str) -> None:
    text = f"See {abbreviation}. Smith now"
    assert units("sentence", text) == [text]


def test_initials_do_not_cut_but_longer_words_do() -> None:
    assert units("sentence", "J. R. R. Tolkien wrote it. Yes") == ["J. R. R. Tolkien wrote it.", "Yes"]
    assert units("sentence", "Meet Drs. Who") == ["Meet Drs.", "Who"]
    assert units("sentence", "Plan B. Then") == ["Plan B. Then"]  # a lone letter reads as an initial


# REF:67 (SPL:116–168): no minimum or maximum, no forced cut; flush emits the tail.
def test_no_length_limits_and_flush_emits_the_tail() -> None:
    assert units("sentence", "... Hi") == ["...", "Hi"]
    assert units("sentence", "...") == ["..."]
    long = "word " * 5000
    assert units("sentence", long) == [long.strip()]
    assert run("sentence", "One. Two") == ([["One."]], ["Two"])
    assert run("sentence", "   ") == ([[]], [])


# REF:62 (SPL:196–202): `none` buffers everything and emits one stripped unit at flush.
def test_none_buffers_until_flush() -> None:
    assert run("none", "One. ", "Two! ", " Three ") == ([[], [], []], ["One. Two!  Three"])
    assert run("none", "  ") == ([[]], [])
    assert run("none") == ([], [])


def test_the_splitter_is_reusable_after_a_flush() -> None:
    splitter = SentenceSplitter("sentence")
    assert splitter.feed("First. Sec") == ["First."]
    assert splitter.pending == "Sec"
    assert splitter.flush() == ["Sec"]
    assert splitter.pending == ""
    assert splitter.feed("Again.") == []
    assert splitter.feed(" ") == ["Again."]
    assert splitter.flush() == []


def test_unknown_granularity_is_refused() -> None:
    with pytest.raises(ValueError, match="Unsupported split_granularity: 'word'"):
        SentenceSplitter("word")  # type: ignore[arg-type]


def test_split_units_reports_where_to_rescan() -> None:
    # The waiting mark is re-examined on the next call; nothing before it is.
    assert split_units("One. Two.", frozenset("."), flush=False) == (["One."], "Two.", 3)
    assert split_units("abc", frozenset("."), flush=False) == ([], "abc", 3)


_PIECES = st.lists(
    st.text(alphabet=st.sampled_from(list("ab Dr.e,;!?。！？…，\"')」 1\n")), max_size=25), max_size=8
)


@given(_PIECES, st.sampled_from(["none", "sentence", "clause"]))
def test_units_partition_the_text(pieces: list[str], granularity: str) -> None:
    """However the text is cut into pieces, the units are stripped, never empty, and
    together hold every non-space character in order."""
    fed, flushed = run(granularity, *pieces)
    emitted = [unit for batch in fed for unit in batch] + flushed
    assert all(unit and unit == unit.strip() for unit in emitted)
    assert "".join("".join(emitted).split()) == "".join("".join(pieces).split())
