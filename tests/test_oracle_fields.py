"""The field-driven oracle equals a plain per-row reference of the contract fields.

``reference_row`` is written from the field definitions (docs/contracts_as_data.md),
independently of the vectorized oracle: Python loops over one row, math
and numpy float32 scalars, its own sigmoid, softmax and bf16 rounding. The
property tests draw whole contracts at random (every enumerated field from
its allowed values, groups, floors) and compare ids exactly and weights bit
for bit; the named tests pin the cases the contracts exist for: grouped
routing with ties between group scores at the cutoff, negative biases that
make the 0.0 and -inf masks disagree, NaN and -inf in groups, softmax rows
with NaN, bf16 logits.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

import oracle

from reference import aiter_priority

F32 = np.float32


# ---------------------------------------------------------------- the plain reference


def _bf16(v) -> np.float32:
    """Round an fp32 value to bf16 (round to nearest even), kept as an fp32 value."""
    v = F32(v)
    if math.isnan(v):
        return v
    u = int(np.array(v, dtype=np.float32).view(np.uint32))
    u = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000) & 0xFFFFFFFF
    return np.array(u, dtype=np.uint32).view(np.float32)[()]


def _sigmoid(x: float, formula: str) -> np.float32:
    try:
        e = math.exp(-x)
    except OverflowError:
        e = math.inf
    with np.errstate(over="ignore"):
        e32 = F32(e)
    if formula == "expf":
        return F32(F32(1) / (F32(1) + e32))
    if math.isinf(e32):  # exp(-x) overflows fp32: every fp32 formula gives 0
        return F32(0)
    return F32(1.0 / (1.0 + e))


def _softmax(xs: list[float]) -> list[np.float32]:
    if any(math.isnan(x) for x in xs):
        return [F32(math.nan)] * len(xs)
    top = max(xs)
    shifted = [x - top if not (math.isinf(x) and x == top) else math.nan for x in xs]
    if math.isinf(top) and top < 0:  # only -inf: -inf - -inf is NaN
        shifted = [math.nan] * len(xs)
    e = [math.exp(d) if not math.isnan(d) else math.nan for d in shifted]
    total = math.fsum(e)
    return [F32(v / total) for v in e]


def _rank(v, nan_rule: str) -> tuple:
    """Sort key, larger is better: NaN above every number for 'first', below for 'last' and 'never'."""
    if math.isnan(v):
        return (2, 0.0) if nan_rule == "first" else (0, 0.0)
    return (1, float(v))


def _best_first(items, value, priority, nan_rule):
    def key(i):
        cls, v = _rank(value(i), nan_rule)
        return (-cls, -v, priority(i))

    return sorted(items, key=key)


def reference_row(c, x, bias, topk, n_group, topk_group, renormalize, rsf, bf16_logits, bf16_bias):
    """(weights, ids) of one row under contract ``c``; ``x`` and ``bias`` are lists of floats.

    ``score_precision="input"`` with bf16 logits: the scores are rounded to
    bf16; the ranking add and the group scores too when the bias is bf16 (or
    there is none), as bf16 + bf16 stays bf16 in torch and bf16 + fp32 is fp32.
    """
    with np.errstate(all="ignore"):  # inf - inf, 0 / 0: IEEE results wanted, not warnings
        return _reference_row(c, x, bias, topk, n_group, topk_group, renormalize, rsf, bf16_logits, bf16_bias)


def _reference_row(c, x, bias, topk, n_group, topk_group, renormalize, rsf, bf16_logits, bf16_bias):
    experts = len(x)
    low = c.score_precision == "input" and bf16_logits
    low_ranking = low and (bf16_bias or c.bias == "none")
    if c.scoring == "sigmoid":
        s = [_sigmoid(v, c.sigmoid_formula) for v in x]
    elif c.scoring == "softmax":
        s = _softmax(x)
    elif c.scoring == "sqrt_softplus":
        s = [F32(math.sqrt(max(v, 0.0) + math.log1p(math.exp(-abs(v))))) if not math.isnan(v) else F32(v) for v in x]
    elif c.scoring == "softcap_sigmoid":
        s = [_sigmoid(float(F32(math.tanh(v / c.softcap) * c.softcap)), c.sigmoid_formula) for v in x]
    else:  # softmax_of_topk, sigmoid_of_topk: the logits rank
        s = [F32(v) for v in x]
    if low:
        s = [_bf16(v) for v in s]
    r = list(s)
    if c.bias != "none":
        if low_ranking:
            r = [_bf16(F32(v + F32(b))) for v, b in zip(s, bias)]
        else:
            r = [F32(v + F32(b)) for v, b in zip(s, bias)]

    selection = list(r)
    if n_group > 1:
        size = experts // n_group
        take = {"top2_sum": 2, "max": 1, "topk_share_sum": topk // topk_group}[c.group_score]
        scores = []
        for g in range(n_group):
            members = _best_first(range(g * size, (g + 1) * size), lambda e: r[e], lambda e: 0, c.nan_rule)[:take]
            score = r[members[0]]
            for m in members[1:]:  # fp32, from the largest down
                score = F32(score + r[m])
            scores.append(_bf16(score) if low_ranking else score)
        group_priority = (lambda g: g) if c.group_tie_rule == "lowest" else (lambda g: n_group - 1 - g)
        kept = set(_best_first(range(n_group), lambda g: scores[g], group_priority, c.nan_rule)[:topk_group])
        selection = [r[e] if e // size in kept else F32(c.group_mask) for e in range(experts)]

    prio = aiter_priority(experts) if c.tie_rule == "aiter" else list(range(experts))

    def eligible(e):
        v = selection[e]
        if math.isnan(v):
            return c.nan_rule != "never"
        return c.floor is None or v > F32(c.floor)

    ids = _best_first([e for e in range(experts) if eligible(e)], lambda e: selection[e], lambda e: prio[e], c.nan_rule)[:topk]
    ids += [0] * (topk - len(ids))  # the expert-0 fallback (only contracts with a floor or NaN never get here)

    w = [(r if c.bias == "in_weight" else s)[e] for e in ids]
    if c.scoring == "softmax_of_topk":
        w = _softmax([float(v) for v in w])
        if low:
            w = [_bf16(v) for v in w]
    elif c.scoring == "sigmoid_of_topk":
        w = [_sigmoid(float(v), c.sigmoid_formula) for v in w]
    if c.renormalize_when == "always":  # Megatron's sigmoid: whatever the call says, when topk > 1
        renormalize = topk > 1
    elif c.renormalize_when == "never":  # Megatron's post-softmax: whatever the call says
        renormalize = False
    if c.weight_precision == "input" and bf16_logits:  # every step of the weights rounded to bf16
        w, ids = _reference_weights_bf16(c, [_bf16(v) for v in w], ids, renormalize, rsf)
    else:
        w, ids = _reference_weights(c, w, ids, renormalize, rsf)
    if c.shared_expert_slot == "last":
        total = F32(0)
        for v in w:
            total = F32(total + v)
        w, ids = [*w, F32(total / F32(rsf))], [*ids, experts]
    return w, ids


def _reference_weights(c, w, ids, renormalize, rsf):
    # weight_scale="per_expert" with the default scale (all ones) leaves every weight as it is
    if not renormalize:
        return [F32(v * F32(rsf)) for v in w], ids
    if c.renormalize == "lp":
        norm = sum(abs(float(v)) ** c.renorm_p for v in w) ** (1.0 / c.renorm_p)
        return [F32(F32(float(v) / norm) * F32(rsf)) if norm else F32(math.nan) for v in w], ids
    total = F32(0)
    for v in w:
        total = F32(total + v)
    if c.renormalize == "guard":
        denom = total if total > 0 else F32(1)
    elif c.renormalize == "eps":
        denom = F32(total + F32(c.renorm_eps))
    else:
        denom = total
    if c.scaling == "fused":
        factor = F32(F32(rsf) / denom)
        return [F32(v * factor) for v in w], ids
    return [F32(F32(v / denom) * F32(rsf)) for v in w], ids


def _reference_weights_bf16(c, w, ids, renormalize, rsf):
    """weight_precision="input" on bf16 logits: each step fp32, its result rounded to bf16."""
    b = _bf16
    if not renormalize:
        return [b(F32(v * F32(rsf))) for v in w], ids
    if c.renormalize == "lp":
        norm = sum(abs(float(v)) ** c.renorm_p for v in w) ** (1.0 / c.renorm_p)
        return [b(F32(b(F32(float(v) / norm)) * F32(rsf))) if norm else F32(math.nan) for v in w], ids
    total = F32(0)
    for v in w:
        total = F32(total + v)
    total = b(total)
    if c.renormalize == "guard":
        denom = total if total > 0 else F32(1)
    elif c.renormalize == "eps":
        denom = b(F32(total + F32(c.renorm_eps)))
    else:
        denom = total
    if c.scaling == "fused":
        factor = b(F32(F32(rsf) / denom))
        return [b(F32(v * factor)) for v in w], ids
    return [b(F32(b(F32(v / denom)) * F32(rsf))) for v in w], ids


def _bits(values) -> list:
    arr = np.array(values, dtype=np.float32)
    return [("nan" if math.isnan(v) else int(b)) for v, b in zip(arr.tolist(), arr.view(np.uint32).tolist())]


def assert_matches_reference(c, scores, bias, topk, n_group=None, topk_group=None, renormalize=True, rsf=1.0, *, pass_groups=True):
    groups = dict(num_expert_group=n_group, topk_group=topk_group) if pass_groups else {}
    w, ids = oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract=c, **groups)
    n_group = c.n_group if n_group is None else n_group
    topk_group = c.topk_group if topk_group is None else topk_group
    bf16 = scores.dtype == torch.bfloat16
    bf16_bias = bias is not None and bias.dtype == torch.bfloat16
    b = bias.float().tolist() if bias is not None else None
    for row in range(scores.shape[0]):
        x = scores[row].float().tolist()
        exp_w, exp_ids = reference_row(c, x, b, topk, n_group, topk_group, renormalize, rsf, bf16, bf16_bias)
        assert ids[row].tolist() == exp_ids, f"row {row}: ids {ids[row].tolist()} != reference {exp_ids}"
        assert _bits(w[row].tolist()) == _bits(exp_w), f"row {row}: weights {w[row].tolist()} != reference {exp_w}"
    return w, ids


# ---------------------------------------------------------------- random contracts, random rows

SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, 100.0, -100.0, 200.0, -200.0]
_FIELDS = oracle.FIELD_VALUES


@st.composite
def contracts(draw, scoring=None):
    n_group = draw(st.sampled_from([1, 1, 2, 3, 4, 8]))
    group_score = draw(st.sampled_from(_FIELDS["group_score"]))
    size = draw(st.integers(2 if n_group > 1 and group_score == "top2_sum" else 1, 10))
    experts = n_group * size
    topk_group = draw(st.integers(1, n_group))
    # topk_share_sum sums the top topk // topk_group of a group: 1 <= that <= size
    share = group_score == "topk_share_sum" and n_group > 1
    topk = draw(st.integers(topk_group, min(experts, size * topk_group + topk_group - 1)) if share else st.integers(1, experts))
    fields = {name: draw(st.sampled_from(values)) for name, values in _FIELDS.items()}
    fields["scoring"] = scoring or fields["scoring"]
    if fields["scoring"] == "softcap_sigmoid":
        fields["softcap"] = draw(st.sampled_from([1.0, 5.0, 30.0]))
    if fields["scoring"] in ("softmax_of_topk", "sigmoid_of_topk"):
        fields["bias"] = "none"  # they rank the raw logits
    fields.update(
        renorm_p=draw(st.sampled_from([1.0, 2.0, 3.5])), zero_experts=draw(st.integers(0, experts - 1)),
        routed_scaling_factor=draw(st.sampled_from([1.0, 2.5])), default_renormalize=draw(st.booleans()),
        group_score=group_score, experts=experts, n_group=n_group,
        topk=topk, topk_group=topk_group,
        floor=draw(st.sampled_from([None, None, None, -1e30, -0.5, 0.0, 0.25])),
        renorm_eps=draw(st.sampled_from([1e-20, 1e-6, 0.0])),
    )  # fmt: skip
    return oracle.Contract(name="drawn", **fields)


@st.composite
def routing_problems(draw, scoring=None):
    c = draw(contracts(scoring))
    rows = draw(st.integers(1, 5))
    style = draw(st.sampled_from(["few_values", "bf16", "special", "wide", "negative"]))
    if style == "few_values":
        palette = draw(st.lists(st.sampled_from([-2.0, -1.0, 0.0, 0.5, 1.0, 3.0]), min_size=1, max_size=3))
        element = st.sampled_from(palette)
    elif style == "special":
        element = st.one_of(st.sampled_from(SPECIAL), st.floats(-3, 3, width=32))
    elif style == "negative":
        element = st.floats(-6, -2, width=32)
    else:
        element = st.floats(-40, 40, width=32)
    values = draw(st.lists(st.lists(element, min_size=c.experts, max_size=c.experts), min_size=rows, max_size=rows))
    scores = torch.tensor(values, dtype=torch.float32)
    if style == "bf16" or draw(st.booleans()):
        scores = scores.bfloat16()
    bias_element = st.one_of(st.sampled_from([0.0, -0.0, 0.25, -0.5, -1.0, -math.inf]), st.floats(-1, 1, width=32))
    bias = torch.tensor(draw(st.lists(bias_element, min_size=c.experts, max_size=c.experts)), dtype=torch.float32)
    if draw(st.booleans()):
        bias = bias.bfloat16()
    if c.bias == "none" and draw(st.booleans()):
        bias = None
    options = c.admitted_options()  # only the calls the contract admits (others are refused: test_admitted_options)
    rsf = draw(st.sampled_from(options["routed_scaling_factor"] or [1.0, 2.5, 2.827]))
    return c, scores, bias, draw(st.sampled_from(options["renormalize"])), rsf


@given(routing_problems())
def test_oracle_equals_reference_for_random_contracts(problem):
    c, scores, bias, renormalize, rsf = problem
    assert_matches_reference(c, scores, bias, c.topk, c.n_group, c.topk_group, renormalize, rsf)


@given(routing_problems(scoring="sigmoid"))
def test_oracle_equals_reference_grouped_sigmoid_with_contract_default_groups(problem):
    c, scores, bias, renormalize, rsf = problem
    assert_matches_reference(c, scores, bias, c.topk, renormalize=renormalize, rsf=rsf, pass_groups=False)


@given(routing_problems(scoring="softmax"))
@example((oracle.get_contract("qwen3-moe").replace(experts=8, topk=3), torch.full((1, 8), math.nan), None, True, 1.0))
def test_oracle_equals_reference_softmax(problem):
    c, scores, bias, renormalize, rsf = problem
    assert_matches_reference(c, scores, bias, c.topk, c.n_group, c.topk_group, renormalize, rsf)


@given(routing_problems(scoring="softmax_of_topk"))
# renormalize=True on an all -inf row: a call gpt-oss itself never makes (the copy admits it), the formula still must hold
@example((oracle.get_contract("gpt-oss").replace(experts=8, topk=3, admitted_renormalize="any"), torch.full((1, 8), -math.inf), None, True, 1.0))
def test_oracle_equals_reference_softmax_of_topk(problem):
    c, scores, bias, renormalize, rsf = problem
    assert_matches_reference(c, scores, bias, c.topk, c.n_group, c.topk_group, renormalize, rsf)


@pytest.mark.parametrize("name", sorted(oracle.BUILTIN_CONTRACTS))
def test_every_builtin_equals_reference_on_random_and_tied_rows(name):
    c = oracle.get_contract(name)
    gen = torch.Generator().manual_seed(len(name))
    rows = [torch.randn(6, c.experts, generator=gen) * 3, torch.randint(-2, 3, (6, c.experts), generator=gen).float()]
    scores = torch.cat(rows)
    bias = (torch.randn(c.experts, generator=gen) * 0.1) if c.has_bias else None
    for dtype in (torch.float32, torch.bfloat16):
        assert_matches_reference(c, scores.to(dtype), bias, c.topk, renormalize=c.default_renormalize, rsf=c.routed_scaling_factor,
                                 pass_groups=False)  # fmt: skip


# ---------------------------------------------------------------- grouped routing, named cases

DSV3 = oracle.get_contract("deepseek-v3")
DSV3_REF = oracle.get_contract("deepseek-v3-reference")


def _negative_bias_row():
    """sig = 0.5 everywhere; groups 0-3 rank at -0.1, groups 4-7 at -0.2: groups 0-3 are kept."""
    scores = torch.zeros(1, 256)
    bias = torch.full((256,), -0.7)
    bias[:128] = -0.6
    return scores, bias


def test_deepseek_v3_and_its_reference_differ_where_a_negative_bias_meets_the_mask():
    scores, bias = _negative_bias_row()
    _, ids = assert_matches_reference(DSV3, scores, bias, 8, pass_groups=False)
    _, ids_ref = assert_matches_reference(DSV3_REF, scores, bias, 8, pass_groups=False)
    assert ids[0].tolist() == list(range(8))  # -inf mask: the best of the kept groups, lowest index first
    assert ids_ref[0].tolist() == list(range(128, 136))  # 0.0 mask: masked experts (0.0) outrank kept ones (-0.1)
    trace = oracle.route_trace(scores, bias, 8, contract=DSV3)
    assert trace.kept_groups[0].tolist() == [0, 1, 2, 3]
    assert trace.group_cutoff[0] == pytest.approx(-0.2, abs=1e-6)


def test_deepseek_v3_and_its_reference_agree_when_kept_experts_rank_above_zero():
    gen = torch.Generator().manual_seed(7)
    scores = torch.randn(200, 256, generator=gen)
    bias = torch.rand(256, generator=gen) * 0.1  # ranking = sig + bias > 0 always
    a = oracle.route(scores, bias, 8, contract=DSV3)
    b = oracle.route(scores, bias, 8, contract=DSV3_REF)
    assert torch.equal(a[1], b[1]) and torch.equal(a[0], b[0])


@pytest.mark.parametrize("rule, kept", [("lowest", [0, 5, 2, 3]), ("highest", [0, 5, 7, 6])])
def test_group_tie_order_at_the_topk_group_cutoff(rule, kept):
    # Group 0 and 5 clearly first; groups 2, 3, 6, 7 tie for the last two kept slots; 1 and 4 below.
    c = DSV3.replace(group_tie_rule=rule)
    scores = torch.full((1, 256), -6.0)
    level = {0: 4.0, 5: 3.0, 2: 1.0, 3: 1.0, 6: 1.0, 7: 1.0, 1: -1.0, 4: -2.0}
    for g, v in level.items():
        scores[0, g * 32 : g * 32 + 2] = v
    bias = torch.zeros(256)
    assert_matches_reference(c, scores, bias, 8, pass_groups=False)
    trace = oracle.route_trace(scores, bias, 8, contract=c)
    assert trace.kept_groups[0].tolist() == kept
    assert set(trace.kept_group_mask[0].nonzero().squeeze(1).tolist()) == set(kept)


def test_all_equal_row_keeps_the_first_groups_and_the_lowest_experts():
    w, ids = assert_matches_reference(DSV3, torch.zeros(1, 256), torch.zeros(256), 8, rsf=2.5, pass_groups=False)
    assert ids[0].tolist() == list(range(8))
    assert torch.equal(w, torch.full((1, 8), 2.5 / 8))  # renormalized, then scaled by 2.5


def test_group_score_top2_sum_against_max():
    # Group 1 has one high expert; group 0 two moderately high ones: top2_sum keeps 0, max keeps 1.
    c = DSV3.replace(experts=16, topk=2, n_group=4, topk_group=1)
    scores = torch.full((1, 16), -4.0)
    scores[0, [0, 1]] = 2.0
    scores[0, 4] = 3.0
    bias = torch.zeros(16)
    _, ids_sum = assert_matches_reference(c, scores, bias, 2, pass_groups=False)
    _, ids_max = assert_matches_reference(c.replace(group_score="max"), scores, bias, 2, pass_groups=False)
    assert ids_sum[0].tolist() == [0, 1]
    assert ids_max[0].tolist()[0] == 4


def test_nan_in_a_group_ranks_below_its_numbers():
    # NaN last: a group's top two are its two largest numbers; a NaN alone in a group sinks it.
    c = DSV3.replace(experts=16, topk=4, n_group=4, topk_group=2)
    scores = torch.full((1, 16), -1.0)
    scores[0, 0] = math.nan  # group 0: NaN, then -1, -1, -1
    scores[0, 4:8] = math.nan  # group 1: only NaN: score NaN, ranks last
    scores[0, 8] = 2.0  # group 2 best
    bias = torch.zeros(16)
    assert_matches_reference(c, scores, bias, 4, pass_groups=False)
    trace = oracle.route_trace(scores, bias, 4, contract=c)
    assert trace.kept_groups[0].tolist()[0] == 2 and 1 not in trace.kept_groups[0].tolist()
    assert torch.isnan(trace.group_scores[0, 1]) and not torch.isnan(trace.group_scores[0, 0])
    first = oracle.route_trace(scores, bias, 4, contract=c.replace(nan_rule="first"))
    assert first.kept_groups[0].tolist() == [0, 1]  # NaN first (torch.topk): the NaN groups win


def test_minus_inf_mask_fills_slots_beyond_the_kept_experts_by_tie_priority():
    # topk 6 > 2 kept groups x 2 experts: the masked experts (-inf) fill the rest, lowest index first.
    c = DSV3.replace(experts=8, topk=6, n_group=4, topk_group=2)
    scores = torch.tensor([[3.0, 2.0, -1.0, -1.0, 1.0, 0.5, -2.0, -3.0]])
    _, ids = assert_matches_reference(c, scores, torch.zeros(8), 6, pass_groups=False)
    assert ids[0].tolist() == [0, 1, 4, 5, 2, 3]


def test_explicit_group_arguments_override_the_contract_defaults():
    gen = torch.Generator().manual_seed(3)
    scores, bias = torch.randn(50, 256, generator=gen), torch.randn(256, generator=gen) * 0.1
    a = oracle.route(scores, bias, 8, contract=DSV3, num_expert_group=1, topk_group=1)
    b = oracle.route(scores, bias, 8, contract="aiter", renormalize=True, routed_scaling_factor=2.5)
    assert torch.equal(torch.sort(a[1], 1).values, torch.sort(b[1], 1).values)  # ungrouped: the same sets
    assert_matches_reference(DSV3, scores, bias, 8, 4, 2, rsf=2.5)


def test_grouped_bf16_logits_differ_between_fp32_and_input_precision():
    gen = torch.Generator().manual_seed(11)
    scores = torch.randn(400, 256, generator=gen).bfloat16()
    bias = (torch.randn(256, generator=gen) * 0.01).bfloat16()
    c_input = DSV3.replace(score_precision="input")
    _, ids = oracle.route(scores, bias, 8, contract=DSV3)
    _, ids_in = oracle.route(scores, bias, 8, contract=c_input)
    differ = (torch.sort(ids, 1).values != torch.sort(ids_in, 1).values).any(1)
    assert 0.05 < differ.float().mean() < 0.9  # bf16 sigmoids tie where fp32 ones do not
    assert_matches_reference(c_input, scores[:40], bias, 8, pass_groups=False)


def test_trace_cutoffs_and_selection_values():
    scores, bias = _negative_bias_row()
    t = oracle.route_trace(scores, bias, 8, contract=DSV3_REF)
    assert t.selection_ranking[0, 200] == 0.0 and t.ranking[0, 200] == pytest.approx(-0.2)
    assert t.cutoff[0] == 0.0 and t.valid.tolist() == [8]
    ungrouped = oracle.route_trace(scores, bias, 8, contract="aiter")
    assert ungrouped.group_scores is None and ungrouped.kept_groups is None and ungrouped.group_cutoff is None
    assert ungrouped.selection_ranking is ungrouped.ranking
    fallback = oracle.route_trace(torch.zeros(1, 8), torch.full((8,), -math.inf), 3, contract="serial")
    assert fallback.ids[0].tolist() == [0, 0, 0] and fallback.valid.tolist() == [0] and torch.isnan(fallback.cutoff[0])


# ---------------------------------------------------------------- softmax routing, named cases

QWEN3 = oracle.get_contract("qwen3-moe")
MIXTRAL = oracle.get_contract("mixtral")
GPT_OSS = oracle.get_contract("gpt-oss")


def test_softmax_contracts_match_the_model_formula_on_random_rows():
    gen = torch.Generator().manual_seed(5)
    for c in (QWEN3, MIXTRAL):
        x = torch.randn(300, c.experts, generator=gen)
        w, ids = oracle.route(x, None, c.topk, contract=c)
        p = torch.softmax(x, dim=1, dtype=torch.float32)
        top_p, top_i = torch.topk(p, c.topk, dim=1)
        assert torch.equal(ids.long(), top_i)
        assert torch.allclose(w, top_p / top_p.sum(1, keepdim=True), rtol=1e-5, atol=1e-6)


def test_gpt_oss_is_the_softmax_of_the_top_logits():
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(300, 128, generator=gen)
    w, ids = oracle.route(x, None, 4, contract=GPT_OSS)
    top_x, top_i = torch.topk(x, 4, dim=1)
    assert torch.equal(ids.long(), top_i)
    assert torch.allclose(w, torch.softmax(top_x, dim=1), rtol=1e-6, atol=0)
    assert_matches_reference(GPT_OSS, x[:30], None, 4, renormalize=False, pass_groups=False)


def test_softmax_row_with_nan_is_all_nan_and_keeps_the_tie_order():
    x = torch.randn(2, 128)
    x[0, 17] = math.nan
    w, ids = assert_matches_reference(QWEN3, x, None, 8, pass_groups=False)
    assert ids[0].tolist() == list(range(8)) and torch.isnan(w[0]).all()
    assert not torch.isnan(w[1]).any()


def test_gpt_oss_nan_logit_never_takes_a_numbers_slot():
    x = torch.full((1, 128), -1.0)
    x[0, 3] = math.nan
    x[0, [9, 90, 100, 127]] = torch.tensor([4.0, 3.0, 2.0, 1.0])
    w, ids = assert_matches_reference(GPT_OSS, x, None, 4, renormalize=False, pass_groups=False)
    assert ids[0].tolist() == [9, 90, 100, 127] and not torch.isnan(w).any()
    _, first = oracle.route(x, None, 4, contract=GPT_OSS.replace(nan_rule="first"))
    assert first[0].tolist()[0] == 3  # torch.topk's order: the NaN first


def test_softmax_ties_go_to_the_lowest_index_and_bf16_logits_tie_exactly():
    x = torch.zeros(1, 8)
    x[0, [6, 2, 5]] = 1.0
    _, ids = assert_matches_reference(MIXTRAL, x, None, 2, pass_groups=False)
    assert ids[0].tolist() == [2, 5]
    xb = torch.full((1, 128), -4.0, dtype=torch.bfloat16)
    xb[0, 100], xb[0, 30] = 1.001, 1.002  # one bf16 value
    _, ids = assert_matches_reference(QWEN3, xb, None, 8, pass_groups=False)
    assert ids[0].tolist()[:2] == [30, 100]


def test_softmax_contracts_take_no_bias_and_ignore_one_given():
    x = torch.randn(10, 128)
    a = oracle.route(x, None, 8, contract=QWEN3)
    b = oracle.route(x, torch.randn(128), 8, contract=QWEN3)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    with pytest.raises(oracle.RoutingArgumentError, match="ranks with a correction bias"):
        oracle.route(x, None, 8, contract="aiter")


def test_route_defaults_come_from_the_contract():
    x = torch.randn(20, 128)
    w, _ = oracle.route(x, None, 4, contract=GPT_OSS)  # default_renormalize False: softmax of the 4 as is
    # renormalizing a softmax over the k chosen changes nothing (a copy that admits the call; gpt-oss itself never makes it)
    w2, _ = oracle.route(x, None, 4, contract=GPT_OSS.replace(admitted_renormalize="any"), renormalize=True)
    assert torch.allclose(w, w2, rtol=1e-6) and not GPT_OSS.default_renormalize
    w3, _ = oracle.route(torch.randn(5, 256), torch.zeros(256), 8, contract=DSV3)
    assert torch.allclose(w3.sum(1), torch.full((5,), 2.5), rtol=1e-5)


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_expert_group=3, topk_group=1), "does not divide E=256"),
    (dict(num_expert_group=8, topk_group=9), "topk_group=9"),
    (dict(num_expert_group=8), "pass both or neither"),
    (dict(num_expert_group=256, topk_group=4), "top2_sum needs >= 2"),
    (dict(num_expert_group=True, topk_group=1), "num_expert_group=True"),
])  # fmt: skip
def test_group_arguments_are_checked_in_one_line(kwargs, match):
    with pytest.raises(oracle.RoutingArgumentError, match=match) as info:
        oracle.route(torch.zeros(2, 256), torch.zeros(256), 8, contract=DSV3, **kwargs)
    assert "\n" not in str(info.value)


def test_grouped_rows_are_independent_of_chunking_and_layout():
    gen = torch.Generator().manual_seed(9)
    scores = torch.randint(-3, 4, (5000, 256), generator=gen).float()  # ties everywhere, > one CPU chunk
    bias = torch.randint(-2, 2, (256,), generator=gen).float() * 0.25
    wide = torch.zeros(5000, 300)
    wide[:, 7:263] = scores
    for c in (DSV3, DSV3_REF):
        whole = oracle.route(scores, bias, 8, contract=c)
        strided = oracle.route(wide[:, 7:263], bias, 8, contract=c)
        assert torch.equal(whole[1], strided[1]) and torch.equal(whole[0], strided[0])
        for r in (0, 3583, 3584, 4999):
            single = oracle.route(scores[r : r + 1], bias, 8, contract=c)
            assert torch.equal(whole[1][r], single[1][0]) and torch.equal(whole[0][r], single[0][0])


def test_ranking_values_and_trace_of_a_contract_without_bias():
    x = torch.randn(4, 128)
    p, ranking = oracle.ranking_values(x, None, QWEN3)
    assert ranking is p and torch.allclose(p, torch.softmax(x, dim=1), rtol=1e-6)
    logits, ranking = oracle.ranking_values(x, None, GPT_OSS)
    assert torch.equal(logits, x) and torch.equal(ranking, x)
    empty = oracle.route_trace(torch.zeros(0, 256), torch.zeros(256), 8, contract=DSV3)
    assert empty.ids.shape == (0, 8) and empty.group_scores.shape == (0, 8) and empty.kept_groups.shape == (0, 4)
