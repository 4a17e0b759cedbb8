"""Argument types the parsers of several commands share (argparse only: ``--help`` loads it)."""

from __future__ import annotations

import argparse

__all__ = ["port"]


def port(text: str) -> int:
    """A TCP port for argparse: 0 (any free one) to 65535, else a message naming the value."""
    try:
        value = int(text)
    except ValueError:
        msg = f"must be a port number, got {text!r}"
        raise argparse.ArgumentTypeError(msg) from None
    if not 0 <= value <= 65535:
        msg = f"must be between 0 and 65535, got {value}"
        raise argparse.ArgumentTypeError(msg)
    return value
