"""Hypothesis strategies for router inputs, built to find tie and edge bugs and to shrink well.

A routing input is a description first (``RoutingExample``: small frozen
dataclasses), turned into tensors by ``RoutingExample.tensors()``. Each row is
a ``Fill`` (what most experts hold) plus a few ``Patch`` es (a value on an
arithmetic run of experts), so a big ``[M, 896]`` row shrinks to "every
logit 0.0 except these three": the fill shrinks to a constant 0.0, patches
shrink away, runs shrink to single experts.

What the strategies aim at (spec sections 2, 3, 9):

- few distinct values, on the bf16 grid (``levels`` fills, value palettes);
- tie pools at the cutoff: ``cutoff_pool`` puts ``a < k`` experts strictly
  above a pool of more than ``k - a`` tied experts;
- NaN and +-inf sprinkled in (palettes and ``specials`` fills);
- saturated sigmoids (logits 20 and 100 both give exactly 1.0, -120 gives 0.0);
- biases that create ties after the addition (``BiasTie``: the bias of an
  expert is ``target - sigmoid(x)`` in fp32, so ``sig + bias`` lands on the
  target for several experts with different logits) and biases on a 2^-9
  grid that create near ties;
- row stride > E (a column slice of a wider buffer), probe rows at any
  position of a padded batch.

Shapes: Kimi-K3's ``(896, 16)`` first (the shrink target), smaller ones only
where the candidate ``covers`` them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

import oracle

__all__ = [
    "BIAS_PALETTE",
    "LOGIT_PALETTE",
    "SHAPES",
    "BiasTie",
    "Fill",
    "Patch",
    "RoutingExample",
    "most_common_value",
    "nondefault_entries",
    "routing_examples",
]

SHAPES = ((896, 16), (384, 8), (256, 8), (224, 16), (64, 4), (16, 4), (8, 2))
DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
# First entries are the shrink targets. 20 and 100 saturate the sigmoid to 1.0, -120 to 0.0.
LOGIT_PALETTE = (0.0, 1.0, -1.0, 2.0, 0.5, 3.0, -2.0, 20.0, 100.0, -120.0, -0.0, math.nan, math.inf, -math.inf, 1.5, 4.0, -4.0)
BIAS_PALETTE = (0.0, 0.5, -0.5, 1.0, 2.0**-9, -(2.0**-9), 2.0**-8, -0.0, -math.inf, math.inf, math.nan, 1e-3, 2.0**-140)
STRIDES = (1, 3, 5, 11, 65, 129, 257)
PAD_ROWS = (0, 1, 6, 63, 383, 1024)
SCALING = (1.0, 2.5, 2.827)


@dataclass(frozen=True)
class Fill:
    """What a row's experts hold before patches.

    ``constant``: ``value`` everywhere. ``levels``: each expert one of
    ``values`` (few distinct values: ties everywhere). ``noise``: normal
    logits times ``scale``. ``band``: ``value + U(0, scale)`` (a narrow band:
    exact and near ties in bf16). ``specials``: noise with NaN, +inf, -inf at
    rate ``rate`` each. Random kinds draw from a generator seeded with ``seed``.
    """

    kind: str = "constant"
    value: float = 0.0
    values: tuple[float, ...] = ()
    scale: float = 1.0
    rate: float = 0.0
    seed: int = 0

    def make(self, experts: int) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed)
        if self.kind == "constant":
            return torch.full((experts,), self.value, dtype=torch.float32)
        if self.kind == "levels":
            pick = torch.randint(0, len(self.values), (experts,), generator=gen)
            return torch.tensor(self.values, dtype=torch.float32)[pick]
        if self.kind == "band":
            return self.value + torch.rand(experts, generator=gen) * self.scale
        row = torch.randn(experts, generator=gen) * self.scale
        if self.kind == "specials":
            u = torch.rand(experts, generator=gen)
            row[u < self.rate] = math.nan
            row[(u >= self.rate) & (u < 2 * self.rate)] = math.inf
            row[(u >= 2 * self.rate) & (u < 3 * self.rate)] = -math.inf
        return row


@dataclass(frozen=True)
class Patch:
    """``value`` on experts ``start, start + stride, ...`` (``count`` of them, modulo E)."""

    value: float
    start: int = 0
    count: int = 1
    stride: int = 1

    def experts(self, experts: int) -> list[int]:
        return list(dict.fromkeys((self.start + i * self.stride) % experts for i in range(self.count)))


@dataclass(frozen=True)
class BiasTie:
    """Biases that make ``sig(x[row, e]) + bias[e] == target`` (fp32) for the patched experts of ``row``."""

    target: float
    start: int = 0
    count: int = 2
    stride: int = 1
    row: int = 0


@dataclass(frozen=True)
class Row:
    fill: Fill = Fill()
    patches: tuple[Patch, ...] = ()


@dataclass(frozen=True)
class RoutingExample:
    experts: int
    topk: int
    dtype: str = "bfloat16"
    bias_dtype: str = "float32"
    renormalize: bool = False
    routed_scaling_factor: float = 1.0
    rows: tuple[Row, ...] = (Row(),)
    bias: Row = Row()
    bias_ties: tuple[BiasTie, ...] = ()
    pad_rows: int = 0  # extra rows of normal logits around the rows above
    position: int = 0  # index of the first described row inside the padded batch
    pad_seed: int = 0
    row_offset: int = 0  # > 0: scores are a column slice of a wider buffer starting at this column
    contract: str = "aiter"  # whose sigmoid BiasTie solves with
    _cache: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    @property
    def total_rows(self) -> int:
        return len(self.rows) + self.pad_rows

    def _raw(self) -> tuple[torch.Tensor, torch.Tensor]:
        e = self.experts
        described = []
        for row in self.rows:
            values = row.fill.make(e)
            for p in row.patches:
                values[p.experts(e)] = p.value
            described.append(values)
        pad = torch.randn(self.pad_rows, e, generator=torch.Generator().manual_seed(self.pad_seed)) * 2.0
        pos = min(self.position, self.pad_rows)
        x = torch.cat([pad[:pos], torch.stack(described), pad[pos:]]) if self.pad_rows else torch.stack(described)
        bias = self.bias.fill.make(e)
        for p in self.bias.patches:
            bias[p.experts(e)] = p.value
        scores = x.to(DTYPES[self.dtype])
        if self.bias_ties:
            zero = torch.zeros(e)
            sig, _ = oracle.ranking_values(scores[pos : pos + len(self.rows)], zero, self.contract)
            for tie in self.bias_ties:
                row = sig[min(tie.row, len(self.rows) - 1)]
                idx = Patch(0.0, tie.start, tie.count, tie.stride).experts(e)
                bias[idx] = torch.tensor(tie.target, dtype=torch.float32) - row[idx]
        return scores, bias.to(DTYPES[self.bias_dtype])

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores [M, E], bias [E])`` on the CPU, in the example's dtypes (fresh copies)."""
        if "t" not in self._cache:
            self._cache["t"] = self._raw()
        scores, bias = self._cache["t"]
        if self.row_offset:
            backing = torch.full((scores.shape[0], self.row_offset + self.experts + 7), 9.0, dtype=scores.dtype)
            backing[:, self.row_offset : self.row_offset + self.experts] = scores
            return backing[:, self.row_offset : self.row_offset + self.experts], bias.clone()
        return scores.clone(), bias.clone()

    def described_rows(self) -> range:
        pos = min(self.position, self.pad_rows)
        return range(pos, pos + len(self.rows))


def _canonical_bits(values: torch.Tensor) -> torch.Tensor:
    # Bits, not values: -0.0 and +0.0 are different inputs; every NaN is one value.
    v = values.detach().float().cpu()
    return torch.where(torch.isnan(v), torch.full_like(v, math.nan), v).view(torch.int32)


def most_common_value(values: torch.Tensor) -> float:
    """The value most entries of a 1-D tensor hold (a row's "default")."""
    uniq, counts = torch.unique(_canonical_bits(values), return_counts=True)
    return float(uniq[counts.argmax()].view(torch.float32))


def nondefault_entries(values: torch.Tensor) -> dict[int, float]:
    """``{index: value}`` for the entries of a 1-D tensor that differ from its most common value."""
    bits = _canonical_bits(values)
    uniq, counts = torch.unique(bits, return_counts=True)
    default = uniq[counts.argmax()]
    v = values.detach().float().cpu()
    return {int(i): float(v[i]) for i in (bits != default).nonzero().flatten().tolist()}


# -- strategies -------------------------------------------------------------------------


def _bf16(x: float) -> float:
    return float(torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).float())


def logit_values() -> st.SearchStrategy[float]:
    """Palette values first (few distinct values, specials), then any bf16-grid value in [-16, 16]."""
    return st.one_of(
        st.sampled_from(LOGIT_PALETTE),
        st.floats(-16, 16, width=32).map(_bf16),
        st.floats(-100, 100, width=32),
    )


def bias_values() -> st.SearchStrategy[float]:
    return st.one_of(
        st.sampled_from(BIAS_PALETTE),
        st.integers(-64, 64).map(lambda i: i * 2.0**-9),
        st.floats(-1, 1, width=32),
    )


def fills(values: st.SearchStrategy[float], *, noise_scales=(0.5, 2.0, 8.0)) -> st.SearchStrategy[Fill]:
    seeds = st.integers(0, 2**31 - 1)
    return st.one_of(
        st.builds(Fill, kind=st.just("constant"), value=values),
        st.builds(Fill, kind=st.just("levels"), values=st.lists(values, min_size=2, max_size=4).map(tuple), seed=seeds),
        st.builds(Fill, kind=st.just("noise"), scale=st.sampled_from(noise_scales), seed=seeds),
        st.builds(Fill, kind=st.just("band"), value=st.sampled_from((1.5, 0.0, -3.0, 8.0)), scale=st.sampled_from((1.0, 0.1)), seed=seeds),
        st.builds(Fill, kind=st.just("specials"), scale=st.sampled_from(noise_scales), rate=st.sampled_from((0.01, 0.05, 0.3)), seed=seeds),
    )


def patches(experts: int, values: st.SearchStrategy[float]) -> st.SearchStrategy[Patch]:
    return st.builds(
        Patch,
        value=values,
        start=st.integers(0, experts - 1),
        count=st.one_of(st.integers(1, 4), st.integers(1, experts)),
        stride=st.sampled_from(STRIDES),
    )


@st.composite
def cutoff_pool(draw, experts: int, topk: int) -> tuple[Patch, ...]:
    """``a < k`` experts strictly above a pool of ``p > k - a`` tied experts: the cutoff falls in the pool."""
    above = draw(st.integers(0, topk - 1))
    pool = draw(st.integers(topk - above + 1, max(topk - above + 1, min(experts - above, 4 * topk))))
    tie = draw(st.sampled_from((1.0, 2.0, 20.0, 0.0, -1.0, 100.0)))
    high = draw(st.sampled_from((4.0, 100.0, 20.0, 3.0)))
    start = draw(st.integers(0, experts - 1))
    stride = draw(st.sampled_from(STRIDES))
    runs = [Patch(tie, (start + above * stride) % experts, pool, stride)]
    if above:
        runs.insert(0, Patch(max(high, tie + 1.0), start, above, stride))
    return tuple(runs)


@st.composite
def rows(draw, experts: int, topk: int) -> Row:
    values = logit_values()
    fill = draw(fills(values))
    extra = draw(st.one_of(st.just(()), cutoff_pool(experts, topk)))
    return Row(fill, extra + tuple(draw(st.lists(patches(experts, values), max_size=6))))


@st.composite
def routing_examples(
    draw,
    *,
    shapes=SHAPES,
    dtypes=(("bfloat16", "float32"), ("bfloat16", "bfloat16"), ("float32", "float32"), ("float32", "bfloat16")),
    contract: str = "aiter",
    max_rows: int = 4,
    pad_rows=PAD_ROWS,
) -> RoutingExample:
    """Router inputs (see the module docstring). ``shapes`` and ``dtypes`` should already be
    filtered to what the candidate covers; the first of each is the shrink target."""
    experts, topk = draw(st.sampled_from(shapes))
    dtype, bias_dtype = draw(st.sampled_from(dtypes))
    described = tuple(draw(st.lists(rows(experts, topk), min_size=1, max_size=max_rows)))
    bias_values_ = bias_values()
    bias = Row(
        draw(st.one_of(st.just(Fill()), fills(bias_values_, noise_scales=(0.05, 0.5)))),
        tuple(draw(st.lists(patches(experts, bias_values_), max_size=4))),
    )
    ties = tuple(
        draw(
            st.lists(
                st.builds(
                    BiasTie,
                    target=st.sampled_from((1.0, 0.75, 0.5, 1.5)),
                    start=st.integers(0, experts - 1),
                    count=st.integers(2, 2 * topk),
                    stride=st.sampled_from(STRIDES),
                    row=st.integers(0, len(described) - 1),
                ),
                max_size=2,
            )
        )
    )
    pad = draw(st.sampled_from(pad_rows))
    return RoutingExample(
        experts=experts,
        topk=topk,
        dtype=dtype,
        bias_dtype=bias_dtype,
        renormalize=draw(st.booleans()),
        routed_scaling_factor=draw(st.sampled_from(SCALING)),
        rows=described,
        bias=bias,
        bias_ties=ties,
        pad_rows=pad,
        position=draw(st.integers(0, pad)) if pad else 0,
        pad_seed=draw(st.integers(0, 2**31 - 1)) if pad else 0,
        row_offset=draw(st.sampled_from((0, 0, 1, 33))),
        contract=contract,
    )
