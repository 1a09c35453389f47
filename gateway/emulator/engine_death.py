"""Engine death, as the released worker goes through it: a 500, then no server at all.

vllm-omni 0.30.0, once its orchestrator is dead (``engine_client.errored``):

* a new speech request fails in ``_prepare_speech_generation`` (``serving_speech.py``
  1933-1934) with ``OmniEngineDeadError()`` (``entrypoints/omni_base.py`` 52-66: the
  message of vLLM's ``EngineDeadError``, ``error_stage_id`` None), before any stream
  starts: every mode answers ``500``;
* a request in flight fails with ``OmniEngineDeadError(error, error_stage_id=stage)``
  (``omni_base.py`` 503-509, 580-584): a whole-file request answers ``500``, a raw stream
  is cut (``serving_speech.py`` 1776-1795), an SSE stream sends ``speech.audio.error``
  (1874-1890);
* the ``500`` body is ``create_error_response``'s plus ``request_id`` (None: the speech
  route sets no ``request_metadata``) and ``error_stage_id``
  (``entrypoints/serve/utils/errors.py`` 24-64);
* handling it calls ``terminate_if_errored`` (errors.py 58-61, serving_speech.py 1789-1793;
  vllm ``entrypoints/launchers/launcher.py`` 199-209): ``server.should_exit``, so uvicorn
  stops listening (connections refused), finishes what is open, and the process exits. The
  launcher's watchdog does the same within 5 s when no request comes (launcher.py 187-196);
* ``/health`` answers ``503 {"status": "unhealthy"}`` meanwhile (api_server.py 1937-1960).

The process does exit (``omni_run_server`` returns) unless ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH``
is set: under a supervisor it is restarted like any other exit; left alone it stays down.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Mapping

from gateway.emulator.errors import error_body

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
WATCHDOG_SECONDS = 5.0  # launcher.py watchdog_loop VLLM_WATCHDOG_TIME_S
DEAD_STAGE = 0  # the stage the fault kills: Stage 0, the talker

log = logging.getLogger("gateway.emulator.engine_death")


class EngineDead(Exception):
    """OmniEngineDeadError: the engine is gone; ``error_stage_id`` None when it was already dead."""

    def __init__(self, error_stage_id: int | None = None) -> None:
        super().__init__(ENGINE_DEAD_MESSAGE)
        self.error_stage_id = error_stage_id


def engine_dead_body(error_stage_id: int | None) -> dict[str, object]:
    body = error_body(500, ENGINE_DEAD_MESSAGE)
    error = body["error"]
    assert isinstance(error, dict)
    error["request_id"] = None
    error["error_stage_id"] = error_stage_id
    return body


class EngineLife:
    """Whether the engine lives, and how the server stops once it does not.

    ``stop_serving`` is what ``server.should_exit = True`` is for the real worker; the CLI
    sets it to its uvicorn server's. Until then (an app under test without a server) it
    only logs."""

    def __init__(self, time_scale: float = 1.0, env: Mapping[str, str] = os.environ) -> None:
        self.dead = False
        self.time_scale = time_scale
        # vllm envs.py: VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1 keeps a dead server listening.
        self.keep_alive = bool(int(env.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") or "0"))
        self.stop_serving: Callable[[], None] | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        self.on_death: list[Callable[[], None]] = []  # fail what is in flight

    def die(self) -> None:
        if self.dead:
            return
        self.dead = True
        log.error("engine died (fault); in-flight requests fail, the server stops")
        for fail in self.on_death:
            fail()
        loop = asyncio.get_running_loop()
        self._watchdog = loop.call_later(WATCHDOG_SECONDS * self.time_scale, self.terminate)

    def terminate(self) -> None:
        """launcher.py terminate_if_errored: stop serving if the engine is dead."""
        if not self.dead or self.keep_alive:
            return
        if self.stop_serving is not None:
            self.stop_serving()
        else:
            log.error("engine dead: the server would stop now")

    def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
