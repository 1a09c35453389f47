"""From what the session clients saw to one level's figures, in modelled seconds.

Per utterance: time to first audio (first audio byte minus the moment the first sentence's
text was complete) and, through a simulated real-time player, every silence it suffers,
told apart by where it ends:

- a *gap between sentences*: before a later sentence's first byte (the pipelining and the
  routing of later sentences decide it);
- a *stall*: before any chunk of a sentence after its first two (the fleet falling behind
  real time);
- the *first-frame hole*: before a sentence's second chunk. The worker streams one codec
  frame (40 ms of audio) first, then 25-frame (1 s) chunks, so a player that starts at the
  first byte hears 40 ms and then waits for the first full chunk: about 210 ms (modelled)
  on an idle worker, the worker's own endpoint included. It is the worker's chunk schedule,
  reported but not counted as a gap.

Gaps are the first two kinds. A sentence's silence is the sum of the gaps that end with its
chunks; the level has "no gap at p99" when the 99th percentile of sentence silences is
within the tolerance (a player's jitter buffer), and a level is *served* when also every
utterance succeeded and the first audio's p99 is within the bound.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from typing import Any

from gateway.bench.player import Player
from gateway.bench.stats import Summary
from gateway.bench.voice_client import Utterance

DEFAULT_GAP_TOLERANCE_S = 0.020  # one audio-device buffer: jitter no listener hears
FIRST_AUDIO_P99_BOUND_S = 1.0  # the capacity target's bound


def _summary(values: Sequence[float]) -> dict[str, Any]:
    return dataclasses.asdict(Summary.of(values))


def summarize_level(sessions: int, utterances: Sequence[Utterance], failures: int, time_scale: float,
                    wall_s: float, tolerance_s: float = DEFAULT_GAP_TOLERANCE_S,
                    loadavg: float | None = None) -> dict[str, Any]:  # fmt: skip
    """One sweep level's phase document."""
    first_audio: list[float] = []
    gaps: list[float] = []
    holes: list[float] = []
    silences: list[float] = []
    audio_s = 0.0
    errors = failures
    pools: Counter[str] = Counter()
    for utterance in utterances:
        errors += len(utterance.errors)
        pools.update(utterance.pools)
        if not utterance.chunks:
            continue
        first_audio.append((utterance.chunks[0][0] - utterance.first_sentence_complete) / time_scale)
        player = Player()
        per_sentence: dict[int, float] = {}
        chunks_seen: Counter[int] = Counter()
        for at, size, sentence in utterance.chunks:
            silence = player.add(at / time_scale, size)
            ordinal = chunks_seen[sentence]
            chunks_seen[sentence] += 1
            if ordinal == 1:  # the worker's first-frame hole, not a gap
                if silence > 0:
                    holes.append(silence)
                silence = 0.0
            elif silence > 0:
                gaps.append(silence)
            per_sentence[sentence] = per_sentence.get(sentence, 0.0) + silence
        silences += list(per_sentence.values())
        audio_s += player.audio_s
    silence = _summary(silences)
    ttfa = _summary(first_audio)
    heard = sorted(gaps, reverse=True)
    return {
        "sessions": sessions,
        "utterances": len(utterances),
        "utterances_with_audio": len(first_audio),
        "errors": errors,
        "pools": dict(pools),
        "first_audio_s": ttfa,
        "sentence_silence_s": silence,
        "gaps_over_tolerance": sum(gap > tolerance_s for gap in gaps),
        "gaps_s": [round(gap, 5) for gap in heard],  # every gap, largest first
        "largest_gap_s": heard[0] if heard else 0.0,
        "first_frame_hole_s": _summary(holes),
        "audio_s": audio_s,
        "wall_s": wall_s,
        "loadavg_1m": loadavg,
        "served": served(errors, len(first_audio), len(utterances), silence["p99"], ttfa["p99"], tolerance_s),
    }


def served(errors: int, with_audio: int, utterances: int, silence_p99: float | None, first_audio_p99: float | None,
           tolerance_s: float) -> bool:  # fmt: skip
    return (
        errors == 0
        and utterances > 0
        and with_audio == utterances
        and silence_p99 is not None
        and silence_p99 <= tolerance_s
        and first_audio_p99 is not None
        and first_audio_p99 <= FIRST_AUDIO_P99_BOUND_S
    )


def capacity(phases: Sequence[dict[str, Any]]) -> int:
    """The most sessions served with no gap at p99 (0 if no level was)."""
    return max((phase["sessions"] for phase in phases if phase["served"]), default=0)
