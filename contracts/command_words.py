"""Editing a recorded command line: the words of a run's command without some of its options.

A summary records the command that made it. Two readers rerun it with other options: the diagnosis
suggests the same check under another contract, and a merge of shards records the command without
``--shard``. Both drop options the same way, here: an option that takes a value goes with its value,
whether written ``--out DIR`` or ``--out=DIR``.
"""

from __future__ import annotations

__all__ = ["without_options"]


def without_options(words: list[str], valued: tuple[str, ...], flags: tuple[str, ...] = ()) -> list[str]:
    """``words`` (a command line split with ``shlex.split``) less each option of ``valued`` with its value and
    each of ``flags`` (options that take none)."""
    joined = tuple(f"{option}=" for option in valued)
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in valued:
            skip = True
        elif not word.startswith(joined) and word not in flags:
            out.append(word)
    return out
