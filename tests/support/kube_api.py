"""A Kubernetes API server for discovery tests, over real HTTP on 127.0.0.1 (aiohttp).

It serves what discovery reads, the way the API server does: EndpointSlices and Pods of
one namespace, listed (``metadata.resourceVersion`` of the collection) and watched
(``?watch=true``: one JSON event per line, chunked) from a resourceVersion, with the
events after that version replayed from its history first; a version older than its
history answers an ``ERROR`` event with a 410 Status. The test edits the objects; every
change gets the next resourceVersion and reaches the open watches that select it.

Failure modes, as discovery meets them: an outage (lists answer 503 with a Status, open
watches are cut mid-stream), scripted list failures (e.g. 403 from missing RBAC),
watches that expire (410, history compacted), watches the server ends, and changes a
watch misses.

Runs on the test's event loop (``async with FakeKubeApi() as api``), or on its own
thread for a test that runs the gateway elsewhere (``with FakeKubeApi().in_thread()``;
then edit it through ``call``).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiohttp import web
from lightkube import AsyncClient, KubeConfig

T = TypeVar("T")
Kind = str  # "endpointslices" | "pods"
KINDS: dict[Kind, tuple[str, str]] = {  # kind -> (apiVersion, the kind's name)
    "endpointslices": ("discovery.k8s.io/v1", "EndpointSlice"),
    "pods": ("v1", "Pod"),
}
_END = object()
TOKEN = "discovery-test-token"  # the bearer token client() sends; anything else is 401


@dataclass(frozen=True)
class Call:
    """One request the server answered."""

    kind: Kind
    namespace: str
    watch: bool
    params: dict[str, str]


@dataclass(eq=False)  # kept in a set, by identity
class _Watch:
    kind: Kind
    selector: str
    events: asyncio.Queue[Any] = field(default_factory=asyncio.Queue)
    request: web.Request | None = None


def selects(selector: str, labels: dict[str, str]) -> bool:
    """Equality selectors (``k=v``, ``k==v``, ``k!=v``, comma-separated): what discovery sends."""
    for term in filter(None, (t.strip() for t in selector.split(","))):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key.strip()) == value.strip():
                return False
            continue
        key, value = term.replace("==", "=").split("=", 1)
        if labels.get(key.strip()) != value.strip():
            return False
    return True


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code, "reason": reason, "message": message}


def json_response(body: dict[str, Any], code: int = 200) -> web.Response:
    # Exactly this content type, as the API server sends it (clients match it to decode a Status).
    return web.Response(body=json.dumps(body).encode(), status=code, headers={"Content-Type": "application/json"})


class FakeKubeApi:
    def __init__(self, namespace: str = "higgs") -> None:
        self.namespace = namespace
        self.version = 100
        self.calls: list[Call] = []
        self.failures = 0  # requests answered with a failure (outage, scripted)
        self.listed = 0  # lists answered with the collection
        self._objects: dict[tuple[Kind, str], dict[str, Any]] = {}
        self._history: list[tuple[int, Kind, str, dict[str, Any]]] = []  # (version, kind, type, object)
        self._oldest = 0  # a watch from before this version is answered 410 (compacted)
        self._watches: set[_Watch] = set()
        self._down = False
        self._list_failures: list[int] = []
        self._expire_next_watch = False
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.url = ""

    # ---- life -------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices", self._endpointslices)
        app.router.add_get("/api/v1/namespaces/{namespace}/pods", self._pods)
        # A client that goes away (discovery's watch deadline) cancels its handler.
        self._runner = web.AppRunner(app, handler_cancellation=True, access_log=None, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        self._loop = asyncio.get_running_loop()

    async def close(self) -> None:
        for watch in list(self._watches):
            watch.events.put_nowait(_END)
        if self._runner is not None:
            await self._runner.cleanup()

    async def __aenter__(self) -> FakeKubeApi:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def client(self) -> AsyncClient:
        """An API client pointed at this server, as discovery would use in a cluster."""
        kubeconfig = {
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "discovery", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "discovery", "namespace": self.namespace}}],
            "current-context": "fake",
        }
        return AsyncClient(config=KubeConfig.from_dict(kubeconfig), trust_env=False)

    @contextmanager
    def in_thread(self) -> Iterator[FakeKubeApi]:
        """Serve from a thread of its own; edit the server with ``call`` meanwhile."""
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name="fake-kube-api", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self.start(), loop).result(10)
            yield self
        finally:
            asyncio.run_coroutine_threadsafe(self.close(), loop).result(10)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()

    def call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run one of the editing methods on the server's loop (from another thread)."""
        assert self._loop is not None

        async def run() -> T:
            return method(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result(10)

    # ---- what the test edits (on the server's loop) ------------------------------------

    def put(self, kind: Kind, item: dict[str, Any], *, announce: bool = True) -> int:
        """Create or replace an object; ``announce=False``: a change the watches miss."""
        item = copy.deepcopy(item)
        self.version += 1
        api_version, kind_name = KINDS[kind]
        item.setdefault("apiVersion", api_version)
        item.setdefault("kind", kind_name)
        metadata = item.setdefault("metadata", {})
        metadata["namespace"] = self.namespace
        metadata["resourceVersion"] = str(self.version)
        key = (kind, metadata["name"])
        change = "MODIFIED" if key in self._objects else "ADDED"
        self._objects[key] = item
        if announce:
            self._publish(kind, change, item)
        return self.version

    def delete(self, kind: Kind, name: str) -> int:
        item = copy.deepcopy(self._objects.pop((kind, name)))
        self.version += 1
        item["metadata"]["resourceVersion"] = str(self.version)
        self._publish(kind, "DELETED", item)
        return self.version

    def outage(self, down: bool) -> None:
        """Down: every request fails and the open watches are cut without a proper end."""
        self._down = down
        if down:
            for watch in list(self._watches):
                if watch.request is not None and watch.request.transport is not None:
                    watch.request.transport.abort()
                watch.events.put_nowait(_END)
                self.failures += 1

    def fail_lists(self, *codes: int) -> None:
        """The next lists answer these HTTP statuses, one each."""
        self._list_failures.extend(codes)

    def expire_watches(self) -> None:
        """History compacted: open watches get 410 Gone, and so would a resume from their version."""
        self._oldest = self.version
        self._history.clear()
        for watch in list(self._watches):
            watch.events.put_nowait(self._gone_event())

    def expire_next_watch(self) -> None:
        """The next watch request answers 410 Gone whatever its version."""
        self._expire_next_watch = True

    def end_watches(self) -> None:
        """End every open watch cleanly, as the server does at its timeout."""
        for watch in list(self._watches):
            watch.events.put_nowait(_END)

    # ---- what the test reads ----------------------------------------------------------

    def lists(self) -> int:
        return sum(1 for call in self.calls if not call.watch)

    def watches(self) -> list[Call]:
        return [call for call in self.calls if call.watch]

    def open_watches(self) -> int:
        return len(self._watches)

    def last_watched_version(self) -> int:
        """The resourceVersion the latest watch started from (0: none yet)."""
        versions = [int(call.params.get("resourceVersion") or 0) for call in self.watches()]
        return versions[-1] if versions else 0

    # ---- HTTP ---------------------------------------------------------------------------

    async def _endpointslices(self, request: web.Request) -> web.StreamResponse:
        return await self._serve("endpointslices", request)

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        return await self._serve("pods", request)

    async def _serve(self, kind: Kind, request: web.Request) -> web.StreamResponse:
        watch = request.query.get("watch") in ("true", "1")
        namespace = request.match_info["namespace"]
        self.calls.append(Call(kind, namespace, watch, dict(request.query)))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            self.failures += 1
            return json_response(status(401, "Unauthorized", "no valid bearer token"), 401)
        if self._down:
            self.failures += 1
            return json_response(status(503, "ServiceUnavailable", "the API server is unavailable"), 503)
        if not watch and self._list_failures:
            code = self._list_failures.pop(0)
            self.failures += 1
            return json_response(status(code, "Forbidden" if code == 403 else "Failure", f"scripted {code}"), code)
        selector = request.query.get("labelSelector", "")
        if watch:
            return await self._watch(kind, selector, request)
        items = [
            copy.deepcopy(item)
            for (item_kind, _), item in sorted(self._objects.items())
            if item_kind == kind and selects(selector, item["metadata"].get("labels") or {})
        ]
        api_version, kind_name = KINDS[kind]
        self.listed += 1
        return json_response({
            "apiVersion": api_version, "kind": f"{kind_name}List",
            "metadata": {"resourceVersion": str(self.version)}, "items": items,
        })  # fmt: skip

    async def _watch(self, kind: Kind, selector: str, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        await response.prepare(request)
        since = int(request.query.get("resourceVersion") or self.version)
        if self._expire_next_watch or since < self._oldest:
            self._expire_next_watch = False
            await response.write(_line(self._gone_event()))
            return response
        watch = _Watch(kind, selector, request=request)
        for version, item_kind, change, item in self._history:
            if version > since and item_kind == kind:
                watch.events.put_nowait({"type": change, "object": item})
        self._watches.add(watch)
        timeout = float(request.query.get("timeoutSeconds") or 3600)
        try:
            async with asyncio.timeout(timeout):
                while (event := await watch.events.get()) is not _END:
                    if selects(selector, event["object"]["metadata"].get("labels") or {}) or event["type"] == "ERROR":
                        with contextlib.suppress(ConnectionResetError):  # cut: the client sees the failure
                            await response.write(_line(event))
                    if event["type"] == "ERROR":
                        break
        except TimeoutError:
            pass
        finally:
            self._watches.discard(watch)
        # Cut by outage(), or the client went away: no proper end to write.
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    def _publish(self, kind: Kind, change: str, item: dict[str, Any]) -> None:
        self._history.append((self.version, kind, change, copy.deepcopy(item)))
        for watch in list(self._watches):
            if watch.kind == kind:
                watch.events.put_nowait({"type": change, "object": copy.deepcopy(item)})

    def _gone_event(self) -> dict[str, Any]:
        message = f"too old resource version (oldest kept: {self._oldest})"
        return {"type": "ERROR", "object": {**status(410, "Expired", message), "metadata": {}}}


def _line(event: dict[str, Any]) -> bytes:
    return (json.dumps(event) + "\n").encode()
