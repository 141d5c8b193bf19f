"""The command line's argument types: a bad value is argparse's one-line error (exit 2)."""

from __future__ import annotations

import argparse


def comma_list(text: str) -> tuple[str, ...]:
    """``a,b,,c`` -> ``("a", "b", "c")``."""
    return tuple(t.strip() for t in text.split(",") if t.strip())


def tenants(text: str) -> tuple[tuple[int, ...], bool]:
    """``--tenants``: counts, or ``mix`` (bench.tenants.parse)."""
    from bench import tenants as _t

    try:
        return _t.parse(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {v}")
    return v


def batch_size(text: str) -> int | str:
    """``--batch-size``: an integer >= 1, or ``max`` (the largest batch that fits, searched per case)."""
    if text.strip().lower() == "max":
        return "max"
    try:
        return positive_int(text)
    except argparse.ArgumentTypeError:
        raise argparse.ArgumentTypeError(f"expected a positive integer or max, got {text!r}") from None


def nonneg_int(text: str) -> int:
    """An integer (the option checks its own range)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
