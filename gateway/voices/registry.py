"""One voice registry for the whole fleet: durable store first, then every worker.

vllm-omni keeps uploaded voices on one worker's own disk (its ``SPEAKER_SAMPLES_DIR``),
so a voice uploaded through one worker is unknown to the others. A restarted worker
restores whatever its directory holds, which may be stale (a voice deleted or replaced
while it was down), and a replaced one starts empty. The gateway's store is therefore the
truth and workers are caches of it:

* ``add``/``delete`` change the store, then fan out to every current worker at once. A
  worker that is down is recorded, never a reason to fail the user's request: it gets
  the voice (or loses it) on replay.
* ``replay(base_url)`` makes one worker's voices equal to the store. The fleet calls it
  whenever a worker becomes ready (first start, restart, recovery) before routing to it.
  It never assumes the worker empty: it lists the worker's voices first, keeps those it
  restored that match the store, replaces stale ones and prunes deleted ones.

Uploads to a worker that is streaming are paced (``pacing.UploadPacer``): one at a time,
``voices.upload_spacing_ms`` apart, so ten voices uploaded at once do not pause its streams
ten clips long.

Voices are known to workers, and locked, by their worker name (``gateway.voices.owners``:
each owner has its own namespace, workers have one). Names are locked per voice
(exclusive for add/delete, shared for replay), and a replay
repeats its pass while adds/deletes happened during it, so a voice added while a worker
is being replayed (and not yet in ``workers()``) is not missed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol
from urllib.parse import quote

import httpx

from gateway.voices.errors import VoiceError
from gateway.voices.locks import NameLocks
from gateway.voices.names import name_key
from gateway.voices.owners import ADMIN, worker_name
from gateway.voices.pacing import UploadPacer
from gateway.voices.store import Voice, VoiceStore

log = logging.getLogger(__name__)

VOICES_PATH = "/v1/audio/voices"
MAX_REPLAY_PASSES = 5


class WorkerRef(Protocol):
    """Anything that names a worker: the pools' worker objects qualify as they are."""

    @property
    def worker_id(self) -> str: ...

    @property
    def base_url(self) -> str: ...


@dataclass(frozen=True, slots=True)
class WorkerAddress:
    worker_id: str
    base_url: str


class Outcome(StrEnum):
    UPLOADED = "uploaded"
    PRESENT = "present"  # the worker already had this exact voice
    REPLACED = "replaced"  # the worker had a different voice by this name: swapped
    DELETED = "deleted"
    ABSENT = "absent"  # delete: the worker did not have it (fine)
    FAILED = "failed"  # the worker will be brought in step by its next replay


@dataclass(frozen=True, slots=True)
class WorkerResult:
    worker_id: str
    outcome: Outcome
    detail: str | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is not Outcome.FAILED


@dataclass(frozen=True, slots=True)
class FanOutResult:
    """A store change and what each worker made of it."""

    voice: Voice
    workers: tuple[WorkerResult, ...]

    def summary(self) -> dict[str, str]:
        """Worker id -> outcome: for the admin API (worker ids are not the clients' business)."""
        return {r.worker_id: r.outcome.value for r in self.workers}

    def counts(self) -> dict[str, int]:
        """Outcome -> how many workers: what a client is told."""
        counts: dict[str, int] = {}
        for r in self.workers:
            counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
        return counts


@dataclass(slots=True)
class ReplayReport:
    base_url: str
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # voice name -> what happened
    failed: dict[str, str] = field(default_factory=dict)  # voice name -> why
    error: str | None = None  # the worker's voice list could not be read: nothing done
    passes: int = 0

    @property
    def ok(self) -> bool:
        return self.error is None and not self.failed

    def names(self, outcome: Outcome) -> list[str]:
        return sorted(n for n, o in self.outcomes.items() if o is outcome)

    def record(self, name: str, outcome: Outcome, detail: str | None = None) -> None:
        # A later pass seeing "present" must not hide that an earlier pass uploaded it.
        if self.outcomes.get(name) in (Outcome.UPLOADED, Outcome.REPLACED, Outcome.DELETED) and outcome in (
            Outcome.PRESENT,
            Outcome.ABSENT,
        ):
            return
        self.outcomes[name] = outcome
        if outcome is Outcome.FAILED:
            self.failed[name] = detail or "failed"
        else:
            self.failed.pop(name, None)


class WorkerProtocolError(Exception):
    """A worker answered something that is not the vllm-omni voices API."""


def _describe(response: httpx.Response) -> str:
    return f"HTTP {response.status_code}: {response.text[:200]}"


def _same_voice(entry: dict[str, Any], voice: Voice) -> bool:
    """Does a worker's listing entry hold this voice (not an older one by the same name)?"""
    size = entry.get("file_size")
    if isinstance(size, int) and size != voice.file_size:
        return False
    if "ref_text" in entry and (entry.get("ref_text") or None) != voice.ref_text:
        return False
    return True


class VoiceRegistry:
    def __init__(
        self,
        store: VoiceStore,
        client: httpx.AsyncClient,
        workers: Callable[[], Sequence[WorkerRef]],
        *,
        timeout_s: float | None = None,
        prune: bool | None = None,
        replay_concurrency: int = 4,
        streams: Callable[[str], int] = lambda base_url: 0,
    ) -> None:
        self.store = store
        self._client = client
        self._workers = workers
        self._timeout = httpx.Timeout(timeout_s if timeout_s is not None else store.config.worker_timeout_s)
        self._prune = store.config.replay_prune if prune is None else prune
        self._replay_concurrency = replay_concurrency
        self._pacer = UploadPacer(streams, store.config.upload_spacing_ms / 1000.0)
        self._locks = NameLocks()
        # Bumped by every add/delete; a replay repeats while it moved (see module docstring).
        self._generation = 0
        # Workers a fan-out may have missed while they stayed up (timeout, 5xx, the user's
        # request cancelled mid-way): reconcile() replays them; a restart replays them anyway.
        self._out_of_step: set[str] = set()
        self._fanning_out = 0  # add/delete fan-outs under way

    # ---- user operations -----------------------------------------------------------

    async def add(
        self,
        name: str,
        audio: bytes,
        *,
        consent: object,
        ref_text: object = None,
        speaker_description: object = None,
        owner: str = ADMIN,
        owner_limit: int | None = None,
    ) -> FanOutResult:
        """Register ``owner``'s voice durably, then upload it to every current worker.

        Raises ``VoiceError`` only for the user's mistakes (bad name, not audio, no consent,
        duplicate, over the owner's ``owner_limit``); worker failures are reported in the result.
        """
        async with self._locks.exclusive(worker_name(owner, name) if isinstance(name, str) else ""):
            voice = await asyncio.to_thread(
                self.store.add,
                name,
                audio,
                consent=consent,
                ref_text=ref_text,
                speaker_description=speaker_description,
                owner=owner,
                owner_limit=owner_limit,
            )
            # Workers get the stored clip (normalised to WAV), not the bytes the client sent.
            audio = await asyncio.to_thread(self.store.read_audio, voice)
            # No await between the bump and reading workers(): see replay's generation check.
            self._generation += 1
            targets = list(self._workers())
            jobs = [self._push(w.worker_id, w.base_url, voice, audio) for w in targets]
            results = await self._fan_out(targets, jobs)
        self._log_failures("upload", voice, results)
        return FanOutResult(voice, tuple(results))

    async def delete(self, name: str, owner: str = ADMIN) -> FanOutResult:
        """Remove ``owner``'s voice ``name`` from the store, then from every current worker
        (404 there is fine). Another owner's voice of that name is never touched: 404."""
        stored_as = worker_name(owner, name)
        async with self._locks.exclusive(stored_as):
            voice = await asyncio.to_thread(self.store.delete, stored_as)
            if voice is None:
                raise VoiceError(
                    f"No voice named {name!r} is registered.", status=404, code="voice_not_found"
                )
            self._generation += 1
            targets = list(self._workers())
            jobs = [self._remove(w.worker_id, w.base_url, voice.worker_name) for w in targets]
            results = await self._fan_out(targets, jobs)
        self._log_failures("delete", voice, results)
        return FanOutResult(voice, tuple(results))

    # ---- replay ----------------------------------------------------------------------

    async def replay(self, base_url: str) -> ReplayReport:
        """Make one worker's uploaded voices equal to the store. Idempotent."""
        report = ReplayReport(base_url)
        semaphore = asyncio.Semaphore(self._replay_concurrency)
        for attempt in range(1, MAX_REPLAY_PASSES + 1):
            report.passes = attempt
            generation = self._generation
            try:
                listing = await self._list(base_url)
            except (httpx.HTTPError, WorkerProtocolError) as exc:
                report.error = f"cannot list the worker's voices: {type(exc).__name__}: {exc}"
                break
            wanted = {name_key(v.worker_name): v for v in self.store.list()}
            jobs = [
                self._replay_voice(base_url, v, listing.get(k), report, semaphore) for k, v in wanted.items()
            ]
            if self._prune:
                jobs += [
                    self._prune_voice(base_url, entry["name"], report, semaphore)
                    for key, entry in listing.items()
                    if key not in wanted
                ]
            await asyncio.gather(*jobs)
            if self._generation == generation:
                break
        if report.ok:
            self._out_of_step.discard(base_url)
        else:
            log.warning("voice replay to %s incomplete: %s", base_url, report.error or report.failed)
        return report

    async def missing_on(self, base_url: str) -> bool:
        """Whether a registered voice is absent from the worker's list: it restarted (or
        missed a fan-out). The restart detector's fallback for workers without a process
        start time; raises ``httpx.HTTPError`` / ``ValueError`` when the list is unreadable."""
        generation = self._generation
        try:
            listing = await self._list(base_url)
        except WorkerProtocolError as exc:
            raise ValueError(str(exc)) from exc
        if self._fanning_out or generation != self._generation:
            return False  # a voice on its way to the workers is not a lost one
        return any(name_key(v.worker_name) not in listing for v in self.store.list())

    @property
    def out_of_step(self) -> frozenset[str]:
        """Base URLs of workers whose last voice fan-out failed or never finished."""
        return frozenset(self._out_of_step)

    def replay_all_later(self) -> None:
        """The store changed under us (another gateway replica): let the next
        ``reconcile`` bring every current worker in step."""
        self._out_of_step.update(w.base_url for w in self._workers())

    async def reconcile(self) -> list[ReplayReport]:
        """Replay every current worker that missed a fan-out; call it periodically."""
        current = {w.base_url for w in self._workers()}
        self._out_of_step &= current  # gone workers are replayed when they come back anyway
        return list(await asyncio.gather(*(self.replay(url) for url in sorted(self._out_of_step))))

    async def _fan_out(
        self, targets: Sequence[WorkerRef], jobs: list[Coroutine[Any, Any, WorkerResult]]
    ) -> list[WorkerResult]:
        # Only a successful replay puts a worker back in step: a later success for another
        # voice says nothing about the one it missed.
        self._fanning_out += 1
        try:
            results = await asyncio.gather(*jobs)
        except BaseException:  # cancelled mid-way (the client left): state unknown everywhere
            self._out_of_step.update(w.base_url for w in targets)
            raise
        finally:
            self._fanning_out -= 1
        self._out_of_step.update(w.base_url for w, r in zip(targets, results, strict=True) if not r.ok)
        return list(results)

    async def _replay_voice(
        self,
        base_url: str,
        voice: Voice,
        entry: dict[str, Any] | None,
        report: ReplayReport,
        semaphore: asyncio.Semaphore,
    ) -> None:
        async with semaphore, self._locks.shared(voice.worker_name):
            if self.store.get(voice.worker_name) != voice:
                return  # deleted or replaced since the pass began; the next pass sees it
            if entry is not None and _same_voice(entry, voice):
                report.record(voice.worker_name, Outcome.PRESENT)
                return
            try:
                audio = await asyncio.to_thread(self.store.read_audio, voice)
            except VoiceError:
                return
            result = await self._push("", base_url, voice, audio, stale_name=entry["name"] if entry else None)
            report.record(voice.worker_name, result.outcome, result.detail)

    async def _prune_voice(
        self, base_url: str, name: str, report: ReplayReport, semaphore: asyncio.Semaphore
    ) -> None:
        async with semaphore, self._locks.shared(name):
            if self.store.get(name) is not None:
                return  # registered while this pass ran: keep it
            result = await self._remove("", base_url, name)
            report.record(name, result.outcome, result.detail)

    # ---- one worker ------------------------------------------------------------------

    async def _push(
        self, worker_id: str, base_url: str, voice: Voice, audio: bytes, stale_name: str | None = None
    ) -> WorkerResult:
        """Make ``voice`` present on one worker, replacing a different voice of that name."""
        try:
            replaced = False
            if stale_name is not None:
                await self._delete(base_url, stale_name)
                replaced = True
            response = await self._post(base_url, voice, audio)
            if response.is_success:
                return WorkerResult(worker_id, Outcome.REPLACED if replaced else Outcome.UPLOADED)
            if response.status_code not in (400, 409, 422):
                return WorkerResult(worker_id, Outcome.FAILED, _describe(response))
            # Refused: most likely it already has this name (a replay got there first, or
            # a copy left from before a delete it missed). Look before deciding.
            entry = (await self._list(base_url)).get(name_key(voice.worker_name))
            if entry is None:
                return WorkerResult(worker_id, Outcome.FAILED, _describe(response))
            if _same_voice(entry, voice):
                return WorkerResult(worker_id, Outcome.PRESENT)
            await self._delete(base_url, entry["name"])
            response = await self._post(base_url, voice, audio)
            if response.is_success:
                return WorkerResult(worker_id, Outcome.REPLACED)
            return WorkerResult(worker_id, Outcome.FAILED, _describe(response))
        except (httpx.HTTPError, WorkerProtocolError) as exc:
            return WorkerResult(worker_id, Outcome.FAILED, f"{type(exc).__name__}: {exc}")

    async def _remove(self, worker_id: str, base_url: str, name: str) -> WorkerResult:
        try:
            response = await self._delete(base_url, name)
        except httpx.HTTPError as exc:
            return WorkerResult(worker_id, Outcome.FAILED, f"{type(exc).__name__}: {exc}")
        if response.status_code == 404:
            return WorkerResult(worker_id, Outcome.ABSENT)
        if response.is_success:
            return WorkerResult(worker_id, Outcome.DELETED)
        return WorkerResult(worker_id, Outcome.FAILED, _describe(response))

    async def _post(self, base_url: str, voice: Voice, audio: bytes) -> httpx.Response:
        form = {"name": voice.worker_name, "consent": voice.consent}
        if voice.ref_text is not None:
            form["ref_text"] = voice.ref_text
        if voice.speaker_description is not None:
            form["speaker_description"] = voice.speaker_description
        # The worker takes the MIME type from the part's content type: send the sniffed one.
        files = {"audio_sample": (f"{voice.worker_name}.{voice.ext}", audio, voice.mime_type)}
        async with self._pacer.turn(base_url):
            return await self._client.post(_url(base_url), data=form, files=files, timeout=self._timeout)

    async def _delete(self, base_url: str, name: str) -> httpx.Response:
        return await self._client.delete(f"{_url(base_url)}/{quote(name, safe='')}", timeout=self._timeout)

    async def _list(self, base_url: str) -> dict[str, dict[str, Any]]:
        response = await self._client.get(_url(base_url), timeout=self._timeout)
        if not response.is_success:
            raise WorkerProtocolError(_describe(response))
        try:
            entries = response.json().get("uploaded_voices", [])
            listing = {name_key(e["name"]): e for e in entries if isinstance(e.get("name"), str)}
        except (ValueError, AttributeError, TypeError) as exc:
            raise WorkerProtocolError(f"unexpected voice list: {exc}") from exc
        return listing

    @staticmethod
    def _log_failures(action: str, voice: Voice, results: Sequence[WorkerResult]) -> None:
        for r in results:
            if not r.ok:
                log.warning(
                    "voice %s of %s (owner %s) on worker %s failed (replay will fix it): %s",
                    action, voice.name, voice.owner, r.worker_id, r.detail,
                )  # fmt: skip


def _url(base_url: str) -> str:
    return base_url.rstrip("/") + VOICES_PATH
