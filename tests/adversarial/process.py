"""Routers that attack the harness's own process (in-process runs, ``--no-isolate``).

Each computes the right answer first, so that only the attack can make it fail.
"""

import os
import threading
import time

import torch

from tests.planted._common import correct


def exits_quietly(scores, bias, topk, renormalize, rsf):
    """Ends the process with status 0 and no output: a run must not look like a success."""
    os._exit(0)


def sets_its_input(scores, bias, topk, renormalize, rsf):
    """Answers, then points the scores tensor at an empty storage (``set_``)."""
    out = correct(scores, bias, topk, renormalize, rsf)
    scores.set_(torch.empty(0, dtype=scores.dtype, device=scores.device))
    return out


def transposes_its_input(scores, bias, topk, renormalize, rsf):
    """Answers, then transposes the scores tensor in place (``t_``): its shape and strides change."""
    out = correct(scores, bias, topk, renormalize, rsf)
    scores.t_()
    return out


def writes_outside_its_view(scores, bias, topk, renormalize, rsf):
    """Answers, then writes into the padding around a strided case's rows (memory it was given but does not own)."""
    out = correct(scores, bias, topk, renormalize, rsf)
    whole = torch.empty(0, dtype=scores.dtype, device=scores.device).set_(scores.untyped_storage())
    if whole.numel() > scores.numel():
        whole[-1] = -1.0
    return out


def raises_keyboard_interrupt(scores, bias, topk, renormalize, rsf):
    """Raises KeyboardInterrupt without any signal: its own error, not the user's Ctrl-C."""
    raise KeyboardInterrupt("a library's stray KeyboardInterrupt")


_writers: list = []


def background_writer(scores, bias, topk, renormalize, rsf):
    """Answers, then leaves a thread that keeps overwriting the returned tensors for a while."""
    w, ids = correct(scores, bias, topk, renormalize, rsf)
    w, ids = w.clone(), ids.clone()

    def scribble(mine: int):
        # Until a later call's writer takes over (one writer busy at a time, however many calls a check makes), or
        # 30 s: the last call's writer is still inside torch when the interpreter shuts down.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and mine == len(_writers):
            w.fill_(float("nan"))
            ids.fill_(-1)

    thread = threading.Thread(target=scribble, args=(len(_writers) + 1,), daemon=True)
    _writers.append(thread)
    thread.start()
    return w, ids
