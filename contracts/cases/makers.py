"""The input makers of the case families: ``make(gen, rows, experts, topk) -> (x, bias, logits dtype)``.

Each draws from the seeded generator it is given, in a fixed order, on the
generator's device: a case is the same bits on every machine of a device
kind (the coverage cases are drawn on the CPU, so they are the same bits
everywhere). The ``*_bulk`` makers are vectorized twins of the makers that
loop over rows, for the large bulk cases (``contracts.cases.plan``).
``families.FAMILIES`` names them.
"""

from __future__ import annotations

import math

import torch


def _on(gen) -> dict:
    return {"generator": gen, "device": gen.device}


def _rand(gen, *shape):
    return torch.rand(*shape, **_on(gen))


def _randn(gen, *shape):
    return torch.randn(*shape, **_on(gen))


def _full(gen, shape, value):
    return torch.full(shape, value, device=gen.device)


def _normal(gen, rows, experts, scale=1.0):
    # normal_ in place draws the same numbers as randn(...) * scale (bit for bit), without a second pass
    return torch.empty(rows, experts, device=gen.device).normal_(0.0, scale, generator=gen)


def _small_bias(gen, experts):
    return _randn(gen, experts) * 0.05


_SAMPLE_PLACES = 128  # rows needing at most this many places get them from a top-k, the rest from a full sort


def _fill_places(gen, x, upto, values):
    """Write ``values(idx, place, current)`` into the first ``upto[r]`` places of an independent uniform
    random order of each row of ``x`` (in place; returns ``x``).

    ``values`` gets a group's row indices (int64 ``[n]``), the place numbers (int64 ``[n, P]``, 0..P-1
    in every row) and what ``x`` holds there (``[n, P]``), and returns the ``[n, P]`` values to write;
    places at or beyond a row's ``upto`` must get ``current`` back. The top-k of uniform keys is a
    uniform random ordered sample, so most rows cost a top-k of at most ``_SAMPLE_PLACES`` instead of
    the double argsort a full rank takes (about 8x on a CPU); rows needing more places pay a full sort.
    """
    rows, experts = x.shape
    keys = _rand(gen, rows, experts)
    upto = upto.reshape(rows).clamp(0, experts)
    few = upto <= _SAMPLE_PLACES
    for chosen in (few, ~few):
        idx = chosen.nonzero().squeeze(1)
        places = int(upto[idx].max()) if idx.numel() else 0
        if places == 0:
            continue
        every = idx.numel() == rows
        top = (keys if every else keys.index_select(0, idx)).topk(places, dim=1).indices
        place = torch.arange(places, device=x.device).expand(idx.numel(), places)
        current = (x if every else x.index_select(0, idx)).gather(1, top)
        new = values(idx, place, current)
        if every:
            x.scatter_(1, top, new)
        else:
            x.index_put_((idx.unsqueeze(1), top), new)
    return x


def random_bf16(gen, rows, experts, topk):
    return _normal(gen, rows, experts, 2.0), _small_bias(gen, experts), torch.bfloat16


def random_fp32(gen, rows, experts, topk):
    return _normal(gen, rows, experts, 2.0), _small_bias(gen, experts), torch.float32


def bf16_near_ties(gen, rows, experts, topk):
    # A narrow band of bf16 values: exact ties everywhere, and values one bf16 step apart.
    x = 1.5 + _rand(gen, rows, experts)
    bias = torch.randint(-2, 3, (experts,), **_on(gen)).float() * 2.0**-9  # ties after the addition
    return x, bias, torch.bfloat16


def all_equal(gen, rows, experts, topk):
    values = torch.tensor([0.0, 1.5, -3.0, 20.0, -200.0, 0.25], device=gen.device)
    pick = values[torch.randint(0, len(values), (rows, 1), **_on(gen))]
    return pick.expand(rows, experts).clone(), _full(gen, (experts,), 0.0), torch.bfloat16


def _tie_pool(gen, rows, experts, topk, straddle):
    x = torch.empty(rows, experts)
    for r in range(rows):
        perm = torch.randperm(experts, generator=gen)
        if straddle:
            # pool size 2..E, log-uniform, with the top-k cutoff falling inside it
            pool = min(experts, max(2, int(math.exp(torch.rand(1, generator=gen).item() * math.log(experts))) + 1))
            lo, hi = max(0, topk - pool + 1), min(topk - 1, experts - pool)
            above = int(torch.randint(lo, hi + 1, (1,), generator=gen)) if hi >= lo else 0
        else:
            pool = int(torch.randint(2, topk + 1, (1,), generator=gen)) if topk >= 2 else 1
            above = int(torch.randint(0, topk - pool + 1, (1,), generator=gen))
        x[r] = -4.0 + torch.rand(experts, generator=gen)  # below the pool
        x[r, perm[:above]] = 3.0 + torch.rand(above, generator=gen)
        x[r, perm[above : above + pool]] = 1.0
    return x, torch.zeros(experts), torch.bfloat16


def tie_pool_straddle(gen, rows, experts, topk):
    return _tie_pool(gen, rows, experts, topk, straddle=True)


def tie_pool_above(gen, rows, experts, topk):
    return _tie_pool(gen, rows, experts, topk, straddle=False)


def _tie_pool_bulk(gen, rows, experts, topk, straddle):
    if straddle:
        pool = (_rand(gen, rows) * math.log(experts)).exp().long().add(1).clamp(2, experts)
        lo, hi = (topk - pool + 1).clamp(min=0), (experts - pool).clamp(max=topk - 1)
        above = torch.where(hi >= lo, lo + (_rand(gen, rows) * (hi - lo + 1).float()).long().clamp(max=(hi - lo).clamp(min=0)), torch.zeros_like(lo))
    else:
        pool = torch.randint(2, topk + 1, (rows,), **_on(gen)) if topk >= 2 else torch.ones(rows, dtype=torch.long, device=gen.device)
        above = (_rand(gen, rows) * (topk - pool + 1).float()).long()
    x = -4.0 + _rand(gen, rows, experts)  # below the pool

    def pooled(idx, place, current):
        a, end = above[idx].unsqueeze(1), (above + pool)[idx].unsqueeze(1)
        return torch.where(place < a, 3.0 + _rand(gen, *place.shape), torch.where(place < end, torch.ones_like(current), current))

    return _fill_places(gen, x, above + pool, pooled), _full(gen, (experts,), 0.0), torch.bfloat16


def tie_pool_straddle_bulk(gen, rows, experts, topk):
    return _tie_pool_bulk(gen, rows, experts, topk, straddle=True)


def tie_pool_above_bulk(gen, rows, experts, topk):
    return _tie_pool_bulk(gen, rows, experts, topk, straddle=False)


def nan_sparse(gen, rows, experts, topk):
    x = _normal(gen, rows, experts, 2.0)
    x.masked_fill_(_rand(gen, rows, experts) < 0.05, math.nan)  # masked_fill_: the same values as x[mask] = v, faster
    return x, _small_bias(gen, experts), torch.bfloat16


def nan_dense(gen, rows, experts, topk):
    # More than E - k NaN per row: NaN experts must fill the slots numbers cannot.
    x = torch.full((rows, experts), math.nan)
    numbers = torch.randint(0, topk, (rows,), generator=gen)
    for r in range(rows):
        keep = torch.randperm(experts, generator=gen)[: int(numbers[r])]
        x[r, keep] = torch.randn(len(keep), generator=gen)
    return x, _small_bias(gen, experts), torch.bfloat16


def nan_dense_bulk(gen, rows, experts, topk):
    numbers = torch.randint(0, topk, (rows,), **_on(gen))
    x = torch.full((rows, experts), math.nan, device=gen.device)

    def kept(idx, place, current):
        return torch.where(place < numbers[idx].unsqueeze(1), _randn(gen, *place.shape), current)

    return _fill_places(gen, x, numbers, kept), _small_bias(gen, experts), torch.bfloat16


def nan_with_neg_inf_bias(gen, rows, experts, topk):
    # NaN logits and -inf biases, with few finite values: NaN and -inf both reach the cutoff.
    x = _normal(gen, rows, experts)
    x.masked_fill_(_rand(gen, rows, experts) < 0.5, math.nan)
    bias = _full(gen, (experts,), 0.0)
    bias[_rand(gen, experts) < 0.97] = -math.inf
    return x, bias, torch.float32


def few_valid(gen, rows, experts, topk):
    # -inf bias masks all but a handful of experts: fewer than k values beat the serial sentinel.
    bias = _full(gen, (experts,), -math.inf)
    live = torch.randperm(experts, **_on(gen))[: int(torch.randint(0, topk, (1,), **_on(gen)))]
    bias[live] = _randn(gen, len(live)) * 0.1
    return _normal(gen, rows, experts), bias, torch.float32


def inf_logits(gen, rows, experts, topk):
    x = _normal(gen, rows, experts, 2.0)
    u = _rand(gen, rows, experts)
    x.masked_fill_(u < 0.02, math.inf)
    x.masked_fill_((u >= 0.02) & (u < 0.05), -math.inf)
    return x, _small_bias(gen, experts), torch.float32


def saturated(gen, rows, experts, topk):
    # sigmoid exactly 1.0 or 0.0: ties by saturation. Equal logits, so every
    # faithful sigmoid ties them too; varied saturated logits are in inf_logits.
    x = torch.where(_rand(gen, rows, experts) < 0.03, 20.0, -120.0)
    return x, _full(gen, (experts,), 0.0), torch.float32


def all_zero(gen, rows, experts, topk):
    bias = _small_bias(gen, experts) if _rand(gen, 1).item() < 0.5 else _full(gen, (experts,), 0.0)
    return _full(gen, (rows, experts), 0.0), bias, torch.bfloat16


def signed_zero(gen, rows, experts, topk):
    neg, pos = torch.tensor(-0.0, device=gen.device), torch.tensor(0.0, device=gen.device)
    signs = _rand(gen, rows, experts) < 0.5
    x = torch.where(signs, neg, pos)
    bias = torch.where(_rand(gen, experts) < 0.5, neg, pos)
    # a few experts with ranking exactly 0.0: sig(0) = 0.5 and bias -0.5
    bias[torch.randperm(experts, **_on(gen))[:topk]] = -0.5
    return x, bias, torch.float32


def subnormal(gen, rows, experts, topk):
    # sig(-200) is exactly 0; subnormal biases make subnormal ranking values that a
    # flush-to-zero kernel would tie.
    x = _full(gen, (rows, experts), -200.0)
    tiny = torch.randint(1, 64, (experts,), **_on(gen)).float() * 2.0**-149
    return x, tiny, torch.float32


def sigmoid_underflow(gen, rows, experts, topk):
    # Logits around -88.7, where exp(-x) overflows fp32: below it every fp32 sigmoid
    # is exactly 0 (one big tie), just above it the sigmoid is a subnormal that a
    # flush-to-zero kernel would lose.
    x = torch.full((rows, experts), -120.0)
    for r in range(rows):
        few = torch.randperm(experts, generator=gen)[: topk + 4]
        x[r, few] = -95.0 + 10.0 * torch.rand(len(few), generator=gen)
    _lone_subnormal(x)
    return x, torch.zeros(experts), torch.bfloat16


def _lone_subnormal(x):
    """Every fourth row (from the fourth, so a one-row case keeps its draw) holds one sigmoid a little above the
    underflow, the rest exactly 0: the kept weights' sum is positive but below rsf / FLT_MAX (sig(-88.5) = 3.7e-39,
    sig(-88.0) = 6.1e-39; -88.5 and -88.0 are exact in bf16), so ``w * (rsf / sum)`` overflows to inf where ``w / sum``
    is 1. Random draws reach such a row about once in 400,000 (found on an H100). No draws: the others stay put."""
    rows, experts = x.shape
    lone = torch.arange(3, max(rows, 3), 4, device=x.device)
    x[lone] = -120.0
    x[lone, lone % experts] = torch.where(lone % 8 == 3, -88.5, -88.0).to(x.dtype)


def sigmoid_underflow_bulk(gen, rows, experts, topk):
    x = torch.full((rows, experts), -120.0, device=gen.device)
    few = torch.full((rows,), topk + 4, device=gen.device)
    x = _fill_places(gen, x, few, lambda idx, place, current: -95.0 + 10.0 * _rand(gen, *place.shape))
    _lone_subnormal(x)
    return x, _full(gen, (experts,), 0.0), torch.bfloat16


def zero_sum(gen, rows, experts, topk):
    # Every sigmoid is exactly 0 (x <= -110): the renormalize guard decides. A
    # distinct bias per expert keeps the selection free of ties, so a router
    # without the guard shows here as renorm_guard and nothing else.
    x = -110.0 - 10 * _rand(gen, rows, experts)
    return x, torch.randperm(experts, **_on(gen)).float() / experts, torch.float32


def strided(gen, rows, experts, topk):
    return _normal(gen, rows, experts, 2.0), _small_bias(gen, experts), torch.bfloat16


def batch_sizes(gen, rows, experts, topk):
    return _normal(gen, rows, experts, 2.0), _small_bias(gen, experts), torch.bfloat16


# ---------------------------------------------------------------- grouped contracts (DeepSeek-V3: 8 groups, 4 kept)
# These take the group shape too: make(gen, rows, experts, topk, n_group=, topk_group=). Logits are chosen
# so the sigmoid scores (and their top-2 group sums) tie exactly: equal logits tie in every implementation.


def _group_view(x, n_group):
    rows, experts = x.shape
    return x.view(rows, n_group, experts // n_group)


def group_score_ties(gen, rows, experts, topk, n_group=8, topk_group=4):
    # Every group's two best experts share one of two logit levels, so group scores take two values and
    # more groups than are kept tie at the cutoff: the group tie rule decides which are kept.
    x = -3.0 + _rand(gen, rows, experts)
    g = _group_view(x, n_group)
    size = experts // n_group
    level = torch.where(_rand(gen, rows, n_group) < 0.5, 2.0, 1.0)
    level[:, : topk_group - 1] = 2.0  # a few groups strictly above, the rest tied at the lower level
    level[:, topk_group - 1 :] = 1.0
    order = _rand(gen, rows, n_group).argsort(1)
    level = level.gather(1, order.argsort(1))
    first = (_rand(gen, rows, n_group) * size).long().clamp(max=size - 1)
    second = (first + 1 + (_rand(gen, rows, n_group) * (size - 1)).long()) % size
    g.scatter_(2, first.unsqueeze(2), level.unsqueeze(2))
    g.scatter_(2, second.unsqueeze(2), level.unsqueeze(2))
    return x, _full(gen, (experts,), 0.0), torch.bfloat16


def group_split_pool(gen, rows, experts, topk, n_group=8, topk_group=4):
    # A pool of tied experts spread over a kept group and a dropped one: only the kept group's members may win.
    x = -3.0 + _rand(gen, rows, experts)
    g = _group_view(x, n_group)
    size = experts // n_group
    g[:, :topk_group, 0] = 3.0  # the kept groups' best experts...
    g[:, :topk_group, 1 : 1 + topk] = 1.0  # ...and a pool at 1.0 in each of them
    g[:, topk_group, 1 : 1 + min(topk, size - 1)] = 1.0  # the same pool in a dropped group (its top-2 sum is lower)
    order = torch.stack([torch.randperm(n_group, **_on(gen)) for _ in range(1)]).expand(rows, n_group)
    x = g.gather(1, order.unsqueeze(2).expand_as(g)).reshape(rows, experts)
    return x, _full(gen, (experts,), 0.0), torch.bfloat16


def negative_bias_mask(gen, rows, experts, topk, n_group=8, topk_group=4):
    # A negative bias pushes every ranking value below 0: masking dropped groups with 0.0 (the model's
    # reference code) lets them outrank the kept experts; masking with -inf (SGLang, vLLM) does not.
    x = _normal(gen, rows, experts, 2.0)
    bias = -1.0 - 0.05 * _rand(gen, experts)
    return x, bias, torch.float32


def group_all_equal(gen, rows, experts, topk, n_group=8, topk_group=4):
    # Every expert of the kept groups equal (and the dropped groups lower): the expert tie rule decides inside them.
    x = -3.0 + _rand(gen, rows, experts)
    g = _group_view(x, n_group)
    keep = _rand(gen, rows, n_group).argsort(1)[:, :topk_group]
    mask = torch.zeros(rows, n_group, dtype=torch.bool, device=gen.device).scatter_(1, keep, True)
    g.masked_fill_(mask.unsqueeze(2), 1.5)
    return x, _full(gen, (experts,), 0.0), torch.bfloat16
