"""CPU tests of radix4 under the model contracts (kernels/radix4: LowestContract, docs/radix4_models.md).

The kernel template compiled for the host (tests/test_radix4_build.py's
emulation, the same build: its model instantiations are folded in) against a
plain per-row reference of each rule, built from the emulation's own score so
that only the selection, the groups and the weights are compared, bit for bit:

- ungrouped sigmoid + bias, lowest-index ties, NaN last, at every model shape
  and dtype pairing the build has, and contract aiter at a model shape;
- deepseek-v3's groups: top-2 sums (NaN lowest), kept groups by score then
  lower index, the rest masked to -inf (deepseek-v3-reference: to 0.0);
- sqrt(softplus(x)) scores (deepseek-v4), and the score itself against the
  oracle's float64 formula;
- the sum rules: sum + 1e-20, the raw sum, none.

Then the gates and the candidate: covered() says exactly the shapes the
entries serve, router() refuses what it does not implement in one line.
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess

import pytest
import torch

import kernels.radix4 as radix4
from test_radix4_build import CONTRACTS, emulated_route, emulated_sigmoid, reference

needs_gxx = pytest.mark.skipif(shutil.which("g++") is None, reason="g++ is not on PATH")


@pytest.fixture(scope="module")
def emulation(tmp_path_factory):
    from test_radix4_build import _build_emulation

    return _build_emulation(tmp_path_factory)


def emulated_score(lib, scores: torch.Tensor, sqrt_softplus: bool) -> torch.Tensor:
    x = scores.float().contiguous()
    out = torch.empty_like(x)
    lib.emu_score(4 if sqrt_softplus else 2, x.data_ptr(), out.data_ptr(), x.numel())
    return out


def _key(v: float) -> tuple:
    """Rank order of a ranking value: NaN below every number, -0 == +0."""
    return (0, 0.0) if math.isnan(v) else (1, v + 0.0)


def model_reference(lib, scores, bias, topk, rule, rs, *, sqrt_softplus=False, groups=None, mask=-math.inf):
    """The rule plainly, per row: rule 0 no renormalization, 1 / (sum + 1e-20), 2 / sum; groups (n, kept), the
    dropped groups' experts ranked ``mask``."""
    sig = emulated_score(lib, scores, sqrt_softplus)
    r = sig + bias.float()
    E = scores.shape[1]
    weights, ids = [], []
    for row in range(scores.shape[0]):
        values = [float(v) for v in r[row]]
        if groups is not None:
            n, kept_n = groups
            size = E // n
            score = []
            for g in range(n):
                top = sorted(values[g * size : (g + 1) * size], key=_key, reverse=True)[:2]
                total = torch.tensor(top[0], dtype=torch.float32) + torch.tensor(top[1], dtype=torch.float32)
                score.append(float(total))
            kept = sorted(range(n), key=lambda g: (_key(score[g]), -g), reverse=True)[:kept_n]
            values = [v if e // size in kept else mask for e, v in enumerate(values)]
        chosen = sorted(range(E), key=lambda e: (_key(values[e]), -e), reverse=True)[:topk]
        w = sig[row, chosen]
        total = torch.zeros((), dtype=torch.float32)
        for v in w:
            total = total + v  # in output order, fp32
        if rule == 1:
            w = w / (total + torch.tensor(1e-20, dtype=torch.float32))
        elif rule == 2:
            w = w / total
        weights.append(w * torch.tensor(rs, dtype=torch.float32))
        ids.append(chosen)
    return torch.stack(weights), torch.tensor(ids, dtype=torch.int32)


def assert_same(got, want, what):
    (w, ids), (rw, rids) = got, want
    bad = (ids != rids).any(1).nonzero().flatten().tolist()
    assert not bad, f"{what}: ids differ in rows {bad}; first {ids[bad[0]].tolist()} vs {rids[bad[0]].tolist()}"
    same = (w.view(torch.int32) == rw.view(torch.int32)) | (torch.isnan(w) & torch.isnan(rw))
    assert bool(same.all()), f"{what}: weight bits differ in rows {(~same).any(1).nonzero().flatten().tolist()}"


def _ungrouped_cases():
    g = torch.Generator().manual_seed(38)
    for E, K in ((256, 8), (160, 8), (128, 6), (384, 8), (256, 6), (384, 6), (896, 16)):
        yield f"{E}/{K} random bf16 / fp32 bias", (torch.randn(3, E, generator=g) * 2).bfloat16(), torch.randn(E, generator=g) * 0.05, K
        yield f"{E}/{K} random fp16 / fp32 bias", (torch.randn(2, E, generator=g) * 2).half(), torch.randn(E, generator=g) * 0.05, K
        yield f"{E}/{K} random fp32 / bf16 bias", torch.randn(2, E, generator=g) * 3, (torch.randn(E, generator=g) * 0.1).bfloat16(), K
        yield f"{E}/{K} all equal", torch.zeros(2, E, dtype=torch.bfloat16), torch.zeros(E), K
        levels = torch.tensor([-1.0, 0.0, 0.5, 1.0])[torch.randint(0, 4, (3, E), generator=g)]
        yield f"{E}/{K} four levels (wide ties)", levels.bfloat16(), torch.zeros(E), K
        nan = torch.randn(3, E, generator=g)
        nan[0] = float("nan")
        nan[1, 7:] = float("nan")
        nan[2, ::3] = float("nan")
        yield f"{E}/{K} NaN rows", nan, torch.randn(E, generator=g) * 0.05, K
        inf = torch.randn(2, E, generator=g)
        inf[:, ::5] = float("inf")
        inf[1] = float("-inf")
        yield f"{E}/{K} +-inf logits", inf, torch.where(torch.rand(E, generator=g) < 0.3, float("-inf"), 0.0), K


UNGROUPED = list(_ungrouped_cases())


@needs_gxx
@pytest.mark.parametrize("case", UNGROUPED, ids=[c[0] for c in UNGROUPED])
def test_lowest_contract_matches_the_plain_rule(emulation, case):
    _, scores, bias, topk = case
    for rule, rs in ((1, 2.5), (2, 1.0), (0, 2.827)):
        want = model_reference(emulation, scores, bias, topk, rule, rs)
        got = emulated_route(emulation, 32, scores, bias, topk, rule, rs, contract="lowest")
        assert_same(got, want, f"rule {rule}")
    if scores.dtype == torch.bfloat16 and bias.dtype == torch.float32:  # the other launches: wave64, two tokens a block
        want = model_reference(emulation, scores, bias, topk, 1, 2.5)
        blocks = ((32, 1), (64, 1)) if (scores.shape[1], topk) in radix4.MODEL_BATCH_SWITCH_POINTS else ()
        for lanes, block in ((64, 0), (32, 4), *blocks):  # and a block per token where the entry builds one
            assert_same(emulated_route(emulation, lanes, scores, bias, topk, 1, 2.5, block=block, contract="lowest"), want,
                        f"lanes {lanes}, block {block}")  # fmt: skip


@needs_gxx
@pytest.mark.parametrize("case", [c for c in UNGROUPED if c[0].startswith(("256/6", "384/6"))], ids=lambda c: c[0])
def test_sqrt_softplus_contract_matches_the_plain_rule(emulation, case):
    _, scores, bias, topk = case
    want = model_reference(emulation, scores, bias, topk, 1, 1.5, sqrt_softplus=True)
    assert_same(emulated_route(emulation, 32, scores, bias, topk, 1, 1.5, contract="sqrt_softplus"), want, "sqrt_softplus")
    if scores.dtype == torch.bfloat16 and bias.dtype == torch.float32:  # a block per token, as small batches launch
        got = emulated_route(emulation, 32, scores, bias, topk, 1, 1.5, block=1, contract="sqrt_softplus")
        assert_same(got, want, "sqrt_softplus, a block per token")


@needs_gxx
def test_sqrt_softplus_score_is_the_oracles_float64_formula(emulation):
    from oracle._scores import sqrt_softplus_rows

    g = torch.Generator().manual_seed(6)
    x = torch.cat([torch.randn(20000, generator=g) * 4, torch.randn(2000, generator=g) * 60,
                   torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 88.0, -88.0, -150.0, 1e-30, -1e-30])])  # fmt: skip
    got = emulated_score(emulation, x.view(1, -1), True).view(-1)
    want = sqrt_softplus_rows(x.view(1, -1)).view(-1)
    same = (got.view(torch.int32) == want.view(torch.int32)) | (torch.isnan(got) & torch.isnan(want))
    assert bool(same.all()), f"{int((~same).sum())} scores differ, first at x={x[~same][0].item()!r}"


@needs_gxx
def test_model_sigmoid_is_the_oracles_correctly_rounded_one(emulation):
    from oracle._scores import sigmoid_of

    g = torch.Generator().manual_seed(7)
    x = torch.cat([torch.randn(20000, generator=g) * 6, torch.linspace(-110.0, 30.0, 4001),
                   torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), -88.72283935546875, -88.7228469848632])])  # fmt: skip
    got = emulated_score(emulation, x.view(1, -1), False).view(-1)
    want = sigmoid_of(x.view(1, -1), "correctly_rounded").view(-1)
    same = (got.view(torch.int32) == want.view(torch.int32)) | (torch.isnan(got) & torch.isnan(want))
    assert bool(same.all()), f"{int((~same).sum())} sigmoids differ, first at x={x[~same][0].item()!r}"


@needs_gxx
def test_aiter_contract_at_a_model_shape_keeps_aiters_ties(emulation):
    g = torch.Generator().manual_seed(4)
    for scores, bias in (((torch.randn(3, 256, generator=g) * 2).bfloat16(), torch.randn(256, generator=g) * 0.05),
                         (torch.zeros(2, 256, dtype=torch.bfloat16), torch.zeros(256))):  # fmt: skip
        got = emulated_route(emulation, 32, scores, bias, 8, True, 2.5, contract="aiter")
        want = reference(emulation, scores, bias, 8, True, 2.5)
        assert_same(got, want, "aiter 256/8")


def _grouped_cases():
    g = torch.Generator().manual_seed(3)
    E = 256
    yield "random", (torch.randn(4, E, generator=g) * 2).bfloat16(), torch.randn(E, generator=g) * 0.05
    yield "fp16 / fp32 bias", (torch.randn(2, E, generator=g) * 2).half(), torch.randn(E, generator=g) * 0.1
    yield "all equal", torch.zeros(2, E), torch.zeros(E)
    # Every group the same two best values: the kept groups are the four lowest, by the group tie rule.
    tied = torch.full((2, E), -3.0)
    tied[:, 5::32] = 2.0
    tied[:, 9::32] = 1.0
    tied[1, 200] = 4.0  # one group above the rest
    yield "group score ties", tied.bfloat16(), torch.zeros(E)
    # The best expert sits in a group whose second is poor: its group is dropped though it holds the max.
    split = torch.randn(2, E, generator=g) * 0.1
    split[:, 3] = 8.0
    split[:, 32:36] = 3.0
    split[:, 64:68] = 3.0
    split[:, 96:100] = 3.0
    split[:, 128:132] = 3.0
    yield "the max expert's group dropped", split, torch.zeros(E)
    nan = torch.randn(4, E, generator=g)
    nan[0, :31] = float("nan")  # group 0: one number left, its score is NaN
    nan[1, 32:64] = float("nan")  # group 1 all NaN
    nan[2] = float("nan")
    nan[3, ::2] = float("nan")
    yield "NaN in groups", nan, torch.randn(E, generator=g) * 0.05
    yield "-inf bias masks", torch.randn(2, E, generator=g), torch.where(torch.rand(E, generator=g) < 0.6, float("-inf"), 0.0)
    # Ranking values below 0.0 in the kept groups: under the 0.0 mask the dropped groups' experts outrank them.
    # Groups 0-3 kept (one expert near 1.0 each, the rest at -0.4975), groups 4-7 dropped (every value -0.1975):
    # the -inf mask fills the last four slots from the kept groups' negatives, the 0.0 mask from the dropped groups.
    below = torch.full((2, E), -6.0)
    below[:, 0:128:32] = 6.0
    below_bias = torch.cat([torch.full((128,), -0.5), torch.full((128,), -0.2)])
    below_bias[0:128:32] = 0.0
    yield "kept groups below zero", below, below_bias
    yield "every value below zero", torch.randn(2, E, generator=g), torch.full((E,), -1.5)


GROUPED = list(_grouped_cases())


MASKS = {"grouped": -math.inf, "grouped_zero": 0.0}  # deepseek-v3, deepseek-v3-reference


@needs_gxx
@pytest.mark.parametrize("entry", list(MASKS))
@pytest.mark.parametrize("case", GROUPED, ids=[c[0] for c in GROUPED])
def test_grouped_contract_matches_the_plain_rule(emulation, case, entry):
    _, scores, bias = case
    want = model_reference(emulation, scores, bias, 8, 1, 2.5, groups=(8, 4), mask=MASKS[entry])
    assert_same(emulated_route(emulation, 32, scores, bias, 8, 1, 2.5, contract=entry), want, "warp32")
    if scores.dtype == torch.bfloat16 and bias.dtype == torch.float32:
        assert_same(emulated_route(emulation, 64, scores, bias, 8, 1, 2.5, contract=entry), want, "wave64")
        # a block per token (small batches): two warps, the group scores exchanged through shared memory
        assert_same(emulated_route(emulation, 32, scores, bias, 8, 1, 2.5, block=1, contract=entry), want, "block per token")


def test_the_masks_differ_where_the_kept_values_fall_below_zero(emulation):
    """The 0.0-mask case above is not vacuous: there the two contracts choose different experts."""
    _, scores, bias = next(c for c in GROUPED if c[0] == "kept groups below zero")
    a = model_reference(emulation, scores[:1], bias, 8, 1, 2.5, groups=(8, 4), mask=-math.inf)[1]
    b = model_reference(emulation, scores[:1], bias, 8, 1, 2.5, groups=(8, 4), mask=0.0)[1]
    assert not torch.equal(a, b)


@needs_gxx
@pytest.mark.parametrize(("entry", "contract"), [("grouped", "deepseek-v3"), ("grouped_zero", "deepseek-v3-reference")])
def test_grouped_random_rows_agree_with_the_oracle(emulation, entry, contract):
    import oracle

    g = torch.Generator().manual_seed(11)
    cases = [((torch.randn(24, 256, generator=g) * 2).bfloat16(), torch.randn(256, generator=g) * 0.05)]
    cases += [(c[1].float(), c[2]) for c in GROUPED if c[0] in ("kept groups below zero", "every value below zero")]
    for scores, bias in cases:  # random rows, then rows where the two masks choose differently
        w, ids = emulated_route(emulation, 32, scores, bias, 8, 1, 2.5, contract=entry)
        ow, oids = oracle.route(scores, bias, 8, renormalize=True, routed_scaling_factor=2.5, contract=contract)
        assert torch.equal(ids, oids)
        torch.testing.assert_close(w, ow, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- gates and the candidate


def test_covered_says_exactly_the_served_shapes():
    basics = dict(rows=4096, dtype=torch.bfloat16, bias_dtype=torch.float32)
    for e, k in radix4.SHAPES:
        assert radix4.covered(experts=e, topk=k, **basics)
    for e, k in ((256, 7), (512, 8), (64, 8), (160, 6)):  # the generic path's, under the model contracts only
        assert not radix4.covered(experts=e, topk=k, contract="aiter", **basics)
        assert radix4.covered(experts=e, topk=k, contract="kimi-k2", **basics)
    for e, k in ((4, 2), (2048, 8), (256, 17)):
        assert not radix4.covered(experts=e, topk=k, **basics)
    assert radix4.covered(experts=256, topk=8, num_expert_group=8, topk_group=4, **basics)
    assert not radix4.covered(experts=256, topk=8, num_expert_group=8, topk_group=3, **basics)
    assert not radix4.covered(experts=384, topk=8, num_expert_group=8, topk_group=4, **basics)
    assert radix4.covered(experts=256, topk=8, rows=1, dtype=torch.float16, bias_dtype=torch.float16)
    assert not radix4.covered(experts=256, topk=8, rows=4097, dtype=torch.float16, bias_dtype=torch.float32)
    assert not radix4.covered(experts=256, topk=8, rows=1, dtype=torch.float64, bias_dtype=torch.float32)


def test_router_refuses_what_it_does_not_implement_in_one_line():
    with pytest.raises(ValueError, match="contract='qwen3-moe' is not one radix4 implements"):
        radix4.router("qwen3-moe")
    route = radix4.router("glm4-moe")
    x = torch.zeros(2, 160)
    with pytest.raises(ValueError, match="routes contract glm4-moe ungrouped"):
        route(x, torch.zeros(160), 8, True, 2.5, num_expert_group=8, topk_group=4)
    with pytest.raises(ValueError, match="built for contract deepseek-v3's"):
        radix4.router("deepseek-v3")(torch.zeros(2, 256), torch.zeros(256), 8, True, 2.5, num_expert_group=4, topk_group=2)
    with pytest.raises(ValueError, match=r"\(E, topk\)=\(160, 8\) is not supported"):
        radix4.router("deepseek-v3")(x, torch.zeros(160), 8, True, 2.5)


def test_every_rule_names_an_entry_and_the_candidate_serves_them():
    from contracts.candidates import get_candidate

    for name, rule in radix4.MODEL_RULES.items():
        assert rule.entry in radix4.CONTRACTS and rule.entry != "serial", name
        assert rule.entry in CONTRACTS or rule.entry == "lowest", name
    for cand in ("radix4", "radix4-pdl"):
        c = get_candidate(cand)
        assert set(c.contracts) == set(radix4.MODEL_RULES) and c.contract == "aiter"
        assert callable(c.route_under("deepseek-v3"))
    assert not get_candidate("radix4-serial").covers(rows=1, experts=256, topk=8, dtype=torch.bfloat16, bias_dtype=torch.float32)


def _fast_scores(lib, x: torch.Tensor, sqrt_softplus: bool) -> tuple[torch.Tensor, torch.Tensor]:
    x = x.float().contiguous()
    out, sure = torch.empty_like(x), torch.empty(x.shape, dtype=torch.uint8)
    lib.emu_fast_score(int(sqrt_softplus), x.data_ptr(), out.data_ptr(), sure.data_ptr(), x.numel())
    return out, sure.bool()


def _libm_scores(lib, x: torch.Tensor, sqrt_softplus: bool) -> torch.Tensor:
    x = x.float().contiguous()
    out = torch.empty_like(x)
    lib.emu_score(14 if sqrt_softplus else 12, x.data_ptr(), out.data_ptr(), x.numel())
    return out


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a.view(torch.int32) == b.view(torch.int32)) | (torch.isnan(a) & torch.isnan(b))


@needs_gxx
@pytest.mark.parametrize("sqrt_softplus", [False, True], ids=["sigmoid", "sqrt_softplus"])
def test_fast_float64_scores_decide_nearly_every_value_and_only_rightly(emulation, sqrt_softplus):
    """radix4_router.h's fast64 forms: where they say sure, libm's bits; elsewhere the kernel asks libm.

    Every float between the fast ranges' edges (both sides of -87, 38 and 87) and random values over the whole
    range: a sure value that differs from libm's form would be a wrong score the kernel keeps."""
    g = torch.Generator().manual_seed(11)
    edges = [torch.arange(torch.tensor(v).view(torch.int32) - 20000, torch.tensor(v).view(torch.int32) + 20000,
                          dtype=torch.int32).view(torch.float32) for v in (-87.0, 38.0, 87.0, -88.75, 1.0, 0.25)]  # fmt: skip
    x = torch.cat([torch.randn(100000, generator=g) * 8, torch.rand(50000, generator=g) * 180 - 90, *edges,
                   torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-30, -1e-30, 3e38, -3e38])])  # fmt: skip
    fast, sure = _fast_scores(emulation, x, sqrt_softplus)
    libm = _libm_scores(emulation, x, sqrt_softplus)
    wrong = sure & ~_bits_equal(fast, libm)
    assert not bool(wrong.any()), f"{int(wrong.sum())} sure values differ from libm's, first at x={x[wrong][0].item()!r}"
    # the sigmoid's tails are decided too (constants), all but NaN and (-88.75, -87]
    inside = ~((x > -88.75) & (x <= -87.0)) & ~x.isnan() if not sqrt_softplus else (x >= -87.0) & (x <= 87.0)
    assert not bool((sure & ~inside).any()), "a value outside the fast range was called sure"
    undecided = int((inside & ~sure).sum())
    assert undecided <= 4, f"{undecided} of {int(inside.sum())} values in range were left to libm (about 1 in 2^17 expected)"
    kernel = emulated_score(emulation, x.view(1, -1), sqrt_softplus).view(-1)
    assert bool(_bits_equal(kernel, libm).all()), "the kernel's score (fast form, libm where unsure) is not libm's"


def test_each_contract_routes_through_its_own_entry_of_the_shared_library(tmp_path, monkeypatch):
    """aiter, lowest, grouped and grouped_zero are entries of one shared object, which the loader hands out once.

    A stand-in library whose entries return their own codes, loaded for every contract in turn: routing under one
    contract after another must still reach its own entry (once, every contract's view shared the last one set,
    so a process that routed under aiter and then kimi-k2 ran the aiter kernel for both)."""
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not on PATH")
    codes = {"radix4_route": 100, "radix4_lowest_route": 101, "radix4_grouped_route": 102, "radix4_grouped_zero_route": 103}
    src = tmp_path / "standin.c"
    src.write_text("".join(f"int {name}(void) {{ return {code}; }}\n" for name, code in codes.items())
                   + 'const char* radix4_status_string(int s) { return "standin"; }\n'
                   + 'const char* radix4_runtime_error_string(void) { return ""; }\n')  # fmt: skip
    so = tmp_path / "standin.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(so), str(src)], check=True)
    monkeypatch.setattr(radix4, "_device_arch", lambda: ("cuda", "sm_90"))
    monkeypatch.setattr(radix4, "build", lambda **kw: so)
    monkeypatch.setattr(radix4, "_libraries", {})
    args = (None, 0, 0, None, 0, 0, 0, 0, 0, 0.0, None, None, None)
    order = ["aiter", "lowest", "grouped", "aiter", "grouped_zero", "lowest", "grouped", "aiter"]
    got = [radix4.library(contract=c).route(*args) for c in order]
    assert got == [codes[radix4.CONTRACTS[c][2]] for c in order]
    assert radix4.library(contract="lowest").radix4_status_string(1) == b"standin"


def _cutoff_rows():
    """Rows where aiter's fp32 sigmoid and the correctly rounded one choose different experts at the cutoff."""
    g = torch.Generator().manual_seed(52)
    # One value a lane (experts 4l are lane l's first), rising by about an ulp of the sigmoid: the k-th largest lane
    # maximum is the cutoff itself.
    lanes = torch.full((64, 256), -6.0)
    steps = torch.rand(64, 32, generator=g) * 5e-7 + 1e-7
    lanes[:, 0:128:4] = torch.rand(64, 1, generator=g) * 1.5 + 0.5 + steps.cumsum(1)
    yield "one value a lane at the cutoff", lanes, torch.zeros(256)
    # The same with a bias of about an ulp on every expert.
    yield "the same with a bias of an ulp", lanes, torch.randn(256, generator=g) * 1e-7


CUTOFF = list(_cutoff_rows())


@needs_gxx
@pytest.mark.parametrize("sqrt_softplus", [False, True], ids=["sigmoid", "sqrt_softplus"])
@pytest.mark.parametrize("case", CUTOFF, ids=[c[0] for c in CUTOFF])
def test_model_scores_choose_by_the_float64_score_at_the_cutoff(emulation, case, sqrt_softplus):
    """Ids and weight bits of the plain rule on the float64 scores, on rows where an fp32 score chooses otherwise
    (checked first, so the rows are not vacuous): a kernel that ranked by a cheaper score would fail here."""
    _, scores, bias = case
    def chosen(v):  # the top 8, ties to the lower index
        return torch.sort(v, dim=1, descending=True, stable=True).indices[:, :8].sort(dim=1).values

    if not sqrt_softplus:
        assert not torch.equal(chosen(emulated_sigmoid(emulation, scores) + bias), chosen(emulated_score(emulation, scores, False) + bias))
    contract = "sqrt_softplus" if sqrt_softplus else "lowest"
    want = model_reference(emulation, scores, bias, 8, 1, 2.5, sqrt_softplus=sqrt_softplus)
    assert_same(emulated_route(emulation, 32, scores, bias, 8, 1, 2.5, contract=contract), want, "warp32")


def _score_paths(lib) -> tuple[int, int]:
    out = (ctypes.c_long * 2)()
    lib.emu_score_path_counts(out)
    return out[0], out[1]  # lanes: two-phase, every value in float64


def _two_phase_rows():
    """Rows for the two-phase scores: (name, scores, bias, topk, expects two phases)."""
    g = torch.Generator().manual_seed(52)
    for E, K in ((256, 8), (384, 8), (128, 6), (160, 8), (256, 6)):
        yield f"{E}/{K} random", torch.randn(4, E, generator=g) * 3, torch.randn(E, generator=g) * 0.05, K, True
    # A cluster at the cutoff a few ulp apart, where aiter's fp32 sigmoid and the correctly rounded one order
    # differently: every cluster value needs its float64 score, and the two phases must take exactly those.
    base = torch.full((3, 256), -6.0)
    ulps = torch.arange(64, dtype=torch.float32) * 3e-7
    base[:, 64:128] = 1.0 + ulps.roll(17)
    yield "256/8 a cluster of near ties", base, torch.zeros(256), 8, True
    # A bias that reorders the cluster by less than the approximation's error.
    yield "256/8 the cluster with a bias of an ulp", base, (torch.randn(256, generator=g) * 1e-7), 8, True
    # One value a lane (experts 4l are lane l's first), rising by about an ulp of the sigmoid: the k-th largest
    # lane maximum is the cutoff itself, and fp32's ties and swaps there pick another set unless the values within
    # the approximation's error of it are scored in float64 too.
    lanes = torch.full((64, 256), -6.0)
    steps = torch.rand(64, 32, generator=g) * 5e-7 + 1e-7
    lanes[:, 0:128:4] = torch.rand(64, 1, generator=g) * 1.5 + 0.5 + steps.cumsum(1)
    yield "256/8 one value a lane at the cutoff", lanes, torch.zeros(256), 8, True
    # Saturated values (|x| > 87 always takes the float64 score) and large biases.
    sat = (torch.randn(2, 256, generator=g) * 60).round()
    yield "256/8 saturated", sat, torch.randn(256, generator=g) * 8, 8, None  # sigmoids below 2^-124: every value
    # Four levels: 64 equal values a level, more than four a lane at the top for 128/6 (wave of 32: 4 a lane).
    levels = torch.tensor([-1.0, 0.0, 0.5, 1.0])[torch.randint(0, 4, (2, 128), generator=g)]
    yield "128/6 four levels", levels, torch.zeros(128), 6, None
    yield "256/8 all equal", torch.zeros(2, 256), torch.zeros(256), 8, None  # 256 at the cutoff: every value (wave32)


TWO_PHASE = list(_two_phase_rows())


@needs_gxx
@pytest.mark.parametrize("sqrt_softplus", [False, True], ids=["sigmoid", "sqrt_softplus"])
@pytest.mark.parametrize("case", TWO_PHASE, ids=[c[0] for c in TWO_PHASE])
def test_two_phase_scores_route_as_every_value_in_float64(emulation, case, sqrt_softplus):
    """The ungrouped model contracts score only the values near the cutoff in float64 (Slice::two_phase_keys);
    ids and weight bits must be those of the plain rule on float64 scores for every value, and the path taken
    must be the one the row calls for (two phases unless too many values sit at the cutoff)."""
    name, scores, bias, topk, two_phase = case
    contract = "sqrt_softplus" if sqrt_softplus else "lowest"
    if name == "256/8 one value a lane at the cutoff" and not sqrt_softplus:  # not vacuous: fp32 picks other sets
        def chosen(v):  # the top k, ties to the lower index
            return torch.sort(v, dim=1, descending=True, stable=True).indices[:, :topk].sort(dim=1).values

        approx, exact = chosen(emulated_sigmoid(emulation, scores)), chosen(emulated_score(emulation, scores, False))
        assert not torch.equal(approx, exact)
    _score_paths(emulation)
    for lanes, x in ((32, scores), (64, scores.bfloat16())):  # the wave64 build takes bf16 logits at the model shapes
        want = model_reference(emulation, x, bias, topk, 1, 2.5, sqrt_softplus=sqrt_softplus)
        assert_same(emulated_route(emulation, lanes, x, bias, topk, 1, 2.5, contract=contract), want, f"{lanes} lanes")
    phased, every = _score_paths(emulation)
    if not sqrt_softplus:  # the float64 sigmoid scores every value (kTwoPhase)
        assert phased == 0, phased
    elif two_phase is True:
        assert phased > 0 and every == 0, (phased, every)
    elif two_phase is False:
        assert every > 0 and phased == 0, (phased, every)
