"""Make API keys and their digests: ``higgs-gateway keys new|hash``.

``new`` prints a fresh random key (give it to the client) and its sha256 (put that in
``auth.api_key_sha256``). ``hash`` reads a key from standard input, so the key never lands
in shell history or a process list. Equivalent one-liner: ``printf %s "$KEY" | sha256sum``.
"""

from __future__ import annotations

import argparse
import secrets
import sys

from gateway.help_format import HelpFormatter
from gateway.security.auth import hash_key

KEY_PREFIX = "hgw-"


def new_key() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="higgs-gateway keys", description="Make API keys.", formatter_class=HelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("new", help="print a new random key and its sha256", formatter_class=HelpFormatter)
    sub.add_parser("hash", help="print the sha256 of a key read from standard input", formatter_class=HelpFormatter)
    args = parser.parse_args(argv)
    if args.command == "new":
        key = new_key()
        print(f"key:    {key}")
        print(f"sha256: {hash_key(key)}")
        return 0
    key = sys.stdin.readline().rstrip("\r\n")
    if not key:
        print("no key on standard input", file=sys.stderr)
        return 2
    print(hash_key(key))
    return 0
