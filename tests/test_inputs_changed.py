"""A candidate that writes anywhere into what it was given is caught, down to one byte, in the tail too."""

from __future__ import annotations

import pytest
import torch

from contracts.candidates.fenced_call import CallInputs
from contracts.cases.build import build_case
from contracts.cases.spec import CaseSpec


@pytest.mark.parametrize("family,rows", [("random_bf16", 3), ("random_fp32", 5), ("strided", 7)])  # odd sizes: a tail of bytes
def test_one_changed_byte_anywhere_in_the_storage_is_seen(family, rows):
    case = build_case(CaseSpec(family, 11, rows, 896, 16))
    for where in (0, -1, case.scores.untyped_storage().nbytes() // 2):
        inputs = CallInputs(case)
        assert not inputs.changed()
        raw = torch.empty(0, dtype=torch.uint8).set_(inputs.scores.untyped_storage())
        raw[where] ^= 1  # one bit of one byte
        assert inputs.changed(), f"a change at byte {where} of {raw.numel()} went unseen"


def test_a_sign_flip_of_a_zero_is_a_change():
    case = build_case(CaseSpec("all_zero", 3, 4, 896, 16))
    inputs = CallInputs(case)
    inputs.scores.view(-1)[5] = -0.0 if not torch.signbit(inputs.scores.view(-1)[5]) else 0.0
    assert inputs.changed()


class _StickyContext:
    """What a CUDA context does after a kernel's fault: every later CUDA op raises the same error, the harness's
    read-back of the inputs included (found on an H100: sglang-radix's misaligned bias load surfaced in torch.equal)."""

    error = "CUDA error: misaligned address"

    def __init__(self, monkeypatch):
        import contracts.candidates.fenced_call as fenced_call

        self.faulted = False
        real = fenced_call._same_bytes

        def same_bytes(a, b):
            if self.faulted:
                raise torch.AcceleratorError(self.error) if hasattr(torch, "AcceleratorError") else RuntimeError(self.error)
            return real(a, b)

        monkeypatch.setattr(fenced_call, "_same_bytes", same_bytes)

    def route(self, scores, bias, topk, *args, **kwargs):
        self.faulted = True
        raise RuntimeError(self.error)  # what torch.cuda.synchronize raises after the candidate's kernel


@pytest.mark.parametrize("repeat", [1, 3])
def test_a_candidates_cuda_fault_is_its_error_not_the_harness_read_back(monkeypatch, repeat):
    from contracts.candidates.calling import CaseRunner
    from contracts.candidates.fenced_call import call_once

    sticky = _StickyContext(monkeypatch)
    case = build_case(CaseSpec("random_fp32", 5, 4, 896, 16))
    if repeat > 1:  # the fault in a later call: the first one answers
        calls = []
        clean = lambda s, b, k, *a, **kw: (torch.zeros(s.shape[0], k), torch.arange(k).repeat(s.shape[0], 1))  # noqa: E731
        route = lambda *a, **kw: clean(*a, **kw) if not calls.append(1) and len(calls) == 1 else sticky.route(*a, **kw)  # noqa: E731
    else:
        route = sticky.route
    out = CaseRunner(route, repeat=repeat).run(case)  # raised in the read-back before the fix
    assert out.fatal is not None and out.fatal.kind == "cuda_error", out.result
    assert "misaligned address" in out.fatal.message
    sticky.faulted = False
    value, exc, changed = call_once(sticky.route, case)
    assert value is None and "misaligned" in str(exc) and changed is False
