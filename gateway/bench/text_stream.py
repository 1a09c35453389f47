"""How a voice agent's LLM hands its reply to the speech session: a few characters at a time.

An LLM emits tokens at a steady rate (30 tokens/s by default, the rate LiveKit's own TTS
tests use); a token is about four characters of English. The reply is cut into pieces of
``chars_per_token`` characters, piece ``i`` sent ``i / tokens_per_second`` seconds after the
reply started. The first sentence's text is complete when the piece holding its last
character has been sent: time to first audio counts from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

DEFAULT_TOKENS_PER_SECOND = 30.0
CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class Piece:
    at_s: float  # after the reply started
    text: str


@dataclass(frozen=True, slots=True)
class Reply:
    sentences: tuple[str, ...]

    @property
    def text(self) -> str:
        return " ".join(self.sentences)


def schedule(text: str, tokens_per_second: float = DEFAULT_TOKENS_PER_SECOND,
             chars_per_token: int = CHARS_PER_TOKEN) -> list[Piece]:  # fmt: skip
    """The reply as an LLM would stream it."""
    if tokens_per_second <= 0 or chars_per_token <= 0:
        raise ValueError("tokens_per_second and chars_per_token must be positive")
    return [
        Piece(index / tokens_per_second, text[start : start + chars_per_token])
        for index, start in enumerate(range(0, len(text), chars_per_token))
    ]


def first_sentence_complete_s(reply: Reply, pieces: Sequence[Piece]) -> float:
    """When the piece holding the first sentence's last character was sent."""
    end = len(reply.sentences[0])  # characters up to and including its last one
    sent = 0
    for piece in pieces:
        sent += len(piece.text)
        if sent >= end:
            return piece.at_s
    raise ValueError("the pieces do not hold the first sentence")


# Voice-agent replies: a short opener (what a listener hears first), then longer sentences.
REPLIES: tuple[Reply, ...] = (
    Reply((
        "Sure, I can help with that.",
        "Your order left our warehouse this morning and is on its way to the address on file.",
        "It should arrive by Thursday afternoon, and you will get a text message when the driver is close.",
        "Is there anything else you would like to know about the delivery?",
    )),
    Reply((
        "Good question.",
        "The museum opens at nine in the morning on weekdays and at ten on weekends and public holidays.",
        "Tickets are cheaper online, and children under twelve get in for free with an adult.",
        "Would you like me to book two tickets for Saturday?",
    )),
    Reply((
        "Let me check.",
        "The next train to the airport leaves from platform four in about twelve minutes.",
        "The ride takes forty minutes, so you would arrive with plenty of time before your flight.",
        "Shall I send the timetable to your phone?",
    )),
)  # fmt: skip


def replies(count: int, offset: int = 0) -> list[Reply]:
    """``count`` replies, cycling through the set from ``offset``."""
    return [REPLIES[(offset + index) % len(REPLIES)] for index in range(count)]
