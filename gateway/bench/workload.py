"""What the benchmark sends and when: its own English texts and open-loop arrival traces.

The texts are 40 passages written for this project. Lengths are deliberately spread (a few
words up to a long paragraph) because a TTS request's cost follows its audio length, about
15 characters per second of speech: short prompts stress time to first packet, long ones
stress sustained decode throughput. The set is fixed so that runs of different
configurations see the same work.

Traces say when each request is sent and with which SLA class. They are generated up front
from a seed, so two configurations benchmarked with the same arguments receive exactly the
same requests at exactly the same offsets.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from gateway.types import SlaClass

TEXTS: tuple[str, ...] = (
    # Short: voice-assistant replies, under about five seconds of audio.
    "Sure, I can help with that.",
    "Your table for two is booked at seven.",
    "The package left the warehouse this morning.",
    "Turn left at the next intersection.",
    "It is currently twelve degrees and cloudy.",
    "Your meeting starts in ten minutes.",
    "I did not catch that. Could you say it again?",
    "The train to Lisbon departs from platform four.",
    "Battery is at fifteen percent.",
    "Thanks for calling. Please hold for a moment.",
    # Medium: a few sentences, ten to twenty seconds of audio.
    "Good morning. Here is your summary for today: three meetings, one dentist "
    "appointment at noon, and a reminder to call your sister before the weekend.",
    "The library will close early on Friday for maintenance. Books that are due "
    "that day can be returned through the drop box by the main entrance.",
    "To reset your password, open the settings page, choose security, and follow the "
    "link we send to the email address on your account.",
    "Our flight is cruising at thirty-six thousand feet. We expect a smooth ride and "
    "an on-time arrival, so sit back and enjoy the rest of the journey.",
    "Preheat the oven to two hundred degrees. While it warms, slice the potatoes "
    "thinly and toss them with olive oil, salt and a little rosemary.",
    "The quarterly numbers came in slightly above forecast, driven mostly by strong "
    "demand in the northern region and a quieter than usual returns season.",
    "A light rain will move in after lunch and clear by the evening, leaving a cool "
    "and breezy night with temperatures dropping close to freezing.",
    "Please remember to bring a photo ID and your confirmation number. Check-in opens "
    "ninety minutes before departure and closes forty minutes before.",
    "This episode is about the history of maps: how sailors, surveyors and satellites "
    "each changed what we mean when we say we know where something is.",
    "If the light on the router keeps blinking orange, unplug it for thirty seconds, "
    "plug it back in, and wait until the light turns a steady green.",
    "The museum's new wing opens next month with an exhibition of glass from "
    "twelve centuries, from Roman bottles to contemporary sculpture.",
    "Chapter three. The fog had not lifted by noon, and the harbour bells rang on "
    "and on, as if the town itself were trying to remember something.",
    "Your order has been split into two deliveries. The first arrives tomorrow; the "
    "second, which contains the lamp, should follow early next week.",
    "Step two: hold the top panel with one hand and slide the tray out slowly, "
    "keeping it level so the paper stays aligned.",
    # Long: narration and articles, thirty seconds to more than a minute of audio.
    "Every spring the river floods the low fields east of the village. For centuries "
    "the farmers fought it with walls and ditches, and every few years the water won. "
    "Then a new generation tried something different: they let the fields flood, "
    "planted crops that liked wet feet, and built their barns on the higher ground. "
    "The harvests are smaller now, but they come every year.",
    "Welcome to the beginner's guide to sourdough. You will need flour, water, salt "
    "and patience. The starter is a living culture of wild yeast and bacteria, and it "
    "needs to be fed regularly. Keep it somewhere warm, feed it twice a day, and after "
    "about a week it should double in size within a few hours of each feeding. That "
    "is the sign that it is ready to raise a loaf.",
    "Good evening, and welcome to the news at nine. Tonight: the city council has "
    "approved a plan to extend the tram line to the eastern suburbs, with "
    "construction expected to begin next spring. Residents have welcomed the news, "
    "although some shop owners along the route worry about two years of roadworks. "
    "We will hear from both sides after the break.",
    "Lighthouses were once kept by families who lived beside the lamp all year round. "
    "They trimmed wicks, polished lenses, wound the clockwork that turned the light, "
    "and wrote the weather in a logbook every four hours. Most lights are automatic "
    "now, but the logbooks survive, and they are a remarkable record of storms, "
    "shipwrecks and long quiet winters.",
    "Before you begin the assembly, lay out every part on a clean surface and check "
    "it against the list on page two. You should have four long panels, two short "
    "panels, one back board, a bag of wooden dowels and a bag of metal screws. If "
    "anything is missing or damaged, stop here and contact customer service; do not "
    "substitute screws from another kit, because they may split the wood.",
    "The old station clock had stopped at twenty past four, and nobody could remember "
    "when. Travellers set their watches by it anyway, out of habit, and were late for "
    "their trains. Eventually the stationmaster climbed a ladder with a tin of oil and "
    "a small brass key, and for the first time in years the long hand moved. A few "
    "people on the platform applauded.",
    "Photosynthesis is the process by which plants, algae and some bacteria turn light "
    "into chemical energy. Inside the leaf, chlorophyll absorbs mostly red and blue "
    "light, which is why leaves look green to us. That energy splits water molecules, "
    "releasing oxygen, and drives the reactions that build sugars from carbon dioxide. "
    "Almost every food chain on Earth starts here.",
    "Thank you all for coming tonight. When we started this project five years ago we "
    "had one borrowed room, three volunteers and a donated printer that jammed every "
    "other page. Today we run reading clubs in eleven schools. None of that happened "
    "because of a plan; it happened because people like you kept showing up, week "
    "after week, and I want to say thank you properly.",
    "A short guide to the night sky in autumn. Look east after sunset for a bright, "
    "steady point of light: that is a planet, not a star, and binoculars will show you "
    "its largest moons as tiny dots in a line. Higher up, the great square of four "
    "stars marks a constellation that is easy to find once you know it, and from "
    "there you can hop to the nearest large galaxy, a faint smudge visible on dark "
    "nights without any telescope at all.",
    "The meeting opened with a review of last quarter's goals. Two were met, one was "
    "partly met, and one was postponed because the supplier changed its delivery "
    "schedule. The team agreed to move the postponed goal into the new plan, with a "
    "smaller first milestone and a named owner, and to check progress every two weeks "
    "rather than once a month. The next item on the agenda was the budget.",
    "In the mountains, the weather can change faster than you can walk. A clear "
    "morning can turn to cloud and hail by early afternoon, so start early, carry a "
    "warm layer and a waterproof even when the forecast is good, and agree on a "
    "turnaround time before you set out. If you reach that time and the summit is "
    "still far away, turn around. The mountain will still be there next year.",
    # Very long: a minute of audio or more, the heavy tail of a real workload.
    "Once upon a time, in a town built on the side of a hill, there lived a baker "
    "who woke every morning at three. She lit the oven, kneaded the dough, and while "
    "it rose she sat by the window and watched the street lamps go out one by one. "
    "By six the first loaves were cooling on the racks, and the smell drifted down "
    "the hill to the harbour, where the fishermen were coming in. They would climb "
    "the steep lanes with their baskets and trade fish for bread, and for years "
    "nobody in the town used money for either. When a bank finally opened on the "
    "square, the baker kept a jar of coins by the till, but most mornings it stayed "
    "empty, and the fish kept coming.",
    "Let us talk about how a modern speech engine streams audio. The text is first "
    "turned into tokens, and a language model predicts a sequence of audio codes, a "
    "few dozen every second of speech. A second model, the codec decoder, turns those "
    "codes back into a waveform. Because the codes arrive one frame at a time, the "
    "server does not need to wait for the whole sentence: it can decode the first "
    "frame, send a fraction of a second of sound, and then continue in larger chunks. "
    "What the listener notices is the delay before the first sound, and whether the "
    "audio ever stops while the player waits for more. Everything else is hidden.",
    "The committee's report makes four recommendations. First, that the city "
    "publish its air quality readings every hour instead of once a day, so that "
    "people with asthma can plan their outdoor activities. Second, that the two "
    "busiest school streets close to traffic at drop-off and pick-up times. Third, "
    "that the bus fleet finish its move to electric vehicles three years earlier "
    "than planned, paid for by the savings in fuel. And fourth, that a small team "
    "review progress each year and report to the council in public, so that the "
    "recommendations do not quietly fade away.",
    "Dear listener, this is the final chapter. The ship reached the island at dawn, "
    "after eleven days of fog, and the crew stood at the rail in silence as the "
    "cliffs came out of the grey. Nobody had believed the old captain's chart, with "
    "its careful pencil lines and its note in the margin that said only: here, the "
    "birds. But there they were, thousands of them, wheeling over the rocks, and "
    "below them a narrow beach where a boat could land. The captain did not say "
    "anything. He folded the chart, put it in his coat, and went below to sleep for "
    "the first time since they had left the harbour.",
    "Here is the full safety briefing. Please listen carefully even if you travel "
    "often. Your seat belt fastens by inserting the metal tip into the buckle and "
    "pulling the strap tight; to release it, lift the top of the buckle. In the "
    "unlikely event of a loss of cabin pressure, masks will drop from the panel above "
    "you. Pull the mask towards you, place it over your nose and mouth, and breathe "
    "normally; secure your own mask before helping others. Emergency exits are at the "
    "front, in the middle and at the rear of the cabin, and lights in the floor will "
    "guide you to them. Your life vest is under your seat.",
    "The history of the bicycle is a history of small improvements. The earliest "
    "machines had no pedals at all: riders pushed themselves along with their feet. "
    "Pedals attached to the front wheel came next, and to go faster the front wheel "
    "grew enormous, which made falls spectacular and frequent. The safety bicycle, "
    "with two wheels of equal size and a chain driving the rear one, fixed that, and "
    "air-filled tyres made the ride bearable on cobbles. Gears, lighter frames and "
    "better brakes followed over the next century, but a rider from eighteen ninety "
    "would recognise a modern bicycle at once and could probably ride it home.",
)
# Clips of a few words: about 2-3 s of audio in three chunks (the overhead benchmark's
# per-request cost, first audio's c1 rounds).
SHORT_TEXTS = tuple(text for text in TEXTS if len(text) <= 50)


def text_order(count: int, seed: int, texts: Sequence[str] = TEXTS) -> list[str]:
    """``count`` texts drawn round-robin through seeded shuffles of the set.

    Every configuration benchmarked with the same seed gets the same sequence, so a
    comparison is never skewed by one run drawing more long passages than another.
    """
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < count:
        batch = list(texts)
        rng.shuffle(batch)
        order.extend(batch)
    return order[:count]


# ---- arrival traces -------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Arrival:
    at_s: float  # offset from the start of the trace
    sla_class: SlaClass | None  # None = send no x-sla-class header
    voice: int | None = None  # voice clone traces: which of the trace's voices (an index)


def voice_clone(
    rate: float, duration_s: float, seed: int, voices: int, sla_class: SlaClass | None = SlaClass.LATENCY
) -> list[Arrival]:
    """Poisson arrivals, each cloning one of ``voices`` uploaded voices picked uniformly at
    random (each voice's requests spread over the whole trace, as a voice's users would)."""
    if voices <= 0:
        raise ValueError("voices must be positive")
    rng = random.Random(seed + 7)
    return [Arrival(a.at_s, sla_class, rng.randrange(voices)) for a in poisson(rate, duration_s, seed)]


def poisson(rate: float, duration_s: float, seed: int, sla_class: SlaClass | None = None) -> list[Arrival]:
    """Poisson arrivals (exponential gaps) at ``rate`` per second for ``duration_s``."""
    if rate <= 0 or duration_s <= 0:
        raise ValueError("rate and duration must be positive")
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    at = rng.expovariate(rate)
    while at < duration_s:
        arrivals.append(Arrival(at, sla_class))
        at += rng.expovariate(rate)
    return arrivals


def bursty(
    duration_s: float,
    seed: int,
    latency_rate: float,
    burst_rate: float,
    on_s: float,
    off_s: float,
) -> list[Arrival]:
    """Interactive traffic with batch bursts on top, merged in time order.

    ``latency`` requests arrive as a steady Poisson stream (people talking to an
    assistant); ``throughput`` requests arrive only during on-periods of an on/off cycle,
    at ``burst_rate`` (a batch job narrating documents), starting with an off-period so
    the first burst lands on an already busy fleet. The mix is what the adaptive policy
    exists for: bursts must not ruin the interactive requests' time to first packet.
    """
    if duration_s <= 0 or on_s <= 0 or off_s < 0 or latency_rate < 0 or burst_rate < 0:
        raise ValueError("durations and rates must be positive")
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    if latency_rate > 0:
        at = rng.expovariate(latency_rate)
        while at < duration_s:
            arrivals.append(Arrival(at, SlaClass.LATENCY))
            at += rng.expovariate(latency_rate)
    if burst_rate > 0:
        period_start = off_s
        while period_start < duration_s:
            period_end = min(period_start + on_s, duration_s)
            at = period_start + rng.expovariate(burst_rate)
            while at < period_end:
                arrivals.append(Arrival(at, SlaClass.THROUGHPUT))
                at += rng.expovariate(burst_rate)
            period_start += on_s + off_s
    arrivals.sort(key=lambda arrival: arrival.at_s)
    return arrivals


# Default class mix of the ramp: some interactive, mostly ordinary, some batch work.
RAMP_MIX: tuple[tuple[SlaClass, float], ...] = (
    (SlaClass.LATENCY, 0.2), (SlaClass.BALANCED, 0.5), (SlaClass.THROUGHPUT, 0.3),
)  # fmt: skip


def ramp(
    duration_s: float,
    seed: int,
    start_rate: float,
    peak_rate: float,
    mix: tuple[tuple[SlaClass, float], ...] = RAMP_MIX,
) -> list[Arrival]:
    """Load that rises linearly from ``start_rate`` to ``peak_rate`` and back, mixed classes.

    The first half climbs from about one request at a time to past what the fleet can
    serve, the second half comes back down: a policy must follow the load both ways
    without oscillating. Poisson arrivals with a time-varying rate (thinning).
    """
    if duration_s <= 0 or start_rate < 0 or peak_rate <= 0 or peak_rate < start_rate:
        raise ValueError("duration and peak rate must be positive, start rate <= peak rate")
    total = sum(weight for _, weight in mix)
    if total <= 0:
        raise ValueError("the class mix needs a positive weight")
    rng = random.Random(seed)
    half = duration_s / 2

    def rate_at(t: float) -> float:
        climb = t / half if t <= half else (duration_s - t) / half
        return start_rate + (peak_rate - start_rate) * climb

    arrivals: list[Arrival] = []
    at = 0.0
    while True:
        at += rng.expovariate(peak_rate)
        if at >= duration_s:
            break
        if rng.random() * peak_rate <= rate_at(at):
            pick = rng.random() * total
            for sla_class, weight in mix:
                pick -= weight
                if pick <= 0:
                    break
            arrivals.append(Arrival(at, sla_class))
    return arrivals
