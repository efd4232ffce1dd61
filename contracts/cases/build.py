"""A case's tensors, rebuilt from its spec: identical on every machine.

Each case also draws its call options from its seed, among those its
contract admits (``CaseSpec.renormalize_options`` / ``scaling_options``):
renormalize on or off (3 in 4 on, as models do), routed_scaling_factor 1.0 / 2.5 / 2.827, bias in
fp32 or in the logits dtype, and for a contract with a per-expert weight scale (``spec.expert_scale``)
that scale, one value in [0.25, 2) per expert. Tensors are drawn on the CPU from a seeded
generator, then moved to the device.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .families import FAMILIES
from .pins import SCALING_FACTORS  # the factors a case draws (the plan pins each per launch class too)
from .spec import CaseSpec

__all__ = ["GAP", "SCALING_FACTORS", "Case", "build_case", "column_strided", "draw_expert_scale", "logits_dtype_name",
           "strided_bias", "transposed"]

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# What fills the gaps of a pinned column-strided logits or strided bias buffer: a logit or bias that ranks an expert
# first, so a router that reads a gap as a value chooses other experts (the strided family pads its rows so too).
GAP = 9.0
_NAMES = {v: k for k, v in _DTYPES.items()}


@dataclass
class Case:
    spec: CaseSpec
    scores: torch.Tensor
    bias: torch.Tensor | None
    renormalize: bool
    routed_scaling_factor: float
    # weight_scale="per_expert" contracts: the [E] fp32 scale this case's call passes (``spec.expert_scale``), else None
    expert_scale: torch.Tensor | None = None

    @property
    def family(self) -> str:
        return self.spec.family

    @property
    def topk(self) -> int:
        return self.spec.topk

    @property
    def group_args(self) -> dict:
        """The keyword arguments of a grouped call (``{}`` for an ungrouped contract)."""
        if self.spec.n_group <= 1:
            return {}
        return {"num_expert_group": self.spec.n_group, "topk_group": self.spec.topk_group}

    @property
    def call_kwargs(self) -> dict:
        """The keyword arguments of a call on this case, for the candidate and the oracle alike: the group shape, and
        the per-expert weight scale of a contract that has one."""
        extra = {} if self.expert_scale is None else {"expert_scale": self.expert_scale}
        return {**self.group_args, **extra}

    def sliced(self, spec, rows) -> "Case":
        """The case restricted to ``rows`` (int64 indices on its device), under ``spec``: the same call options."""
        return Case(spec, self.scores.index_select(0, rows), self.bias, self.renormalize, self.routed_scaling_factor, self.expert_scale)

    def call_shape(self, rows: int | None = None) -> dict:
        """What a ``covered`` gate is asked about a call on this case (``rows``: of one call, default the case's): the
        basics, the call options, and the layouts as torch's ``stride()`` gives them: ``logits_strides`` (row, column)
        and ``bias_stride`` (only with a bias); ``autocast`` only for a call under ``torch.autocast``. A bulk case's calls
        are row slices of it: the same strides."""
        bias = {} if self.bias is None else {"bias_stride": self.bias.stride(0)}
        # the call context a router may not serve: only under autocast, so that gates of before are asked as before
        autocast = {"autocast": self.spec.autocast} if self.spec.autocast else {}
        return dict(rows=self.spec.rows if rows is None else rows, experts=self.spec.experts, topk=self.spec.topk,
                    dtype=self.scores.dtype, bias_dtype=self.scores.dtype if self.bias is None else self.bias.dtype,
                    renormalize=self.renormalize, logits_strides=tuple(self.scores.stride()),
                    **bias, **autocast, **self.group_args)  # fmt: skip


def draw_expert_scale(experts: int, generator: torch.Generator) -> torch.Tensor:
    """A per-expert weight scale as the checks and the search draw it: distinct values in [0.25, 2), so that a router
    that ignores them, indexes them by slot or applies them before renormalizing gives other weights on nearly every
    row (on the generator's device)."""
    return 0.25 + 1.75 * torch.rand(experts, generator=generator, device=generator.device)


# The layouts a kernel may read wrongly, as the pinned cases and the search (strategies.RoutingExample) build them.
def column_strided(scores: torch.Tensor, step: int) -> torch.Tensor:
    """``scores`` as every ``step``-th column of a wider buffer from its second (storage offset 1, row stride
    step * E), the columns between them GAP, a logit that ranks first: a router that reads them routes otherwise."""
    rows, experts = scores.shape
    wide = torch.full((rows, step * experts), GAP, dtype=scores.dtype, device=scores.device)
    return wide[:, 1::step].copy_(scores)


def transposed(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` as the transpose of a contiguous [E, M] buffer: strides (1, M), a row stride 1 < E."""
    return scores.t().contiguous().t()


def strided_bias(bias: torch.Tensor, step: int, *, offset: int = 0) -> torch.Tensor:
    """``bias`` ``offset`` elements into its buffer (zeros before it: not where an allocation would start) and, with
    ``step`` > 1, every ``step``-th element of it, the elements between them GAP (a bias that ranks first)."""
    backing = torch.zeros(offset + step * bias.shape[0], dtype=bias.dtype, device=bias.device)
    if step > 1:
        backing[offset:] = GAP
    return backing[offset::step].copy_(bias)


def build_case(spec: CaseSpec, device: str = "cpu") -> Case:
    """The inputs of ``spec`` placed on ``device``: a coverage case is drawn on the CPU (the same bits on
    every machine), a bulk case on ``device`` itself (the same bits on every machine of that device kind).
    A captured case (``spec.source``) reads its rows from the logits file."""
    if spec.source:
        from .captured import build_captured

        return Case(spec, *build_captured(spec, device))
    family = FAMILIES[spec.family]
    gen = torch.Generator(device=device if spec.bulk else "cpu").manual_seed(spec.case_seed)
    on = {"generator": gen, "device": gen.device}
    renormalize = bool(torch.randint(0, 4, (1,), **on))  # 3 in 4 renormalize, as models do
    rsf = SCALING_FACTORS[int(torch.randint(0, len(SCALING_FACTORS), (1,), **on))]
    # Only the options the contract admits (the same draws, so a contract admitting all keeps its cases)
    if renormalize not in spec.renormalize_options:
        renormalize = spec.renormalize_options[0]
    if spec.scaling_options is not None and rsf not in spec.scaling_options:
        rsf = spec.scaling_options[0]
    # Pinned options (the plan pins only admitted ones), after the draws, so the other draws stay put.
    if spec.renormalize is not None and spec.renormalize in spec.renormalize_options:
        renormalize = spec.renormalize
    if spec.scaling is not None and (spec.scaling_options is None or spec.scaling in spec.scaling_options):
        rsf = spec.scaling
    bias_in_logits_dtype = bool(torch.randint(0, 2, (1,), **on))
    groups = {"n_group": spec.n_group, "topk_group": spec.topk_group} if family.grouped else {}
    x, bias, dtype = family.make_for(spec.bulk)(gen, spec.rows, spec.experts, spec.topk, **groups)
    dtype = dtype if spec.logits_dtype is None else _DTYPES[spec.logits_dtype]  # pinned (fp16 logits exist only so)
    scores = x.to(dtype)
    backing, offset = scores, 0
    if family.strided:
        offset = int(torch.randint(1, 64, (1,), **on))
        # A pinned offset (0: rows further apart than E that start the storage) after the draw, so the other draws stay put.
        offset = offset if spec.offset is None else spec.offset
        backing = torch.full((spec.rows, offset + spec.experts + 37), 9.0, dtype=dtype, device=gen.device)
        backing[:, offset : offset + spec.experts] = scores
    bias = bias.to(dtype) if bias_in_logits_dtype else bias.float()
    if spec.bias_dtype is not None:  # pinned (fp32 logits with a bf16 bias exists only this way)
        bias = bias.to(_DTYPES[spec.bias_dtype])
    if spec.zero_bias:  # pinned: a freshly initialised correction bias
        bias = torch.zeros_like(bias)
    # Move the whole backing buffer, so strided rows keep their row stride on the device.
    scores = backing.to(device)[:, offset : offset + spec.experts]
    bias = bias.to(device) if spec.bias else None  # a contract without a correction bias: the candidate gets None
    if spec.logits_offset and not family.strided:  # pinned: contiguous rows, not where an allocation would start
        backing_logits = torch.zeros(spec.logits_offset + scores.numel(), dtype=scores.dtype, device=scores.device)
        backing_logits[spec.logits_offset :] = scores.reshape(-1)
        scores = backing_logits[spec.logits_offset :].view(spec.rows, spec.experts)
    if spec.column_stride > 1:  # pinned
        scores = column_strided(scores, spec.column_stride)
    elif spec.transposed:  # pinned
        scores = transposed(scores)
    if bias is not None and (spec.bias_offset or spec.bias_stride > 1):  # pinned
        bias = strided_bias(bias, spec.bias_stride, offset=spec.bias_offset)
    # Drawn last, so a case's other draws stay what they were.
    scale = draw_expert_scale(spec.experts, gen).to(device) if spec.expert_scale else None
    return Case(spec, scores, bias, renormalize, rsf, scale)


@functools.lru_cache(maxsize=None)
def _family_dtype(family: str, experts: int, topk: int, n_group: int, topk_group: int) -> str:
    spec = CaseSpec(family, 0, 1, experts, topk, n_group=n_group, topk_group=topk_group)
    return _NAMES.get(build_case(spec).scores.dtype, str(build_case(spec).scores.dtype))


def logits_dtype_name(spec: CaseSpec) -> str:
    """The logits dtype of ``spec`` ("bf16", "fp16", "fp32"): pinned, or its family's, from a one-row case of it."""
    if spec.logits_dtype is not None:
        return spec.logits_dtype
    return _family_dtype(spec.family, spec.experts, spec.topk, spec.n_group, spec.topk_group)
