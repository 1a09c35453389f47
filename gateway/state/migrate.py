"""``higgs-gateway state migrate``: copy a gateway's shared state between backends.

    higgs-gateway state migrate --from-dir ./data --to redis://redis:6379/0
    higgs-gateway state migrate --from redis://redis:6379/0 --to-dir ./data

Copies the routing overrides and the drained workers (the destination's are replaced)
and every voice with its audio (a voice the destination already has with the same
metadata is skipped; one that differs is reported and left alone, and the command exits
1). Safe to re-run. Run it before switching ``state.backend`` to ``redis``: a replica
follows Redis, so voices only in its data directory are dropped from its local copy.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass, field
from pathlib import Path

from gateway.config import StateConfig
from gateway.help_format import HelpFormatter
from gateway.state.backend import StateBackend
from gateway.state.errors import StateUnavailable
from gateway.state.local import LocalStateBackend


@dataclass
class MigrationReport:
    routing_keys: int = 0
    drained: int = 0
    copied: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # already there, identical
    conflicts: list[str] = field(default_factory=list)  # there with other content: left alone

    def summary(self) -> str:
        lines = [
            f"routing overrides: {self.routing_keys} top-level key(s)",
            f"drained workers:   {self.drained}",
            f"voices copied:     {len(self.copied)} {sorted(self.copied) or ''}".rstrip(),
            f"voices present:    {len(self.skipped)}",
        ]
        if self.conflicts:
            lines.append(f"voices in conflict (differ in the destination, not copied): {sorted(self.conflicts)}")
        return "\n".join(lines)


async def copy_state(source: StateBackend, destination: StateBackend) -> MigrationReport:
    report = MigrationReport()
    overrides = await source.read_routing()
    await destination.replace_routing(overrides)
    report.routing_keys = len(overrides)

    drained, already = await source.read_drains(), await destination.read_drains()
    for worker_id in sorted(already - drained):
        await destination.set_drained(worker_id, False)
    for worker_id in sorted(drained - already):
        await destination.set_drained(worker_id, True)
    report.drained = len(drained)

    existing = await destination.voice_metas()
    for key, meta in sorted((await source.voice_metas()).items()):
        name = str(meta.get("name", key))
        if key in existing:
            (report.skipped if existing[key] == meta else report.conflicts).append(name)
            continue
        voice = await source.read_voice(key)  # keyed by worker name: unique across owners
        if voice is None:
            continue  # deleted while we ran
        if await destination.put_voice(voice):
            report.copied.append(name)
        else:
            report.conflicts.append(name)
    await destination.mark_initialized()  # replicas follow it as it is, never re-fill it
    return report


def _backend(directory: str | None, url: str | None, prefix: str) -> StateBackend:
    if directory is not None:
        return LocalStateBackend(Path(directory))
    from gateway.state.redis_backend import RedisStateBackend

    return RedisStateBackend(StateConfig(backend="redis", redis_url=url, key_prefix=prefix, timeout_s=10.0))


async def _migrate(args: argparse.Namespace) -> int:
    source = _backend(args.from_dir, args.from_url, args.key_prefix)
    destination = _backend(args.to_dir, args.to_url, args.key_prefix)
    try:
        report = await copy_state(source, destination)
    except StateUnavailable as exc:
        print(f"higgs-gateway state migrate: {exc.message} ({exc.__cause__ or 'no detail'})", file=sys.stderr)
        return 2
    finally:
        await source.close()
        await destination.close()
    print(report.summary())
    return 1 if report.conflicts else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="higgs-gateway state", description="Manage the gateway's shared state.", formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    migrate = sub.add_parser(
        "migrate", help="copy routing overrides, drains and voices between backends", formatter_class=HelpFormatter
    )
    source = migrate.add_mutually_exclusive_group(required=True)
    source.add_argument("--from-dir", help="a gateway data directory to read")
    source.add_argument("--from", dest="from_url", help="a Redis URL to read (redis:// or rediss://)")
    target = migrate.add_mutually_exclusive_group(required=True)
    target.add_argument("--to-dir", help="a gateway data directory to write")
    target.add_argument("--to", dest="to_url", help="a Redis URL to write (redis:// or rediss://)")
    migrate.add_argument("--key-prefix", default=StateConfig().key_prefix, help="state.key_prefix of the gateways")
    args = parser.parse_args(argv)
    return asyncio.run(_migrate(args))
