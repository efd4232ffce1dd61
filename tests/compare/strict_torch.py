"""torch 2.11's strictness about ``torch.isclose``'s first argument, emulated on this machine's torch.

On torch 2.11 (the GPU host's) ``torch.isclose(a, e, equal_nan=True)`` writes the NaN match into a tensor of
``a``'s shape (``a.isnan().__iand__(e.isnan())``), so it raises when ``a`` is smaller than the broadcast of the two
(``RuntimeError: output with shape [27, 16] doesn't match the broadcast shape [10, 2, 27, 16]``); torch 2.13
broadcasts silently. ``torch.allclose`` goes through the same code there. CI runs 2.13 on the CPU, so without this
emulation a comparison that relies on the first argument being broadcast passes every test and crashes on the GPU.
The emulation is stricter than 2.11 (it raises with or without ``equal_nan``): code that broadcasts both sides
itself is right on every torch.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch

__all__ = ["StrictBroadcastError", "strict_broadcasting"]


class StrictBroadcastError(RuntimeError):
    """What torch 2.11 raises, as its own type so a test can tell it from a comparison's real error."""


def _first_argument_is_full(name: str, a: torch.Tensor, e) -> None:
    other = e.shape if isinstance(e, torch.Tensor) else ()
    shape = torch.broadcast_shapes(a.shape, other)
    if tuple(a.shape) != tuple(shape):
        raise StrictBroadcastError(f"{name}: output with shape {list(a.shape)} doesn't match the broadcast shape {list(shape)} "
                                   "(torch 2.11's behaviour, emulated by tests/compare/strict_torch.py)")  # fmt: skip


def _strict(name: str, op):
    def wrapper(a, e, *args, **kwargs):
        _first_argument_is_full(name, a, e)
        return op(a, e, *args, **kwargs)

    return wrapper


@contextlib.contextmanager
def strict_broadcasting() -> Iterator[None]:
    """Within the block, ``torch.isclose``, ``Tensor.isclose``, ``torch.allclose`` and ``Tensor.allclose`` raise
    ``StrictBroadcastError`` where torch 2.11 raises (a first argument smaller than the broadcast shape)."""
    saved = {(owner, name): getattr(owner, name) for owner in (torch, torch.Tensor) for name in ("isclose", "allclose")}
    try:
        for (owner, name), op in saved.items():
            setattr(owner, name, _strict(f"{owner.__name__}.{name}", op))
        yield
    finally:
        for (owner, name), op in saved.items():
            setattr(owner, name, op)
