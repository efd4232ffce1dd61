"""The oracle's faster paths give exactly the bits of the code they replaced (``tests/frozen_oracle.py``).

The oracle defines the contracts, so a speed-up may not move one bit. Three
levels, each against the frozen code:

- the fp32 sigmoid, on a sweep of every fp32 bit pattern's neighbourhood, the
  whole overflow boundary around x = -88.72 and every bf16 and fp16 value;
- the selection alone, on value matrices built to be hard in every way the
  contract cares about (ties at the cutoff, NaN, +-inf, signed zeros,
  subnormals, values at and under a floor), mixed with clean rows in every
  proportion so the probe sends chunks down both paths, for every NaN rule,
  floor and tie rule, many shapes and row counts around the probe and chunk
  sizes;
- ``oracle.route`` end to end on every case family of every built-in
  contract, coverage and bulk cases, several seeds and shapes, logits as
  generated and cast to fp16, renormalize on and off where the contract
  admits both (each case draws only the call options its contract admits,
  as the plan does: the oracle refuses the others).
"""

from __future__ import annotations

import math

import pytest
import torch

import frozen_oracle
import oracle
from contracts.cases import CaseSpec, build_case
from contracts.cases.families import families_for
from contracts.cases.spec import admitted_fields
from oracle import _route, _scores


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


def _fp32_of_patterns(patterns: torch.Tensor) -> torch.Tensor:
    return patterns.to(torch.int32).view(torch.float32)


def _sigmoid_inputs() -> torch.Tensor:
    sweep = _fp32_of_patterns(torch.arange(-(2**31), 2**31, 4099, dtype=torch.int64))
    ends = torch.tensor([-89.5, -88.0]).view(torch.int32)  # negative floats: the larger magnitude has the larger pattern
    boundary = _fp32_of_patterns(torch.arange(int(ends[1]), int(ends[0]) + 1, dtype=torch.int64))
    every16 = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    return torch.cat((sweep, boundary, every16.view(torch.bfloat16).float(), every16.view(torch.float16).float()))


@pytest.mark.parametrize("formula", ["correctly_rounded", "expf"])
def test_sigmoid_matches_the_frozen_code(formula):
    x = _sigmoid_inputs()
    assert _same_bits(_scores._sigmoid_exact(x, formula), frozen_oracle.sigmoid_exact(x, formula))


def test_sigmoid_of_a_strided_view_matches_the_frozen_code():
    x = _sigmoid_inputs()[: 1 << 16].view(256, 256)[:, 3:200]
    assert _same_bits(_scores._sigmoid_exact(x, "correctly_rounded"), frozen_oracle.sigmoid_exact(x, "correctly_rounded"))


def test_rank_keys_match_the_frozen_code():
    values = torch.cat((_sigmoid_inputs(), torch.tensor([math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0])))
    assert torch.equal(oracle.rank_keys(values), frozen_oracle.rank_keys(values))


# ------------------------------------------------------------------------------------------ the selection alone

_SPECIAL = (math.nan, -math.nan, math.inf, -math.inf, 0.0, -0.0, 2.0**-149, -(2.0**-149), 2.0**-126, -1e30, -1.5e30)


def _ulp_neighbours(gen: torch.Generator, rows: int, experts: int) -> torch.Tensor:
    """Each row a few fp32 steps either side of one value (negative, positive, subnormal): near and exact ties."""
    bases = torch.tensor([-1.0, 1.0, -3.0e-39, 3.0e-39, -2.5]).view(torch.int32).long()
    base = bases[torch.randint(0, len(bases), (rows, 1), generator=gen)]
    return _fp32_of_patterns(base + torch.randint(-3, 4, (rows, experts), generator=gen))


def _hard_rows(gen: torch.Generator, rows: int, experts: int, topk: int) -> torch.Tensor:
    """Rows of few distinct values (ties at every cutoff) with specials sprinkled in, in six styles."""
    style = torch.randint(0, 6, (rows, 1), generator=gen)
    levels = torch.randint(0, 6, (rows, experts), generator=gen).float() * 0.25  # few distinct values: ties
    x = torch.where(style == 0, levels, torch.randn(rows, experts, generator=gen))
    x = torch.where(style == 5, _ulp_neighbours(gen, rows, experts), x)
    special = torch.tensor(_SPECIAL)[torch.randint(0, len(_SPECIAL), (rows, experts), generator=gen)]
    density = torch.tensor([0.0, 0.02, 0.3, 0.9, 1.0, 0.01])[style]
    x = torch.where(torch.rand(rows, experts, generator=gen) < density, special, x)
    # style 1: a tie pool straddling the cutoff; style 4 is all specials (mostly NaN, inf, floor values)
    pool = torch.rand(rows, experts, generator=gen).argsort(1)[:, : min(experts, topk + 3)]
    x[(style == 1).squeeze(1)] = x[(style == 1).squeeze(1)].scatter(1, pool[(style == 1).squeeze(1)], 0.75)
    return x


def _value_rows(seed: int, rows: int, experts: int, topk: int, hard_share: float) -> torch.Tensor:
    """``rows`` rows of which about ``hard_share`` are hard, in runs (chunks see both mixes and pure ones)."""
    gen = torch.Generator().manual_seed(seed)
    clean = torch.randn(rows, experts, generator=gen) * 3
    hard = _hard_rows(gen, rows, experts, topk)
    run = torch.rand(rows // 16 + 1, generator=gen).repeat_interleave(16)[:rows] < hard_share
    return torch.where(run.unsqueeze(1), hard, clean)


_SELECT_CONTRACTS = [
    oracle.get_contract("aiter"),
    oracle.get_contract("serial"),
    oracle.get_contract("deepseek-v3"),
    oracle.get_contract("aiter").replace(nan_rule="first"),
    oracle.get_contract("aiter").replace(nan_rule="never"),
    oracle.get_contract("aiter").replace(floor=-1e30),
    oracle.get_contract("aiter").replace(floor=0.0, nan_rule="first"),
    oracle.get_contract("serial").replace(nan_rule="last", tie_rule="aiter"),
    oracle.get_contract("serial").replace(floor=None),
]
_SHAPES = [(896, 16), (384, 8), (224, 16), (256, 8), (128, 4), (8, 2), (17, 16), (16, 16), (1, 1)]


# Rows of one route chunk in these tests: the real chunk where it is small
# (896 experts: 1,024 rows), else 1,024 rows. _select sees whole matrices (it
# has no chunks; only its probe of _PROBE_ROWS rows cuts them) and route cuts
# at any chunk size by the same loop, so a chunk of 114,688 rows (8 experts)
# only made the bit-identity tests route 100x the rows (133-191 s each) to
# cross the same boundary.
_TEST_CHUNK_ROWS = 1024


def _chunk_rows(experts: int) -> int:
    return min(max(1, _route._CHUNK_ELEMENTS_CPU // experts), _TEST_CHUNK_ROWS)


@pytest.mark.parametrize("c", _SELECT_CONTRACTS, ids=lambda c: f"{c.name}-{c.nan_rule}-{c.floor}-{c.tie_rule}")
@pytest.mark.parametrize("experts,topk", _SHAPES)
def test_selection_matches_the_frozen_code(c, experts, topk):
    priority = _route._priority_on(experts, c.tie_rule, torch.device("cpu"))
    chunk = _chunk_rows(experts)
    for seed, (rows, hard_share) in enumerate([(1, 1.0), (31, 0.5), (32, 1.0), (33, 0.2), (200, 0.0), (chunk + 70, 0.6), (700, 0.1), (700, 0.9)]):
        values = _value_rows(seed, rows, experts, topk, hard_share)
        new, old = _route._select(values, topk, priority, c), frozen_oracle.select(values, topk, priority, c)
        assert new.dtype == old.dtype and torch.equal(new, old), (seed, rows, hard_share)


def _counted(calls: dict, name: str, fn):
    def wrapped(*args):
        calls[name] = calls.get(name, 0) + 1
        return fn(*args)

    return wrapped


def test_the_probe_sends_chunks_down_both_paths(monkeypatch):
    """The selection test above means something only if both branches ran: count them."""
    c, priority = oracle.get_contract("aiter"), _route._priority_on(896, "aiter", torch.device("cpu"))
    calls: dict = {}
    monkeypatch.setattr(_route, "_exact", _counted(calls, "exact", _route._exact))
    monkeypatch.setattr(_route, "_fast_then_exact", _counted(calls, "fast", _route._fast_then_exact))
    _route._select(_value_rows(0, 500, 896, 16, 1.0), 16, priority, c)  # a hard probe: its hard rows, then the rest exactly
    assert calls == {"fast": 1, "exact": 2}
    _route._select(_value_rows(0, 500, 896, 16, 0.0), 16, priority, c)  # a clean probe: the rest the fast way
    assert calls == {"fast": 3, "exact": 2}


# ------------------------------------------------------------------------------------------ route, end to end


def _frozen_route(monkeypatch, *args, **kwargs):
    with monkeypatch.context() as m:
        m.setattr(_route, "_select", frozen_oracle.select)
        m.setattr(_scores, "_sigmoid_exact", frozen_oracle.sigmoid_exact)
        _scores._sigmoid_table.cache_clear()
        try:
            return oracle.route(*args, **kwargs)
        finally:
            _scores._sigmoid_table.cache_clear()


_ROUTE_CASES = [  # (contract, experts, topk, extra shape of a grouped contract)
    ("aiter", 896, 16, {}),
    ("aiter", 384, 8, {}),
    ("aiter", 224, 16, {}),
    ("serial", 896, 16, {}),
    ("serial", 224, 16, {}),
    ("deepseek-v3", 256, 8, {"n_group": 8, "topk_group": 4}),
    ("deepseek-v3-reference", 256, 8, {"n_group": 8, "topk_group": 4}),
    ("qwen3-moe", 128, 8, {}),
    ("mixtral", 8, 2, {}),
    ("gpt-oss", 128, 4, {}),
]


def _route_both(monkeypatch, contract, case, scores, renormalize):
    kwargs = dict(renormalize=renormalize, routed_scaling_factor=case.routed_scaling_factor, contract=contract, **case.group_args)
    new = oracle.route(scores, case.bias, case.topk, **kwargs)
    return new, _frozen_route(monkeypatch, scores, case.bias, case.topk, **kwargs)


@pytest.mark.parametrize("contract,experts,topk,groups", _ROUTE_CASES, ids=lambda v: str(v))
def test_route_matches_the_frozen_code_on_every_family(monkeypatch, contract, experts, topk, groups):
    c = oracle.get_contract(contract)
    chunk = _chunk_rows(experts)
    monkeypatch.setattr(_route, "_CHUNK_ELEMENTS_CPU", chunk * experts)  # both routes below cut here
    bulk_rows = max(1100, chunk + 40)  # at least two chunks
    options = admitted_fields(c.admitted_options())  # the plan's call options for this contract, and only those
    for family in families_for(c):
        for seed, rows, bulk in ((11, 1, False), (12, 33, False), (13, 257, False), (14, bulk_rows, True), (15, 96, True)):
            spec = CaseSpec(family, seed, rows, experts, topk, bulk=bulk, bias=c.has_bias, **groups, **options)
            case = build_case(spec)
            flipped = not case.renormalize if len(c.admitted_renormalize_values) == 2 else case.renormalize
            for scores, renormalize in ((case.scores, case.renormalize), (case.scores.to(torch.float16), flipped)):
                (w, ids), (w_old, ids_old) = _route_both(monkeypatch, contract, case, scores, renormalize)
                where = f"{spec.replay_id} {scores.dtype} renormalize={renormalize}"
                assert torch.equal(ids, ids_old), where
                assert _same_bits(w, w_old), where


# ------------------------------------------------------------------------------------------ the same on CUDA

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: the oracle's CUDA path runs on a GPU host")


@needs_cuda
@pytest.mark.parametrize("c", _SELECT_CONTRACTS, ids=lambda c: f"{c.name}-{c.nan_rule}-{c.floor}-{c.tie_rule}")
def test_selection_matches_the_frozen_code_on_cuda(c):
    """CUDA chunks are 65,536 rows: runs below, at and across one, hard and clean."""
    for experts, topk in ((896, 16), (384, 8), (256, 8), (8, 2)):
        priority = _route._priority_on(experts, c.tie_rule, torch.device("cuda"))
        for seed, (rows, hard_share) in enumerate([(33, 1.0), (5000, 0.5), (_route._CHUNK_ROWS_GPU + 70, 0.3), (3000, 0.0)]):
            values = _value_rows(seed, rows, experts, topk, hard_share).cuda()
            new, old = _route._select(values, topk, priority, c), frozen_oracle.select(values, topk, priority, c)
            assert new.dtype == old.dtype and torch.equal(new, old), (experts, seed, rows, hard_share)


@needs_cuda
@pytest.mark.parametrize("contract,experts,topk,groups", _ROUTE_CASES, ids=lambda v: str(v))
def test_route_matches_the_frozen_code_on_every_family_on_cuda(monkeypatch, contract, experts, topk, groups):
    c = oracle.get_contract(contract)
    options = admitted_fields(c.admitted_options())
    for family in families_for(c):
        for seed, rows, bulk in ((12, 33, False), (14, 4096, True)):
            spec = CaseSpec(family, seed, rows, experts, topk, bulk=bulk, bias=c.has_bias, **groups, **options)
            case = build_case(spec, device="cuda")
            (w, ids), (w_old, ids_old) = _route_both(monkeypatch, contract, case, case.scores.cuda(), case.renormalize)
            assert torch.equal(ids, ids_old), spec.replay_id
            assert _same_bits(w, w_old), spec.replay_id
