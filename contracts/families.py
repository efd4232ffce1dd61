"""Case families: deterministic inputs that exercise every clause.

A case is fully determined by ``(family, case_seed, rows, experts, topk)``:
that tuple is its replay id, and ``build_case`` rebuilds it bit for bit on
any machine (tensors are drawn on the CPU from a seeded generator, then
moved). Each case also draws its call options from its seed: renormalize
on or off, routed_scaling_factor 1.0 / 2.5 / 2.827, bias in fp32 or in the
logits dtype.

The runner spreads a row budget over the families (``plan``); per-row facts
(tie group at the cutoff, whether it straddles, NaN count) are computed by
the comparison from the oracle, so families only make inputs.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

__all__ = ["FAMILIES", "Case", "CaseSpec", "Family", "build_case", "iter_plan", "plan", "planned_rows"]

SCALING_FACTORS = (1.0, 2.5, 2.827)
# Batch sizes that must always run in the batch_sizes family; the rest of its
# budget samples other sizes in 1..1025.
EDGE_BATCH_SIZES = (1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129,
                    255, 256, 257, 511, 512, 513, 1023, 1024, 1025, 1536, 4096)  # fmt: skip


@dataclass(frozen=True)
class CaseSpec:
    family: str
    case_seed: int
    rows: int
    experts: int
    topk: int

    @property
    def replay_id(self) -> str:
        return f"{self.family}:{self.case_seed}:{self.rows}"


@dataclass
class Case:
    spec: CaseSpec
    scores: torch.Tensor
    bias: torch.Tensor
    renormalize: bool
    routed_scaling_factor: float

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def topk(self) -> int:
        return self.spec.topk


@dataclass(frozen=True)
class Family:
    name: str
    description: str
    make: Callable  # (gen, rows, experts, topk) -> (scores, bias, logits dtype)
    share: float = 1.0
    sizes: tuple[int, ...] = (1, 16, 128, 1024)


def _normal(gen, rows, experts, scale=1.0):
    return torch.randn(rows, experts, generator=gen) * scale


def _small_bias(gen, experts):
    return torch.randn(experts, generator=gen) * 0.05


def _random_bf16(gen, rows, experts, topk):
    return _normal(gen, rows, experts, 2.0), _small_bias(gen, experts), torch.bfloat16


def _random_fp32(gen, rows, experts, topk):
    return _normal(gen, rows, experts, 2.0), _small_bias(gen, experts), torch.float32


def _bf16_near_ties(gen, rows, experts, topk):
    # A narrow band of bf16 values: exact ties everywhere, and values one bf16 step apart.
    x = 1.5 + torch.rand(rows, experts, generator=gen)
    bias = torch.randint(-2, 3, (experts,), generator=gen).float() * 2.0**-9  # ties after the addition
    return x, bias, torch.bfloat16


def _all_equal(gen, rows, experts, topk):
    values = torch.tensor([0.0, 1.5, -3.0, 20.0, -200.0, 0.25])
    pick = values[torch.randint(0, len(values), (rows, 1), generator=gen)]
    return pick.expand(rows, experts).clone(), torch.zeros(experts), torch.bfloat16


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


def _tie_pool_straddle(gen, rows, experts, topk):
    return _tie_pool(gen, rows, experts, topk, straddle=True)


def _tie_pool_above(gen, rows, experts, topk):
    return _tie_pool(gen, rows, experts, topk, straddle=False)


def _nan_sparse(gen, rows, experts, topk):
    x = _normal(gen, rows, experts, 2.0)
    x[torch.rand(rows, experts, generator=gen) < 0.05] = math.nan
    return x, _small_bias(gen, experts), torch.bfloat16


def _nan_dense(gen, rows, experts, topk):
    # More than E - k NaN per row: NaN experts must fill the slots numbers cannot.
    x = torch.full((rows, experts), math.nan)
    numbers = torch.randint(0, topk, (rows,), generator=gen)
    for r in range(rows):
        keep = torch.randperm(experts, generator=gen)[: int(numbers[r])]
        x[r, keep] = torch.randn(len(keep), generator=gen)
    return x, _small_bias(gen, experts), torch.bfloat16


def _nan_with_neg_inf_bias(gen, rows, experts, topk):
    # NaN logits and -inf biases, with few finite values: NaN and -inf both reach the cutoff.
    x = _normal(gen, rows, experts)
    x[torch.rand(rows, experts, generator=gen) < 0.5] = math.nan
    bias = torch.zeros(experts)
    bias[torch.rand(experts, generator=gen) < 0.97] = -math.inf
    return x, bias, torch.float32


def _few_valid(gen, rows, experts, topk):
    # -inf bias masks all but a handful of experts: fewer than k values beat the serial sentinel.
    bias = torch.full((experts,), -math.inf)
    live = torch.randperm(experts, generator=gen)[: int(torch.randint(0, topk, (1,), generator=gen))]
    bias[live] = torch.randn(len(live), generator=gen) * 0.1
    return _normal(gen, rows, experts), bias, torch.float32


def _inf_logits(gen, rows, experts, topk):
    x = _normal(gen, rows, experts, 2.0)
    u = torch.rand(rows, experts, generator=gen)
    x[u < 0.02] = math.inf
    x[(u >= 0.02) & (u < 0.05)] = -math.inf
    return x, _small_bias(gen, experts), torch.float32


def _saturated(gen, rows, experts, topk):
    # sigmoid exactly 1.0 or 0.0: ties by saturation. Equal logits, so every
    # faithful sigmoid ties them too; varied saturated logits are in inf_logits.
    x = torch.where(torch.rand(rows, experts, generator=gen) < 0.03, 20.0, -120.0)
    return x, torch.zeros(experts), torch.float32


def _all_zero(gen, rows, experts, topk):
    bias = _small_bias(gen, experts) if torch.rand(1, generator=gen).item() < 0.5 else torch.zeros(experts)
    return torch.zeros(rows, experts), bias, torch.bfloat16


def _signed_zero(gen, rows, experts, topk):
    signs = torch.rand(rows, experts, generator=gen) < 0.5
    x = torch.where(signs, torch.tensor(-0.0), torch.tensor(0.0))
    bias = torch.where(torch.rand(experts, generator=gen) < 0.5, torch.tensor(-0.0), torch.tensor(0.0))
    # a few experts with ranking exactly 0.0: sig(0) = 0.5 and bias -0.5
    bias[torch.randperm(experts, generator=gen)[:topk]] = -0.5
    return x, bias, torch.float32


def _subnormal(gen, rows, experts, topk):
    # sig(-200) is exactly 0; subnormal biases make subnormal ranking values that a
    # flush-to-zero kernel would tie.
    x = torch.full((rows, experts), -200.0)
    tiny = torch.randint(1, 64, (experts,), generator=gen).float() * 2.0**-149
    return x, tiny, torch.float32


def _sigmoid_underflow(gen, rows, experts, topk):
    # Logits around -88.7, where exp(-x) overflows fp32: below it every fp32 sigmoid
    # is exactly 0 (one big tie), just above it the sigmoid is a subnormal that a
    # flush-to-zero kernel would lose.
    x = torch.full((rows, experts), -120.0)
    for r in range(rows):
        few = torch.randperm(experts, generator=gen)[: topk + 4]
        x[r, few] = -95.0 + 10.0 * torch.rand(len(few), generator=gen)
    return x, torch.zeros(experts), torch.bfloat16


def _zero_sum(gen, rows, experts, topk):
    # Every sigmoid is exactly 0 (x <= -110): the renormalize guard decides. A
    # distinct bias per expert keeps the selection free of ties, so a router
    # without the guard shows here as renorm_guard and nothing else.
    x = -110.0 - 10 * torch.rand(rows, experts, generator=gen)
    return x, torch.randperm(experts, generator=gen).float() / experts, torch.float32


def _strided(gen, rows, experts, topk):
    return _normal(gen, rows, experts, 2.0), _small_bias(gen, experts), torch.bfloat16


def _batch_sizes(gen, rows, experts, topk):
    return _normal(gen, rows, experts, 2.0), _small_bias(gen, experts), torch.bfloat16


FAMILIES: dict[str, Family] = {
    f.name: f
    for f in [
        Family("random_bf16", "normal logits, bf16", _random_bf16, share=3.0, sizes=(1, 64, 1024, 4096)),
        Family("random_fp32", "normal logits, fp32", _random_fp32, share=2.0, sizes=(1, 64, 1024, 4096)),
        Family("bf16_near_ties", "a narrow band of bf16 logits and a bias on a 2^-9 grid: exact and near ties", _bf16_near_ties, share=2.0, sizes=(1, 64, 1024, 1536)),
        Family("all_equal", "every expert of a row has the same logit", _all_equal, share=0.5, sizes=(1, 8, 256, 1025)),
        Family("tie_pool_straddle", "a pool of 2..E tied experts straddles the top-k cutoff", _tie_pool_straddle, share=0.6, sizes=(1, 16, 128)),
        Family("tie_pool_above", "a tie pool lies entirely above the cutoff", _tie_pool_above, share=0.3, sizes=(1, 16, 128)),
        Family("nan_sparse", "about 5% NaN logits", _nan_sparse, share=0.6, sizes=(1, 64, 1024)),
        Family("nan_dense", "more than E-k NaN logits per row", _nan_dense, share=0.3, sizes=(1, 16, 128)),
        Family("nan_neg_inf_bias", "NaN logits with -inf biases: NaN and -inf meet at the cutoff", _nan_with_neg_inf_bias, share=0.3, sizes=(1, 64, 512)),
        Family("few_valid", "-inf bias masks: fewer than k experts beat the serial sentinel", _few_valid, share=0.3, sizes=(1, 64, 512)),
        Family("inf_logits", "+inf and -inf logits", _inf_logits, share=0.5, sizes=(1, 64, 1024)),
        Family("saturated", "sigmoid exactly 0 or 1", _saturated, share=0.5, sizes=(1, 64, 1024)),
        Family("all_zero", "all-zero logits", _all_zero, share=0.3, sizes=(1, 64, 256)),
        Family("signed_zero", "+0.0 and -0.0 logits and biases, ranking values of exactly 0", _signed_zero, share=0.3, sizes=(1, 64, 256)),
        Family("subnormal", "subnormal ranking values (flush-to-zero would tie them)", _subnormal, share=0.3, sizes=(1, 64, 256)),
        Family("sigmoid_underflow", "logits near -88.7: sigmoids that underflow to 0 or stay subnormal", _sigmoid_underflow, share=0.3, sizes=(1, 64, 256)),
        Family("zero_sum", "the chosen sigmoids sum to 0: the renormalize guard decides", _zero_sum, share=0.3, sizes=(1, 64, 256)),
        Family("strided", "a column slice of a wider buffer (row stride > E)", _strided, share=0.6, sizes=(1, 64, 1024)),
        Family("batch_sizes", "batch sizes 1..1025, 1536, 4096", _batch_sizes, share=2.0, sizes=EDGE_BATCH_SIZES),
    ]
}


def _seed(*parts) -> int:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _budgets(families: list[str], total_rows: int) -> dict[str, int]:
    """Rows per family, by share, summing to exactly ``total_rows`` (largest remainders
    get the rounding rows); every family gets at least one row."""
    whole = sum(FAMILIES[name].share for name in families)
    exact = {name: total_rows * FAMILIES[name].share / whole for name in families}
    budgets = {name: int(v) for name, v in exact.items()}
    by_remainder = sorted(families, key=lambda name: exact[name] - budgets[name], reverse=True)
    for name in by_remainder[: total_rows - sum(budgets.values())]:
        budgets[name] += 1
    return {name: max(1, rows) for name, rows in budgets.items()}


def planned_rows(families: list[str], total_rows: int) -> int:
    """Rows ``iter_plan`` yields in all (each family's budget, at least 1)."""
    return sum(_budgets(families, total_rows).values())


def iter_plan(families: list[str], total_rows: int, seed: int, experts: int, topk: int) -> Iterator[CaseSpec]:
    """Spread ``total_rows`` over ``families`` by share, one spec at a time; deterministic in ``seed``.

    Each family cycles through its case sizes; ``batch_sizes`` first runs its
    edge sizes, then fills its budget with other sizes drawn from 1..1025.
    An iterator, so 100 million rows (about 400,000 specs) run in constant memory.
    """
    for name, budget in _budgets(families, total_rows).items():
        sizes = FAMILIES[name].sizes
        gen = None
        index, used = 0, 0
        while used < budget:
            if index < len(sizes):
                rows = sizes[index]
            elif name == "batch_sizes":
                if gen is None:
                    gen = torch.Generator().manual_seed(_seed(seed, name, "sizes"))
                rows = int(torch.randint(1, 1026, (1,), generator=gen))
            else:
                rows = sizes[index % len(sizes)]
            rows = min(rows, budget - used) if used else rows
            yield CaseSpec(name, _seed(seed, name, index), rows, experts, topk)
            used += rows
            index += 1


def plan(families: list[str], total_rows: int, seed: int, experts: int, topk: int) -> list[CaseSpec]:
    """``iter_plan`` as a list."""
    return list(iter_plan(families, total_rows, seed, experts, topk))


def build_case(spec: CaseSpec, device: str = "cpu") -> Case:
    """The inputs of ``spec``, identical on every machine, placed on ``device``."""
    family = FAMILIES[spec.family]
    gen = torch.Generator().manual_seed(spec.case_seed)
    renormalize = bool(torch.randint(0, 4, (1,), generator=gen)) # 3 in 4 renormalize, as models do
    rsf = SCALING_FACTORS[int(torch.randint(0, len(SCALING_FACTORS), (1,), generator=gen))]
    bias_in_logits_dtype = bool(torch.randint(0, 2, (1,), generator=gen))
    x, bias, dtype = family.make(gen, spec.rows, spec.experts, spec.topk)
    scores = x.to(dtype)
    backing, offset = scores, 0
    if spec.family == "strided":
        offset = int(torch.randint(1, 64, (1,), generator=gen))
        backing = torch.full((spec.rows, offset + spec.experts + 37), 9.0, dtype=dtype)
        backing[:, offset : offset + spec.experts] = scores
    bias = bias.to(dtype) if bias_in_logits_dtype else bias.float()
    # Move the whole backing buffer, so strided rows keep their row stride on the device.
    scores = backing.to(device)[:, offset : offset + spec.experts]
    bias = bias.to(device)
    return Case(spec, scores, bias, renormalize, rsf)
