"""CPU tests of radix4's generic path: any E in 8..1024 and topk in 1..min(16, E) under the ungrouped model
contracts (radix4_entry.h's dispatch_generic; Shape's kDynamic in radix4_router.h).

The kernel template compiled for the host (tests/test_radix4_build.py's emulation, the same build) at the
bounds the entry builds, 128 / 256 / 512 / 1024 experts for CUDA's warp32 and 256 / 512 / 1024 for HIP's
wave64, routing fewer experts than its bound: the experts past E are phantoms that must never be chosen,
never counted and never read past the row. Each case is compared bit for bit with a plain per-row rule
built from the emulation's own score (tests/test_radix4_models.py's model_reference), so that the
selection, the ties, NaN and the weights are what is tested, then with the oracle itself.

Shapes: every bound's edges (a bound exactly, one past the bound below, E not a multiple of 4, k = E,
k = 1 and k = 16), and the released models the fixed shapes leave out (Llama-4-style 16 / 1, GLM-4.5-Air
128 / 8, MiniMax-M2-like 256 / 8 stays on its own kernel, 72 / 6, 1000 / 10).
"""

from __future__ import annotations

import shutil

import pytest
import torch

import kernels.radix4 as radix4
from test_radix4_build import CODES, _build_emulation
from test_radix4_models import assert_same, model_reference

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")


@pytest.fixture(scope="module")
def emulation(tmp_path_factory):
    return _build_emulation(tmp_path_factory)


def generic_route(lib, lanes, scores, bias, topk, rule, rs, *, sqrt_softplus=False, block=0):
    """The emulated generic kernel; ``rule``: 0 no renormalization, 1 / (sum + 1e-20), 2 / the raw sum."""
    M, E = scores.shape
    weights = torch.full((M, topk), 12345.0, dtype=torch.float32)  # poisoned: every slot must be written
    ids = torch.full((M, topk), -7, dtype=torch.int32)
    rc = lib.emu_route_generic(4 if sqrt_softplus else 2, lanes, block, scores.data_ptr(), CODES[scores.dtype],
                               scores.stride(0), bias.data_ptr(), CODES[bias.dtype], M, E, topk, rule, rs,
                               weights.data_ptr(), ids.data_ptr())  # fmt: skip
    assert rc == 0, f"emu_route_generic returned {rc}"
    return weights, ids


def _rows(g, M, E, kind):
    x = torch.randn(M, E, generator=g) * 2
    if kind == "ties":  # four levels: wide tie pools, the priority rounds
        x = torch.tensor([-1.0, 0.0, 0.5, 1.0])[torch.randint(0, 4, (M, E), generator=g)]
    elif kind == "nan":  # a NaN row, a row NaN past expert 5, every third NaN: NaN experts fill the slots last
        x[0] = float("nan")
        x[1 % M, 5:] = float("nan")
        x[2 % M, ::3] = float("nan")
    elif kind == "equal":
        x = torch.zeros(M, E)
    elif kind == "last largest":  # a phantom reloads the last vector or expert: counted, it would win beside them
        x[:, -4:] = torch.tensor([7.0, 8.0, 9.0, 10.0])[-min(4, E):]
    return x


# (E, topk): the bounds' edges on both lane widths, E % 4 != 0, k = E, k = 1, k = 16, and model shapes
SHAPES = [(8, 8), (8, 1), (13, 5), (16, 1), (72, 6), (127, 16), (128, 8), (129, 3), (250, 6), (256, 16), (257, 8),
          (384, 16), (511, 11), (513, 2), (1000, 10), (1024, 16)]  # fmt: skip


@needs_gxx
@pytest.mark.parametrize(("E", "K"), SHAPES, ids=[f"{e}/{k}" for e, k in SHAPES])
def test_generic_path_matches_the_plain_rule(emulation, E, K):
    g = torch.Generator().manual_seed(E * 31 + K)
    bias = torch.randn(E, generator=g) * 0.05
    for kind in ("random", "ties", "nan", "equal", "last largest"):
        scores = _rows(g, 3, E, kind).bfloat16()
        if kind == "last largest":  # and their bias: the bias decides the order of sigmoids near 1
            bias = bias.clone()
            bias[-4:] += 1.0
        for rule, rs in ((1, 2.5), (2, 1.0), (0, 2.827)):
            want = model_reference(emulation, scores, bias, K, rule, rs)
            assert_same(generic_route(emulation, 32, scores, bias, K, rule, rs), want, f"{kind}, rule {rule}")
        want = model_reference(emulation, scores, bias, K, 1, 2.5)
        for lanes, block in ((64, 0), (32, 4)):  # wave64's bounds; two tokens a block
            assert_same(generic_route(emulation, lanes, scores, bias, K, 1, 2.5, block=block), want,
                        f"{kind}, lanes {lanes}, block {block}")  # fmt: skip


@needs_gxx
@pytest.mark.parametrize(("E", "K"), [(72, 6), (130, 8), (1000, 10)], ids=["72/6", "130/8", "1000/10"])
def test_generic_path_reads_only_the_row(emulation, E, K):
    """Strided rows whose next row begins right after E (scalar loads when the row is misaligned or E % 4 != 0),
    fp32 / fp16 logits with an fp32 / bf16 bias, and sqrt(softplus(x)) scores: the phantoms' loads repeat the
    token's last expert, so poison past E in each row changes nothing."""
    g = torch.Generator().manual_seed(E)
    bias = torch.randn(E, generator=g) * 0.05
    clean = torch.randn(4, E + 3, generator=g) * 2
    for start in (0, 1):  # aligned rows, then rows starting one element in
        poisoned = clean.clone()
        outside = torch.ones(E + 3, dtype=torch.bool)
        outside[start : start + E] = False
        poisoned[:, outside] = float("nan")  # what a load past either end of a row would read
        scores = poisoned[:, start : start + E]
        want = model_reference(emulation, clean[:, start : start + E], bias, K, 1, 2.5)
        assert_same(generic_route(emulation, 32, scores, bias, K, 1, 2.5), want, f"rows from column {start}")
    x = torch.randn(5, E, generator=g) * 3
    for scores, b in ((x, bias), (x.half(), bias.bfloat16())):
        for sqrt_softplus in (False, True):
            want = model_reference(emulation, scores, b, K, 2, 1.5, sqrt_softplus=sqrt_softplus)
            assert_same(generic_route(emulation, 32, scores, b, K, 2, 1.5, sqrt_softplus=sqrt_softplus), want,
                        f"{scores.dtype} / {b.dtype}, sqrt_softplus {sqrt_softplus}")  # fmt: skip


@needs_gxx
@pytest.mark.parametrize(("contract", "E", "K"), [("glm4-moe", 128, 8), ("deepseek-v4", 160, 6), ("minimax-m2", 100, 4)])
def test_generic_path_agrees_with_the_oracle(emulation, contract, E, K):
    import oracle

    rule = radix4.MODEL_RULES[contract]
    g = torch.Generator().manual_seed(7)
    scores, bias = (torch.randn(64, E, generator=g) * 2).bfloat16(), torch.randn(E, generator=g) * 0.05
    c = oracle.get_contract(contract)
    rs = float(c.routed_scaling_factor) if c.routed_scaling_factor else 1.0
    w, ids = generic_route(emulation, 32, scores, bias, K, 2 if rule.raw_sum else 1, rs, sqrt_softplus=rule.sqrt_softplus)
    ow, oids = oracle.route(scores, bias, K, renormalize=True, routed_scaling_factor=rs, contract=contract)
    assert torch.equal(ids, oids)
    torch.testing.assert_close(w, ow, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- gates


def test_covered_serves_the_generic_shapes_under_the_model_contracts_only():
    basics = dict(rows=64, dtype=torch.bfloat16, bias_dtype=torch.float32)
    for e, k in ((8, 1), (16, 1), (72, 6), (128, 8), (1000, 10), (1024, 16)):
        assert radix4.covered(experts=e, topk=k, contract="glm4-moe", **basics)
        assert radix4.covered(experts=e, topk=k, contract="deepseek-v4", **basics)
        assert radix4.covered(experts=e, topk=k, **basics)  # the union
        assert not radix4.covered(experts=e, topk=k, contract="aiter", **basics)  # aiter's tie table is per E
        assert not radix4.covered(experts=e, topk=k, contract="deepseek-v3", **basics)
    for e, k in ((7, 4), (1025, 8), (64, 17), (8, 9)):
        assert not radix4.covered(experts=e, topk=k, **basics)
    assert radix4.covered(experts=896, topk=16, contract="aiter", **basics)
    assert not radix4.covered(experts=128, topk=8, contract="qwen3-moe", **basics)
    assert not radix4.covered(experts=128, topk=8, contract="my.toml", **basics)


def test_the_candidates_gate_is_told_the_contract():
    from contracts.candidates import get_candidate

    shape = dict(rows=64, experts=128, topk=8, dtype=torch.bfloat16, bias_dtype=torch.float32, renormalize=True)
    for name in ("radix4", "radix4-pdl", "radix4@M<64"):
        c = get_candidate(name)
        assert c.covers(contract="glm4-moe", **shape), name
        assert not c.covers(contract="aiter", **shape), name
    assert get_candidate("radix4").covers(contract="aiter", **{**shape, "experts": 896, "topk": 16})


def test_route_refuses_a_shape_outside_the_entry_in_one_line():
    x = torch.zeros(2, 72)
    with pytest.raises(ValueError, match=r"\(E, topk\)=\(72, 6\) is not supported; radix4 takes .*E=896"):
        radix4.router("aiter")(x, torch.zeros(72), 6, True, 1.0)
    with pytest.raises(ValueError, match=r"\(E, topk\)=\(72, 17\) is not supported; .*any E in 8..1024"):
        radix4.router("glm4-moe")(x, torch.zeros(72), 17, True, 1.0)
