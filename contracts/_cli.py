"""Small pieces the command-line modules share."""

from __future__ import annotations

import argparse

__all__ = ["positive_int"]


def positive_int(example: str):
    """An argparse ``type`` for an int >= 1; argparse names the option, ``example`` shows the fix."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}; e.g. {example}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {value}; e.g. {example}")
        return value

    return parse
