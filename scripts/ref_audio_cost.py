"""What a hostile ``data:`` reference costs a running gateway: the time from the request's
last byte to its answer, and the gateway process's resident memory (peak and after).

    python scripts/ref_audio_cost.py --url http://127.0.0.1:8000 --pid <gateway pid>

Linux only (reads ``/proc/<pid>/status``; resets the peak through ``/proc/<pid>/clear_refs``,
so run it as the gateway's user). Each shape is one speech request of ``--size`` bytes
whose ``ref_audio`` is a data URI a valid request never holds, sent over a plain socket
so the timing is the gateway's, not an HTTP client's.
"""

from __future__ import annotations

import argparse
import json
import socket
import time
from pathlib import Path
from urllib.parse import urlsplit

PREFIX = '{"model":"tts-1","input":"Hello.","voice":"alloy","ref_audio":"'
SUFFIX = '"}'


def shapes(size: int) -> dict[str, str]:
    room = size - len(PREFIX) - len(SUFFIX)
    return {
        "long parameter": "data:audio/wav;x=" + "a" * (room - 29) + ";base64,AAAA",
        "many short parameters": "data:audio/wav" + ";ab" * ((room - 26) // 3) + ";base64,AAAA",
        "semicolons, no comma": "data:" + ";" * (room - 5),
        "oversized payload": "data:audio/wav;base64," + "A" * ((room - 22) // 4 * 4),
    }


def memory_mb(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0]) / 1024
    return fields


def send(url: str, body: bytes, key: str | None) -> tuple[int, float]:
    """The answer's status and the seconds from the body's last byte (or from the moment
    the answer came, if it came first) to the answer."""
    parts = urlsplit(url)
    head = ["POST /v1/audio/speech HTTP/1.1", f"Host: {parts.netloc}", "Content-Type: application/json",
            f"Content-Length: {len(body)}", "Connection: close"]  # fmt: skip
    if key:
        head.append(f"Authorization: Bearer {key}")
    with socket.create_connection((parts.hostname, parts.port or 80)) as conn:
        try:
            conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # answered (and closed) before the whole body was sent
        sent = time.perf_counter()
        try:
            answer = conn.recv(65536)
        except ConnectionResetError:
            answer = b"HTTP/1.1 000 reset"  # closed without an answer the client could read
        elapsed = time.perf_counter() - sent
    return int(answer.split(b" ", 2)[1]), elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--pid", type=int, required=True, help="the gateway process")
    parser.add_argument("--size", type=int, default=15_000_000, help="bytes per request body")
    parser.add_argument("--key", help="an API key, when the gateway has keys")
    args = parser.parse_args()
    print(f"| shape ({args.size / 1e6:.1f} MB body) | status | answer after last byte | RSS before | peak | after |")
    print("|---|---|---|---|---|---|")
    for name, ref_audio in shapes(args.size).items():
        body = (PREFIX + ref_audio + SUFFIX).encode()
        json.loads(body)  # a well-formed request: only its ref_audio is hostile
        Path(f"/proc/{args.pid}/clear_refs").write_text("5")  # reset the peak (VmHWM)
        before = memory_mb(args.pid)["VmRSS"]
        status, elapsed = send(args.url, body, args.key)
        time.sleep(0.5)  # let the gateway finish with the request before reading "after"
        after = memory_mb(args.pid)
        print(f"| {name} | {status} | {elapsed * 1000:.1f} ms | {before:.0f} MB | {after['VmHWM']:.0f} MB | {after['VmRSS']:.0f} MB |")


if __name__ == "__main__":
    main()
