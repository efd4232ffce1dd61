"""A candidate that writes anywhere into what it was given is caught, down to one byte, in the tail too."""

from __future__ import annotations

import pytest
import torch

from contracts.candidates.calling import _Inputs
from contracts.cases.build import build_case
from contracts.cases.plan import CaseSpec


@pytest.mark.parametrize("family,rows", [("random_bf16", 3), ("random_fp32", 5), ("strided", 7)])  # odd sizes: a tail of bytes
def test_one_changed_byte_anywhere_in_the_storage_is_seen(family, rows):
    case = build_case(CaseSpec(family, 11, rows, 896, 16))
    for where in (0, -1, case.scores.untyped_storage().nbytes() // 2):
        inputs = _Inputs(case)
        assert not inputs.changed()
        raw = torch.empty(0, dtype=torch.uint8).set_(inputs.scores.untyped_storage())
        raw[where] ^= 1  # one bit of one byte
        assert inputs.changed(), f"a change at byte {where} of {raw.numel()} went unseen"


def test_a_sign_flip_of_a_zero_is_a_change():
    case = build_case(CaseSpec("all_zero", 3, 4, 896, 16))
    inputs = _Inputs(case)
    inputs.scores.view(-1)[5] = -0.0 if not torch.signbit(inputs.scores.view(-1)[5]) else 0.0
    assert inputs.changed()
