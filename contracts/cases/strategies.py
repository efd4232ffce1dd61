"""Hypothesis strategies for router inputs, built to find tie and edge bugs and to shrink well.

A routing input is a description first (``RoutingExample``: small frozen
dataclasses), turned into tensors by ``RoutingExample.tensors()``. Each row is
a ``Fill`` (what most experts hold) plus a few ``Patch`` es (a value on an
arithmetic run of experts), so a big ``[M, 896]`` row shrinks to "every
logit 0.0 except these three": the fill shrinks to a constant 0.0, patches
shrink away, runs shrink to single experts.

What the strategies aim at (docs/contracts.md: why exact, the tie table, near ties):

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
  position of a padded batch; logits of column stride 2 (every other column
  of a wider buffer) or transposed (an [E, M] buffer's transpose), a bias of
  stride 2 (the gaps hold a value that ranks first if read);
- themes (``THEMES``): an example draws all its values from one theme; the
  themed ones keep every value in a small palette so that rare conjunctions
  (every chosen sigmoid 0; NaN and -inf at the cutoff; sigmoids that
  underflow next to exact zeros) come up in a few hundred examples.

Shapes: Kimi-K3's ``(896, 16)`` first (the shrink target), smaller ones only
where the candidate ``covers`` them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field

import torch
from hypothesis import strategies as st

import oracle

from .build import GAP, column_strided, draw_expert_scale, strided_bias, transposed
from .pins import CALL_CONTEXTS

__all__ = [
    "BIAS_PALETTE",
    "DTYPE_PAIRS",
    "LOGIT_PALETTE",
    "SHAPES",
    "BiasTie",
    "Fill",
    "Patch",
    "Row",
    "RoutingExample",
    "THEMES",
    "cutoff_pool",
    "most_common_value",
    "nondefault_entries",
    "routing_examples",
]

SHAPES = ((896, 16), (384, 8), (256, 8), (224, 16), (64, 4), (16, 4), (8, 2))
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
# (logits, bias) dtype pairs, the shrink target first: the four of the families, then fp16 in either place.
DTYPE_PAIRS = (("bfloat16", "float32"), ("bfloat16", "bfloat16"), ("float32", "float32"), ("float32", "bfloat16"),
               ("float16", "float32"), ("float16", "float16"), ("float16", "bfloat16"), ("bfloat16", "float16"),
               ("float32", "float16"))  # fmt: skip
# First entries are the shrink targets. 20 and 100 saturate the sigmoid to 1.0, -120 to 0.0.
LOGIT_PALETTE = (0.0, 1.0, -1.0, 2.0, 0.5, 3.0, -2.0, 20.0, 100.0, -120.0, -0.0, math.nan, math.inf, -math.inf, 1.5, 4.0, -4.0)
BIAS_PALETTE = (0.0, 0.5, -0.5, 1.0, 2.0**-9, -(2.0**-9), 2.0**-8, -0.0, -math.inf, math.inf, math.nan, 1e-3, 2.0**-140)
# Palettes that make rare conjunctions likely: the whole example draws its logits
# and biases from one theme ("any" is the shrink target).
THEMES: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "any": (LOGIT_PALETTE, BIAS_PALETTE),
    # sigmoid 0 (-120, -200, -inf) next to subnormal sigmoids (-90, -95, -100): the renormalize
    # guard, and an exp2 + rcp sigmoid that overflows to 0 below x = -88.7 (aiter's formula)
    "sigmoid_underflow": ((-120.0, -90.0, -100.0, -math.inf, -95.0, -200.0), (0.0, 1.0, 0.5, -math.inf, 2.0**-140)),
    "nan_and_inf": ((math.nan, -math.inf, math.inf, 0.0, -120.0), (0.0, -math.inf, math.nan, math.inf, -1.0)),
    "saturated": ((20.0, 100.0, 17.0, 30.0, -120.0, 0.0), (0.0, 2.0**-9, -(2.0**-9), 2.0**-24)),
    "signed_zero": ((0.0, -0.0, 1.0), (0.0, -0.0, -0.5, 0.5)),
}
STRIDES = (1, 3, 5, 11, 65, 129, 257)
PAD_ROWS = (0, 1, 6, 63, 383, 1024)
SCALING = oracle.SCALING_FACTORS  # the factors a case draws (contracts.cases.plan pins two more)


@dataclass(frozen=True)
class Fill:
    """What a row's experts hold before patches.

    ``constant``: ``base`` everywhere. The random kinds give ``density``
    percent of the experts a random value and ``base`` to the rest; a lower
    density keeps a subset of the same experts with the same values, so
    shrinking the density thins a random row out towards a constant one.
    ``levels``: one of ``values`` (few distinct values: ties everywhere).
    ``noise``: normal logits times ``scale``. ``band``: ``offset + U(0, scale)``
    (a narrow band: exact and near ties in bf16). ``specials``: noise with
    NaN, +inf and -inf at ``rate`` each. Random draws are seeded with ``seed``.
    """

    kind: str = "constant"
    base: float = 0.0
    density: int = 100
    values: tuple[float, ...] = ()
    offset: float = 0.0
    scale: float = 1.0
    rate: float = 0.0
    seed: int = 0

    def make(self, experts: int) -> torch.Tensor:
        row = torch.full((experts,), self.base, dtype=torch.float32)
        if self.kind == "constant":
            return row
        gen = torch.Generator().manual_seed(self.seed)
        if self.kind == "levels":
            drawn = torch.tensor(self.values, dtype=torch.float32)[torch.randint(0, len(self.values), (experts,), generator=gen)]
        elif self.kind == "band":
            drawn = self.offset + torch.rand(experts, generator=gen) * self.scale
        else:
            drawn = torch.randn(experts, generator=gen) * self.scale
            if self.kind == "specials":
                u = torch.rand(experts, generator=gen)
                drawn[u < self.rate] = math.nan
                drawn[(u >= self.rate) & (u < 2 * self.rate)] = math.inf
                drawn[(u >= 2 * self.rate) & (u < 3 * self.rate)] = -math.inf
        chosen = torch.rand(experts, generator=torch.Generator().manual_seed(self.seed ^ 0x5EED)) * 100 < self.density
        row[chosen] = drawn[chosen]
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
    pad_rows: int = 0  # extra rows around the described ones ("other rows, other values")
    position: int = 0  # index of the first described row inside the padded batch
    pad: Fill = Fill("noise", scale=2.0)  # padding row i uses this fill with seed + i
    theme: str = "any"  # the palette the values came from (see THEMES)
    row_offset: int = 0  # > 0: scores are a column slice of a wider buffer starting at this column
    # The logits' columns: "rows" (column stride 1, row_offset as above), "column_stride" (every other column of a
    # [M, 2E] buffer from its second) or "transposed" (an [E, M] buffer's transpose); the bias's stride (1 or 2).
    logits_layout: str = "rows"
    bias_stride: int = 1
    contract: str = "aiter"  # whose sigmoid BiasTie solves with
    # A contract with a per-expert weight scale (Gemma 4): the seed of the [E] scales the call passes
    # (contracts.cases.build.draw_expert_scale, as the checks draw them); None otherwise.
    expert_scale_seed: int | None = None
    # The context of the call: 0 the default (grad on, plain tensors, no autocast), i > 0 ``CALL_CONTEXTS[i - 1]``
    # (grad mode, the bias as a Parameter, logits requiring grad, autocast and its dtype, the default dtype, deterministic
    # algorithms)
    call_context: int = 0
    _cache: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    @property
    def context(self) -> dict:
        """The ``CaseSpec`` fields of the call context (``{}``: the default)."""
        return dict(CALL_CONTEXTS[self.call_context - 1]) if self.call_context else {}

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
        pos = min(self.position, self.pad_rows)
        if self.pad_rows:
            pad = [dataclasses.replace(self.pad, seed=self.pad.seed + i).make(e) for i in range(self.pad_rows)]
            x = torch.stack(pad[:pos] + described + pad[pos:])
        else:
            x = torch.stack(described)
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

    def expert_scale(self) -> torch.Tensor | None:
        """The call's ``[E]`` fp32 per-expert weight scale (CPU, fresh), or None for a contract without one."""
        if self.expert_scale_seed is None:
            return None
        return draw_expert_scale(self.experts, torch.Generator().manual_seed(self.expert_scale_seed))

    def tensors(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(scores [M, E], bias [E])`` on the CPU, in the example's dtypes (fresh copies)."""
        if "t" not in self._cache:
            self._cache["t"] = self._raw()
        scores, bias = self._cache["t"]
        bias = strided_bias(bias, self.bias_stride) if self.bias_stride > 1 else bias.clone()
        if self.logits_layout == "column_stride":
            return column_strided(scores, 2), bias
        if self.logits_layout == "transposed":
            return transposed(scores), bias
        if self.row_offset:
            backing = torch.full((scores.shape[0], self.row_offset + self.experts + 7), GAP, dtype=scores.dtype)
            backing[:, self.row_offset : self.row_offset + self.experts] = scores
            return backing[:, self.row_offset : self.row_offset + self.experts], bias
        return scores.clone(), bias


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


def logit_values(palette=LOGIT_PALETTE, *, free: bool = True) -> st.SearchStrategy[float]:
    """Palette values first (few distinct values, specials); if ``free``, also any bf16-grid
    value in [-16, 16] and any fp32 value in [-100, 100]."""
    if not free:
        return st.sampled_from(palette)
    return st.one_of(
        st.sampled_from(palette),
        st.floats(-16, 16, width=32).map(_bf16),
        st.floats(-100, 100, width=32),
    )


def bias_values(palette=BIAS_PALETTE, *, free: bool = True) -> st.SearchStrategy[float]:
    """Palette values first; if ``free``, also the 2^-9 grid (near ties) and any fp32 value in [-1, 1]."""
    if not free:
        return st.sampled_from(palette)
    return st.one_of(
        st.sampled_from(palette),
        st.integers(-64, 64).map(lambda i: i * 2.0**-9),
        st.floats(-1, 1, width=32),
    )


def fills(values: st.SearchStrategy[float], constants: st.SearchStrategy[float], *, noise_scales=(0.5, 2.0, 8.0), free: bool = True) -> st.SearchStrategy[Fill]:
    """A constant fill (from ``constants``, the palette) or a random one thinned to ``density`` percent.
    Without ``free`` only constant and ``levels`` fills: every value then comes from the palette."""
    seeds = st.integers(0, 2**31 - 1)
    density = st.integers(0, 100)
    kinds = [
        st.builds(Fill, kind=st.just("constant"), base=constants),
        st.builds(Fill, kind=st.just("levels"), base=constants, density=density, values=st.lists(values, min_size=2, max_size=4).map(tuple), seed=seeds),
    ]
    if free:
        kinds += [
            st.builds(Fill, kind=st.just("noise"), base=constants, density=density, scale=st.sampled_from(noise_scales), seed=seeds),
            st.builds(Fill, kind=st.just("band"), base=constants, density=density, offset=st.sampled_from((1.5, 0.0, -3.0, 8.0)), scale=st.sampled_from((1.0, 0.1)), seed=seeds),
            st.builds(Fill, kind=st.just("specials"), base=constants, density=density, scale=st.sampled_from(noise_scales), rate=st.sampled_from((0.01, 0.05, 0.3)), seed=seeds),
        ]
    return st.one_of(*kinds)


def patches(experts: int, values: st.SearchStrategy[float]) -> st.SearchStrategy[Patch]:
    return st.builds(
        Patch,
        value=values,
        start=st.integers(0, experts - 1),
        count=st.one_of(st.integers(1, 4), st.integers(1, experts)),
        stride=st.sampled_from(STRIDES),
    )


@st.composite
def cutoff_pool(draw, experts: int, topk: int, palette=LOGIT_PALETTE) -> tuple[Patch, ...]:
    """``a < k`` experts above a pool of ``p > k - a`` tied experts: the cutoff falls in the pool.

    "Above" has the larger logit; with the "saturated" theme both may still
    have a sigmoid of exactly 1.0, which makes one bigger pool.
    """
    above = draw(st.integers(0, topk - 1))
    pool = draw(st.integers(topk - above + 1, max(topk - above + 1, min(experts - above, 4 * topk))))
    finite = sorted(v for v in palette if math.isfinite(v)) or [0.0]
    tie = draw(st.sampled_from(finite))
    high = draw(st.sampled_from([v for v in finite if v > tie] or [tie + 1.0]))
    start = draw(st.integers(0, experts - 1))
    stride = draw(st.sampled_from(STRIDES))
    runs = [Patch(tie, (start + above * stride) % experts, pool, stride)]
    if above:
        runs.insert(0, Patch(high, start, above, stride))
    return tuple(runs)


# Strategies are built once per set of arguments, not on every draw: hypothesis validates a new strategy object and
# computes its properties before its first draw, and building the row strategies afresh on every example made that
# most of a search's time (178 of 225 s of a layout search on a 2-core host). The draws are the same either way.
def _once(build):
    """``build`` memoized on the repr of its arguments (ints, bools, tuples of floats): the repr tells -0.0 from 0.0,
    which equality (and so ``functools.lru_cache``) does not."""
    built: dict[str, st.SearchStrategy] = {}

    @functools.wraps(build)
    def once(*args):
        key = repr(args)
        if key not in built:
            built[key] = build(*args)
        return built[key]

    return once


@_once
def _row_parts(experts: int, topk: int, palette: tuple, free: bool) -> tuple:
    values = logit_values(palette, free=free)
    return (fills(values, st.sampled_from(palette), free=free), st.one_of(st.just(()), cutoff_pool(experts, topk, palette)),
            st.lists(patches(experts, values), max_size=6))  # fmt: skip


@st.composite
def rows(draw, experts: int, topk: int, palette=LOGIT_PALETTE, *, free: bool = True) -> Row:
    fill, pool, patch_lists = _row_parts(experts, topk, palette, free)
    fill = draw(fill)
    extra = draw(pool)
    return Row(fill, extra + tuple(draw(patch_lists)))


@_once
def _example_parts(experts: int, topk: int, logit_palette: tuple, bias_palette: tuple, free: bool, max_rows: int) -> tuple:
    """The strategies of ``routing_examples`` that depend only on the shape, the theme and ``max_rows``."""
    bias_values_ = bias_values(bias_palette, free=free)
    return (st.lists(rows(experts, topk, logit_palette, free=free), min_size=1, max_size=max_rows),
            st.one_of(st.just(Fill()), fills(bias_values_, st.sampled_from(bias_palette), noise_scales=(0.05, 0.5), free=free)),
            st.lists(patches(experts, bias_values_), max_size=4),
            st.builds(Fill, kind=st.just("noise"), base=st.sampled_from(logit_palette), density=st.integers(0, 100), scale=st.just(2.0),
                      seed=st.integers(0, 2**31 - 1)))  # fmt: skip


@_once
def _bias_ties(experts: int, topk: int, described_rows: int) -> st.SearchStrategy:
    return st.lists(st.builds(BiasTie, target=st.sampled_from((1.0, 0.75, 0.5, 1.5)), start=st.integers(0, experts - 1),
                              count=st.integers(2, 2 * topk), stride=st.sampled_from(STRIDES), row=st.integers(0, described_rows - 1)),
                    max_size=2)  # fmt: skip


# An example's call context (``RoutingExample.call_context``): the default for half of them, else the grad mode first
# (each a third of the rest: inference mode is a quarter of the contexts but what every engine serves under), then one
# of that mode's contexts.
_CALL_CONTEXT_INDICES = st.one_of(st.just(0), st.sampled_from(("on", "off", "inference")).flatmap(
    lambda mode: st.sampled_from([i + 1 for i, c in enumerate(CALL_CONTEXTS) if c["grad_mode"] == mode])))  # fmt: skip

# The logits layouts an example draws, the plain one (the shrink target) most often.
LOGITS_LAYOUTS = ("rows", "rows", "rows", "column_stride", "transposed")


@st.composite
def routing_examples(
    draw,
    *,
    shapes=SHAPES,
    dtypes=DTYPE_PAIRS,
    contract: str = "aiter",
    max_rows: int = 4,
    pad_rows=PAD_ROWS,
) -> RoutingExample:
    """Router inputs (see the module docstring). ``shapes`` and ``dtypes`` should already be
    filtered to what the candidate covers; the first of each is the shrink target."""
    experts, topk = draw(st.sampled_from(shapes))
    dtype, bias_dtype = draw(st.sampled_from(dtypes))
    admitted = oracle.get_contract(contract).admitted_options()  # only the call options the contract's router takes
    theme = draw(st.sampled_from(tuple(THEMES)))
    logit_palette, bias_palette = THEMES[theme]
    free = theme == "any"  # a theme keeps every value in its palettes
    row_lists, bias_fills, bias_patches, pad_fills = _example_parts(experts, topk, logit_palette, bias_palette, free, max_rows)
    described = tuple(draw(row_lists))
    bias = Row(draw(bias_fills), tuple(draw(bias_patches)))
    ties = tuple(draw(_bias_ties(experts, topk, len(described))))
    pad = draw(st.sampled_from(pad_rows))
    return RoutingExample(
        experts=experts,
        topk=topk,
        dtype=dtype,
        bias_dtype=bias_dtype,
        renormalize=draw(st.booleans() if len(admitted["renormalize"]) == 2 else st.just(admitted["renormalize"][0])),
        routed_scaling_factor=draw(st.sampled_from(admitted["routed_scaling_factor"] or SCALING)),
        rows=described,
        bias=bias,
        bias_ties=ties,
        pad_rows=pad,
        position=draw(st.integers(0, pad)) if pad else 0,
        pad=draw(pad_fills) if pad else Fill("noise", scale=2.0),
        theme=theme,
        row_offset=draw(st.sampled_from((0, 0, 1, 33))),
        contract=contract,
        expert_scale_seed=draw(st.integers(0, 2**31 - 1)) if admitted.get("expert_scale") else None,
        # Drawn last, so that the draws above stay what they were; each shrinks to the plain layout.
        logits_layout=draw(st.sampled_from(LOGITS_LAYOUTS)),
        bias_stride=draw(st.sampled_from((1, 1, 1, 2))),
        # Last of all; half the examples call in the default context, which it shrinks to.
        call_context=draw(_CALL_CONTEXT_INDICES),
    )
