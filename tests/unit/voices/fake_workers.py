"""In-memory stand-ins for vllm-omni workers' voices API, behind ``httpx.MockTransport``.

They behave like the real endpoint where it matters to the registry: names compare
case-insensitively, a duplicate upload is a 400, deleting an unknown voice is a 404,
and a worker that is "down" refuses connections.
"""

from __future__ import annotations

import asyncio
import email
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import httpx


@dataclass
class FakeWorker:
    base_url: str
    worker_id: str = ""
    voices: dict[str, dict[str, Any]] = field(default_factory=dict)
    audio: dict[str, bytes] = field(default_factory=dict)
    down: bool = False
    list_gate: asyncio.Event | None = None  # GET waits on it (to hold a replay mid-way)
    calls: list[tuple[str, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.worker_id = self.worker_id or self.base_url.split("//")[1]

    def names(self) -> set[str]:
        return {v["name"] for v in self.voices.values()}

    def plant(self, name: str, file_size: int, ref_text: str | None = None) -> None:
        entry: dict[str, Any] = {
            "name": name, "consent": "x", "created_at": 1, "mime_type": "audio/wav", "file_size": file_size,
        }  # fmt: skip
        if ref_text is not None:
            entry["ref_text"] = ref_text
        self.voices[name.lower()] = entry

    async def handle(self, request: httpx.Request) -> httpx.Response:
        if self.down:
            raise httpx.ConnectError("connection refused", request=request)
        path = request.url.path
        self.calls.append((request.method, path))
        if request.method == "GET" and path == "/v1/audio/voices":
            snapshot = list(self.voices.values())
            if self.list_gate is not None:
                await self.list_gate.wait()  # the answer is as of the request: stale by now
            return httpx.Response(200, json={"voices": [], "uploaded_voices": snapshot})
        if request.method == "POST" and path == "/v1/audio/voices":
            return self._upload(request.headers["content-type"], await request.aread())
        if request.method == "DELETE" and path.startswith("/v1/audio/voices/"):
            key = unquote(path.rsplit("/", 1)[1]).lower()
            if self.voices.pop(key, None) is None:
                return httpx.Response(404, json={"detail": "Voice not found"})
            self.audio.pop(key, None)
            return httpx.Response(200, json={"success": True})
        return httpx.Response(404, json={"detail": "Not Found"})

    def _upload(self, content_type: str, body: bytes) -> httpx.Response:
        message = email.message_from_bytes(f"Content-Type: {content_type}\r\n\r\n".encode() + body)
        fields: dict[str, str] = {}
        sample: tuple[str | None, str, bytes] | None = None
        for part in message.get_payload():
            field_name = part.get_param("name", header="content-disposition")
            payload = part.get_payload(decode=True)
            if field_name == "audio_sample":
                sample = (part.get_filename(), part.get_content_type(), payload)
            else:
                fields[field_name] = payload.decode()
        if sample is None or not fields.get("name") or not fields.get("consent"):
            return httpx.Response(422, json={"detail": "missing field"})
        key = fields["name"].lower()
        if key in self.voices:
            return httpx.Response(400, json={"detail": f"Voice '{fields['name']}' already exists"})
        entry: dict[str, Any] = {
            "name": fields["name"],
            "consent": fields["consent"],
            "created_at": int(time.time()),
            "mime_type": sample[1],
            "file_size": len(sample[2]),
            "filename": sample[0],
        }
        for optional in ("ref_text", "speaker_description"):
            if optional in fields:
                entry[optional] = fields[optional]
        self.voices[key] = entry
        self.audio[key] = sample[2]
        return httpx.Response(200, json={"success": True, "voice": entry})


class Fleet:
    """Several fake workers behind one client, plus the ``workers()`` callable."""

    def __init__(self, *urls: str) -> None:
        self.workers = {u: FakeWorker(u) for u in urls}
        self.routable = set(urls)
        self.client = httpx.AsyncClient(transport=httpx.MockTransport(self._dispatch))

    def __getitem__(self, url: str) -> FakeWorker:
        return self.workers[url]

    def current(self) -> list[FakeWorker]:
        return [w for u, w in self.workers.items() if u in self.routable]

    async def _dispatch(self, request: httpx.Request) -> httpx.Response:
        return await self.workers[f"{request.url.scheme}://{request.url.netloc.decode()}"].handle(request)
