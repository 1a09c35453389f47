"""The LLM-paced text schedule: pieces of ~4 characters at the token rate, in order."""

from __future__ import annotations

import pytest

from gateway.bench.voice_client import REPLIES, Reply, first_sentence_complete_s, replies, schedule


def test_pieces_are_four_characters_at_the_token_rate_and_rebuild_the_text() -> None:
    pieces = schedule("Hello there. How are you?", tokens_per_second=10)
    assert [p.text for p in pieces] == ["Hell", "o th", "ere.", " How", " are", " you", "?"]
    assert [p.at_s for p in pieces] == pytest.approx([0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6])
    assert "".join(p.text for p in pieces) == "Hello there. How are you?"


def test_the_default_rate_is_thirty_tokens_a_second() -> None:
    pieces = schedule("x" * 400)
    assert len(pieces) == 100
    assert pieces[-1].at_s == pytest.approx(99 / 30)


def test_the_first_sentence_is_complete_when_its_last_character_was_sent() -> None:
    reply = Reply(("Hello there.", "How are you?"))  # "Hello there." ends in piece 2 (chars 8-11)
    pieces = schedule(reply.text, tokens_per_second=10)
    assert first_sentence_complete_s(reply, pieces) == pytest.approx(0.2)
    # A sentence ending mid-piece is complete with that piece.
    reply = Reply(("Hi.", "Then more."))
    assert first_sentence_complete_s(reply, schedule(reply.text, tokens_per_second=10)) == 0.0


def test_a_schedule_too_short_for_the_first_sentence_is_refused() -> None:
    reply = Reply(("Hello there.", "More."))
    with pytest.raises(ValueError):
        first_sentence_complete_s(reply, schedule("Hello", tokens_per_second=10))
    with pytest.raises(ValueError):
        schedule("text", tokens_per_second=0)


def test_replies_cycle_and_every_one_has_several_sentences() -> None:
    assert replies(4, offset=1) == [REPLIES[1], REPLIES[2], REPLIES[0], REPLIES[1]]
    assert all(len(reply.sentences) >= 3 for reply in REPLIES)
    # Each sentence ends with a mark the splitter cuts at, so the session sees them as sentences.
    from gateway.worker.sentences import SentenceSplitter

    for reply in REPLIES:
        splitter = SentenceSplitter("sentence")
        assert [*splitter.feed(reply.text), *splitter.flush()] == list(reply.sentences)
