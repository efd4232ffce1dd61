"""The vectorized bulk makers keep their family's promise on every row, are deterministic, and spread their
special experts over every expert index (a sampler that favoured low indices would hide lane bugs)."""

from __future__ import annotations

import pytest
import torch

from contracts.cases import makers
from contracts.cases.build import build_case
from contracts.cases.families import FAMILIES
from contracts.cases.spec import CaseSpec

ROWS, EXPERTS, TOPK = 4096, 896, 16
# Bulk cases are drawn on the candidate's device: check the makers there too when there is a GPU.
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


def _make(name: str, device: str, seed: int = 7, experts: int = EXPERTS, topk: int = TOPK):
    gen = torch.Generator(device=device).manual_seed(seed)
    x, bias, _ = getattr(makers, name)(gen, ROWS, experts, topk)
    assert x.device.type == device and bias.device.type == device
    return x.cpu(), bias.cpu()


@pytest.mark.parametrize("experts,topk", [(896, 16), (384, 8), (64, 4)])
def test_tie_pool_straddle_bulk_straddles_the_cutoff_on_every_row(experts, topk, device):
    x, _ = _make("tie_pool_straddle_bulk", device, experts=experts, topk=topk)
    pool, above = (x == 1.0).sum(1), (x >= 3.0).sum(1)
    assert bool((pool >= 2).all()) and bool((above < topk).all())
    assert bool((above + pool > topk).all())  # some pool members are chosen and some are not
    if experts > makers._SAMPLE_PLACES:  # both sampling paths ran: top-k rows and full-sort rows
        assert int(pool.max()) > makers._SAMPLE_PLACES and int(pool.min()) < 16


def test_tie_pool_above_bulk_lies_inside_the_top_k(device):
    x, _ = _make("tie_pool_above_bulk", device)
    pool, above = (x == 1.0).sum(1), (x >= 3.0).sum(1)
    assert bool((pool >= 2).all()) and bool((above + pool <= TOPK).all())
    assert bool((x[(x != 1.0) & (x < 3.0)] <= -3.0).all())  # everything else below the pool (-4 + u rounds up to -3.0 for u near 1)


def test_nan_dense_bulk_leaves_fewer_than_k_numbers(device):
    x, _ = _make("nan_dense_bulk", device)
    numbers = (~torch.isnan(x)).sum(1)
    assert bool((numbers < TOPK).all()) and set(numbers.unique().tolist()) == set(range(TOPK))


def test_sigmoid_underflow_bulk_has_k_plus_4_experts_near_the_overflow(device):
    x, _ = _make("sigmoid_underflow_bulk", device)
    lone = torch.zeros(x.shape[0], dtype=torch.bool)
    lone[3::4] = True  # the lone-subnormal rows (makers._lone_subnormal): one expert at -88.5 or -88.0, the rest -120
    near = (x > -100.0).sum(1).cpu()
    assert bool((near[~lone] == TOPK + 4).all()) and bool((near[lone] == 1).all())
    drawn = x[~lone.to(x.device)]
    assert bool(((drawn[drawn > -100.0] >= -95.0) & (drawn[drawn > -100.0] < -85.0)).all())
    assert set(x[lone.to(x.device)].max(1).values.tolist()) == {-88.5, -88.0}


@pytest.mark.parametrize("name", ["tie_pool_straddle_bulk", "nan_dense_bulk", "sigmoid_underflow_bulk"])
def test_special_experts_reach_every_expert_index(name, device):
    x, _ = _make(name, device)
    special = {"tie_pool_straddle_bulk": x == 1.0, "nan_dense_bulk": ~torch.isnan(x), "sigmoid_underflow_bulk": x > -100.0}[name]
    hits = special.sum(0)
    assert bool((hits > 0).all()), f"{name}: experts never chosen: {(hits == 0).nonzero().squeeze(1).tolist()[:10]}"
    # roughly uniform: no expert index more than 3x as often as the mean
    assert float(hits.max()) < 3 * float(hits.float().mean())


@pytest.mark.parametrize("family", [n for n, f in FAMILIES.items() if f.bulk_maker])
def test_a_bulk_case_is_the_same_bits_every_time(family, device):
    f = FAMILIES[family]
    spec = CaseSpec(family, 1234, 2048, EXPERTS, TOPK, bulk=True)
    a, b = build_case(spec, device), build_case(spec, device)
    assert torch.equal(a.scores.view(torch.int16), b.scores.view(torch.int16)), f.bulk_maker
    assert torch.equal(a.bias, b.bias)
