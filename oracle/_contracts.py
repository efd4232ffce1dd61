"""A routing contract as data: small orthogonal fields, validated on construction.

Every behaviour of the oracle (and of the harness's attribution) is decided
by a field, never by a contract's name. ``docs/contracts_as_data.md`` is the
field reference; ``FIELD_VALUES`` lists the allowed values of each
enumerated field.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass

from ._clauses import Clause, ClauseName, clauses_for
from ._validate import FIELD_RANGES

__all__ = ["FIELD_VALUES", "SCALING_FACTORS", "Contract", "ContractError"]

_NEG_INF = -math.inf

# Allowed values of the enumerated fields, in the order the docs give them.
FIELD_VALUES: dict[str, tuple] = {
    "scoring": ("sigmoid", "softmax", "softmax_of_topk", "sqrt_softplus", "sigmoid_of_topk", "softcap_sigmoid"),
    "sigmoid_formula": ("correctly_rounded", "expf"),
    "score_precision": ("fp32", "input"),
    "weight_precision": ("fp32", "input"),
    "bias": ("none", "ranks_only", "in_weight"),
    "group_score": ("top2_sum", "max", "topk_share_sum"),
    "group_mask": (_NEG_INF, 0.0),
    "group_tie_rule": ("lowest", "highest"),
    "tie_rule": ("aiter", "lowest"),
    "nan_rule": ("last", "never", "first"),
    "renormalize": ("guard", "eps", "raw", "lp"),
    "renormalize_when": ("call", "always", "never"),
    "sum_order": ("sequential",),
    "scaling": ("after", "fused"),
    "output_order": ("rank", "selection", "any"),
    "weight_scale": ("none", "per_expert"),
    "shared_expert_slot": ("none", "last"),
    "admitted_renormalize": ("any", "default"),
    "admitted_scaling": ("any", "default"),
}

# The routed_scaling_factor values a case draws when a contract admits any (the contract's own default is
# added): 1.0, DeepSeek-V3's 2.5 and Kimi-K2's 2.827.
SCALING_FACTORS: tuple[float, ...] = (1.0, 2.5, 2.827)


class ContractError(ValueError):
    """A contract field is malformed (the one-line message names the field, the value and what is allowed)."""


@dataclass(frozen=True, kw_only=True)
class Contract:
    """One routing contract. Field reference: ``docs/contracts_as_data.md``.

    Tolerances: a weight ``a`` matches the oracle's ``e`` when
    ``|a - e| <= weight_atol + weight_rtol * |e|`` (NaN matches only NaN).
    Near ties (docs/contracts.md#tolerances-and-near-ties): an expert's
    ranking value may be off by ``near_tie_ulp + near_tie_x_ulp * t`` ULP
    in a faithful implementation,
    where ``t = (1 - sig) * |x|`` for a sigmoid (the error of
    ``exp2(-log2(e) * x)``), ``t = |x - max(x)|`` for a softmax, and the
    ranking of ``softmax_of_topk`` (the logits) is exact. Zero for both
    means bit-exact.
    """

    # identity
    name: str
    summary: str = ""
    source: str = ""
    # scores: what ranks and what the weights are made of
    scoring: str
    softcap: float = 0.0  # softcap_sigmoid's cap c: sig(tanh(x / c) * c); 0 for every other scoring
    sigmoid_formula: str = "correctly_rounded"
    score_precision: str = "fp32"
    # fp32, or input: the weights gathered, renormalized and scaled in the logits' dtype, each step rounded to it
    # (Megatron-core's router: probs in logits.dtype)
    weight_precision: str = "fp32"
    bias: str = "none"
    # expert groups (n_group = topk_group = 1: none); the default group shape
    n_group: int = 1
    topk_group: int = 1
    group_score: str = "top2_sum"
    group_mask: float = _NEG_INF
    group_tie_rule: str = "lowest"
    # selection
    tie_rule: str = "lowest"
    nan_rule: str = "last"
    floor: float | None = None
    # weights
    renormalize: str = "guard"
    # call: renormalized when the call says so; always: whatever the call says, when topk > 1 (Megatron-core's sigmoid)
    renormalize_when: str = "call"
    renorm_eps: float = 1e-20
    renorm_p: float = 1.0  # renormalize="lp": weights divided by their L_p norm (DBRX's moe_normalize_expert_weights)
    sum_order: str = "sequential"
    scaling: str = "after"
    output_order: str = "rank"
    weight_scale: str = "none"  # per_expert: weights times a per-expert scale vector (Gemma 4), after renormalization
    shared_expert_slot: str = "none"  # last: one more output column, the shared expert (id E), weight sum / rsf
    zero_experts: int = 0  # the last zero_experts ids are zero-computation experts (LongCat-Flash); they route as any
    # tolerances
    weight_rtol: float = 1e-5
    weight_atol: float = 1e-6
    near_tie_ulp: int = 4
    near_tie_x_ulp: float = 0.0
    # default shape and call
    experts: int
    topk: int
    routed_scaling_factor: float = 1.0
    default_renormalize: bool = True
    # the call options the model's router can be called with: "any" (the harness draws both renormalize
    # values / the usual scaling factors) or "default" (only default_renormalize / routed_scaling_factor)
    admitted_renormalize: str = "any"
    admitted_scaling: str = "any"

    def __post_init__(self) -> None:
        _validate(self)

    # ---- derived properties the oracle and the harness decide by
    @property
    def is_grouped(self) -> bool:
        return self.n_group > 1

    @property
    def has_bias(self) -> bool:
        return self.bias != "none"

    @property
    def has_fallback(self) -> bool:
        """Slots no eligible value can fill hold expert 0 (the serial scan's fallback)."""
        return self.floor is not None or self.nan_rule == "never"

    @property
    def allows_duplicate_ids(self) -> bool:
        return self.has_fallback

    @property
    def clauses(self) -> tuple[Clause, ...]:
        return _clauses(self)

    @property
    def clause_names(self) -> tuple[ClauseName, ...]:
        return tuple(c.name for c in self.clauses)

    def clause(self, name: str | ClauseName) -> Clause:
        try:
            key = ClauseName(name)
        except ValueError:
            raise KeyError(f"{name!r} is not a clause name; use one of {[n.value for n in ClauseName]}") from None
        for c in self.clauses:
            if c.name == key:
                return c
        raise KeyError(f"contract {self.name!r} has no clause {key.value!r}; it has {[n.value for n in self.clause_names]}")

    @property
    def admitted_renormalize_values(self) -> tuple[bool, ...]:
        """The renormalize values a call under this contract may pass."""
        return (True, False) if self.admitted_renormalize == "any" else (self.default_renormalize,)

    @property
    def admitted_scaling_factors(self) -> tuple[float, ...] | None:
        """The routed_scaling_factor values a call may pass (None: any finite value; cases draw ``SCALING_FACTORS``)."""
        return None if self.admitted_scaling == "any" else (self.routed_scaling_factor,)

    def admitted_options(self) -> dict:
        """What the case plan may draw: ``{"renormalize": (bools), "routed_scaling_factor": (floats) or None,
        "expert_scale": bool}`` (the last: a call passes a per-expert weight scale, which the cases draw)."""
        return {"renormalize": self.admitted_renormalize_values, "routed_scaling_factor": self.admitted_scaling_factors,
                "expert_scale": self.weight_scale == "per_expert"}

    def admits(self, *, renormalize: bool, routed_scaling_factor: float) -> str | None:
        """None when the call options are ones this contract's router can be called with, else why not (one line)."""
        if renormalize not in self.admitted_renormalize_values:
            return (f"renormalize={renormalize} is not an option of contract {self.name!r}: its router always "
                    f"{'renormalizes' if self.default_renormalize else 'leaves the weights unnormalized'}; pass renormalize={self.default_renormalize}")
        factors = self.admitted_scaling_factors
        if factors is not None and float(routed_scaling_factor) not in factors:
            return (f"routed_scaling_factor={routed_scaling_factor} is not an option of contract {self.name!r}: its router "
                    f"scales by {self.routed_scaling_factor:g} only; pass routed_scaling_factor={self.routed_scaling_factor:g}")
        return None

    def replace(self, **changes) -> Contract:
        """A copy with ``changes`` applied (validated like a new contract)."""
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        """The fields as plain values (for reports; ``-inf`` stays a float)."""
        return dataclasses.asdict(self)


@functools.lru_cache(maxsize=256)
def _clauses(c: Contract) -> tuple[Clause, ...]:
    return clauses_for(c)


FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Contract))


# ---------------------------------------------------------------- validation


def _fail(c, field: str, value, allowed: str) -> None:
    raise ContractError(f"contract {c.name!r}: {field}={_show(value)} is not allowed; {allowed}")


def _show(value) -> str:
    return "-inf" if isinstance(value, float) and value == _NEG_INF else repr(value)


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_choice(c, field: str) -> None:
    value, allowed = getattr(c, field), FIELD_VALUES[field]
    if field == "group_mask":
        ok = _is_real(value) and (value == _NEG_INF or (value == 0 and math.copysign(1.0, value) > 0))
    else:
        ok = isinstance(value, str) and value in allowed
    if not ok:
        _fail(c, field, value, "use one of " + ", ".join(_show(a) if not isinstance(a, str) else repr(a) for a in allowed))


def _check_real(c, field: str, *, minimum: float | None = 0.0, optional: bool = False) -> None:
    value = getattr(c, field)
    if optional and value is None:
        return
    if not _is_real(value) or not math.isfinite(value) or (minimum is not None and value < minimum):
        bound = f" >= {minimum:g}" if minimum is not None else ""
        _fail(c, field, value, f"use a finite number{bound}" + (" or leave it unset (none)" if optional else ""))
    object.__setattr__(c, field, float(value))
    _check_range(c, field)


def _check_range(c, field: str) -> None:
    value = getattr(c, field)
    low, high = FIELD_RANGES[field]
    if value is not None and not low <= value <= high:
        _fail(c, field, value, f"it must lie in [{_bound(low)}, {_bound(high)}]")


def _bound(v: float) -> str:
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e9 else f"{v:g}"


def _check_shape(c) -> None:
    for field in ("experts", "topk", "n_group", "topk_group", "near_tie_ulp", "zero_experts"):
        value = getattr(c, field)
        low = 0 if field in ("near_tie_ulp", "zero_experts") else 1
        if not _is_int(value) or value < low:
            _fail(c, field, value, f"use an int >= {low}")
        _check_range(c, field)
    if c.zero_experts >= c.experts:
        _fail(c, "zero_experts", c.zero_experts, f"it must be < experts={c.experts} (the zero-computation experts are the last ids)")
    if c.topk > c.experts:
        _fail(c, "topk", c.topk, f"it must satisfy 1 <= topk <= experts={c.experts}")
    if c.topk_group > c.n_group:
        _fail(c, "topk_group", c.topk_group, f"it must satisfy 1 <= topk_group <= n_group={c.n_group}")
    if c.experts % c.n_group:
        _fail(c, "n_group", c.n_group, f"it must divide experts={c.experts} (groups are contiguous blocks of E / n_group)")
    if c.is_grouped and c.group_score == "top2_sum" and c.experts // c.n_group < 2:
        _fail(c, "group_score", c.group_score, f"top2_sum needs >= 2 experts per group (experts={c.experts}, n_group={c.n_group}); use 'max'")
    if c.is_grouped and c.group_score == "topk_share_sum":
        share = c.topk // c.topk_group
        if not 1 <= share <= c.experts // c.n_group:
            _fail(c, "group_score", c.group_score, f"topk_share_sum sums the top topk // topk_group = {share} values of a group of "
                  f"{c.experts // c.n_group}; it needs 1 <= topk // topk_group <= experts / n_group")


def _validate(c: Contract) -> None:
    if not isinstance(c.name, str) or not c.name or any(ch.isspace() for ch in c.name):
        raise ContractError(f"contract name={c.name!r} is not allowed; use a non-empty string without spaces")
    for field in ("summary", "source"):
        value = getattr(c, field)
        if not isinstance(value, str) or "\n" in value:
            _fail(c, field, value, "use a one-line string")
    for field in FIELD_VALUES:
        _check_choice(c, field)
    object.__setattr__(c, "group_mask", float(c.group_mask))
    _check_real(c, "floor", minimum=None, optional=True)
    for field in ("renorm_eps", "weight_rtol", "weight_atol", "near_tie_x_ulp", "softcap", "renorm_p"):
        _check_real(c, field)
    if (c.scoring == "softcap_sigmoid") != (c.softcap > 0):
        _fail(c, "softcap", c.softcap, "softcap_sigmoid needs a cap > 0, and no other scoring takes one (leave it 0)")
    if c.renormalize == "lp" and c.renorm_p < 1:
        _fail(c, "renorm_p", c.renorm_p, "renormalize='lp' needs p >= 1 (an L_p norm)")
    if c.scoring in ("softmax_of_topk", "sigmoid_of_topk") and c.bias != "none":
        _fail(c, "bias", c.bias, f"scoring {c.scoring!r} ranks the raw logits; a correction bias has nothing to rank (use 'none')")
    _check_real(c, "routed_scaling_factor", minimum=None)
    if not isinstance(c.default_renormalize, bool):
        _fail(c, "default_renormalize", c.default_renormalize, "use true or false")
    _check_shape(c)
