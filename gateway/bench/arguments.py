"""Argument types the benchmark's commands share."""

from __future__ import annotations

import argparse


def int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from exc
    if not values or any(value < 1 for value in values):
        raise argparse.ArgumentTypeError("levels must be positive integers")
    return values
