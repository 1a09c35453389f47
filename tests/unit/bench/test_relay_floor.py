"""The relay floor (``bench overhead``'s reference): relays the body in and the chunks out, nothing else."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx

from gateway.bench.routers import floor_app, floor_command


class _Answer:
    status = 200

    async def chunks(self) -> AsyncIterator[bytes]:
        for chunk in (b"one", b"two", b"three"):
            yield chunk


class _Client:
    def __init__(self) -> None:
        self.posts: list[tuple[str, bytes]] = []

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> _Answer:
        self.posts.append((url, body))
        return _Answer()


async def test_the_floor_relays_the_body_to_the_worker_and_its_chunks_back() -> None:
    client = _Client()
    transport = httpx.ASGITransport(app=floor_app("http://worker:8091", client))
    async with httpx.AsyncClient(transport=transport, base_url="http://floor") as http:
        answer = await http.post("/v1/audio/speech", content=b'{"input": "hi"}')
        health = await http.get("/health")
    assert answer.status_code == 200 and answer.content == b"onetwothree"
    assert client.posts == [("http://worker:8091/v1/audio/speech", b'{"input": "hi"}')]
    assert health.status_code == 200


def test_the_floor_runs_as_its_own_process() -> None:
    command = floor_command(8123, "http://127.0.0.1:8091")
    assert command[1:5] == ["-m", "gateway", "bench", "floor"]
    assert command[-4:] == ["--port", "8123", "--worker", "http://127.0.0.1:8091"]
