"""Which of a contract's fields, and which regime of each, the cases a check ran can tell apart.

A **regime** is one way a router can implement a contract but one field (the
field at another value, or a call option it ignores): the single-field
variants of ``oracle.variants`` that change what the oracle returns, and the
ones a router gets wrong by leaving something out: the correction bias, the
expert groups, the per-expert weight scale, the routed scaling factor, the
``renormalize`` option, the scoring function. A check can FAIL a router that
implements a regime only where a case routes differently under it; a case
whose call leaves a field at its default (a per-expert scale of ones, a zero
bias, one renormalize option) cannot.

Two uses:

- ``regimes(contract)``: every regime with the answer a router implementing it
  gives on a case (``Regime.route``). ``tests/test_plan_reaches_every_field.py``
  checks that the default synthetic plan has, for every built-in contract and
  every regime, a case the regime routes differently (the comparison FAILs it).
- ``unexercised(contract, specs)``: what a set of cases leaves at its default
  (captured logits: the file carries no per-expert scale, one call option
  pair, maybe no bias). ``check --logits`` records it in the summary
  (``unexercised``) and a PASS resting on it is NOT COVERED
  (``docs/real-traffic.md``, "Fields the captured rows never exercise").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

__all__ = ["FIELD_CLAUSES", "Regime", "equivalent", "not_exercised", "option_pairs", "regimes", "unexercised", "unexercised_clauses",
           "unexercised_reason"]


@dataclass(frozen=True)
class Regime:
    """One regime of one field: ``route(case)`` is the answer ``(weights, ids)`` of a router that implements the
    contract with this one change."""

    field: str
    label: str
    route: Callable


def _route(c, *, bias=True, groups=True, scale=True, renormalize=None, rsf=None, topk_group=None):
    """A router that implements contract ``c`` on a case, but for what the keywords change: ``bias=False`` drops the
    correction bias, ``groups=False`` the expert groups, ``scale=False`` the per-expert scale; ``renormalize`` /
    ``rsf`` fixed values it uses whatever the call asks."""
    import torch

    import oracle

    free = c.replace(admitted_renormalize="any", admitted_scaling="any")
    if not groups:
        free = free.replace(n_group=1, topk_group=1)

    def route(case):
        kwargs = dict(case.call_kwargs)
        if not groups:
            kwargs.pop("num_expert_group", None), kwargs.pop("topk_group", None)
        elif topk_group is not None:
            kwargs["topk_group"] = topk_group
        if not scale or free.weight_scale != "per_expert":
            kwargs.pop("expert_scale", None)
        given = case.bias if bias or case.bias is None else torch.zeros_like(case.bias)
        return oracle.route(case.scores, given, case.topk,
                            renormalize=case.renormalize if renormalize is None else renormalize,
                            routed_scaling_factor=case.routed_scaling_factor if rsf is None else rsf,
                            contract=free, **kwargs)  # fmt: skip

    return route


# The scoring a router may use in place of the contract's (a sigmoid router written for a softmax model, ...).
_OTHER_SCORING = {"sigmoid": "softmax", "softmax": "sigmoid", "sqrt_softplus": "sigmoid", "softcap_sigmoid": "sigmoid",
                  "sigmoid_of_topk": "softmax_of_topk", "softmax_of_topk": "sigmoid_of_topk"}  # fmt: skip


def equivalent(c, field: str, value) -> str | None:
    """Why the one-field change ``field=value`` of ``c`` gives the same answers as ``c`` on every input, within the
    contract's tolerances (so no case can tell them apart), or None when some input tells them apart."""
    import oracle

    if field == "output_order":
        return "the oracle writes rank order whatever the field; the comparison reads it"
    if field == "sigmoid_formula" and c.near_tie_ulp >= 1:
        return "the two formulas differ by at most an ULP: a near tie and within the weight tolerance"
    if field == "nan_rule" and {value, c.nan_rule} == {"first", "last"} and c.scoring == "softmax":
        return "a softmax over all experts makes every expert of a row with a NaN NaN: first and last order them alike"
    if field == "nan_rule" and "never" in (value, c.nan_rule) and c.floor is None:
        if c.is_grouped and (c.n_group - c.topk_group) * (c.experts // c.n_group) >= c.topk:
            return "the dropped groups' mask values are numbers enough to fill every slot: no slot is left to NaN or the fallback"
        if c.topk == 1 and c.tie_rule == "lowest":
            return "top-1 of an all-NaN row is expert 0 either way (the lowest NaN, or the fallback)"
    if field == "score_precision" and c.bias == "none" and c.weight_precision == "input":
        return ("rounding is monotone: scores rounded before ranking only merge values into ties, never reorder them, so a "
                "router ranking the unrounded ones chooses among equal values (near ties), and the weights are rounded "
                "either way (weight_precision input: mcore-softmax-pre)")
    if field == "score_precision" and c.scoring == "sigmoid_of_topk":
        return "the logits rank exactly and the weight is the sigmoid of the fp32 logit: no score is rounded"
    if field == "tie_rule" and bool((oracle.tie_priority(c.experts, value) == oracle.tie_priority(c.experts, c.tie_rule)).all()):
        return f"at {c.experts} experts both rules give every expert the same priority"
    if field == "default_renormalize" and value and c.scoring == "softmax_of_topk":
        return "the softmax over the k chosen logits already sums to one"
    return None


def _only_at(c, route, option: str, value) -> Callable:
    """``route``, but only on a case whose call option ``option`` is ``value``; the contract's answer elsewhere."""
    right = _route(c)

    def at(case):
        here = case.renormalize if option == "renormalize" else case.routed_scaling_factor
        return route(case) if here == value else right(case)

    return at


def regimes(c) -> list[Regime]:
    """Every regime of contract ``c`` that changes the answer on some input (see the module docstring)."""
    import oracle

    out: list[Regime] = []
    seen: set[tuple[str, object]] = set()

    def add(field, value, label, route):
        if (field, value) in seen or equivalent(c, field, value):
            return
        seen.add((field, value))
        out.append(Regime(field, label, route))

    for v in oracle.variants(c):
        add(v.field, v.value, f"{v.field}={v.value!r}: {v.label}", _route(v.contract))
    other = _OTHER_SCORING.get(c.scoring)
    if other and not (other.endswith("_of_topk") and c.has_bias):  # the *_of_topk scorings take no bias
        add("scoring", other, f"scoring={other!r}: {c.scoring} replaced by {other}", _route(c.replace(scoring=other, softcap=0.0)))
    if c.has_bias:
        add("bias", "ignored", "bias ignored: the correction bias left out of the ranking", _route(c, bias=False))
    if c.is_grouped:
        add("n_group", 1, "expert groups ignored: the top-k of all experts", _route(c, groups=False))
        for kept in (c.topk_group - 1, c.topk_group + 1):
            if 1 <= kept <= c.n_group:
                add("topk_group", kept, f"topk_group={kept}: {kept} groups kept, not {c.topk_group}", _route(c, topk_group=kept))
    if c.has_bias:  # a router that keeps the bias in bf16 (as some load it) and adds it so
        add("bias_dtype", "bf16", "the correction bias rounded to bf16 before it ranks", _bf16_bias(c))
    if c.zero_experts:
        add("zero_experts", "excluded", f"the {c.zero_experts} zero-computation experts never chosen", _without_zero_experts(c))
    if c.weight_scale == "per_expert":
        add("weight_scale", "none", "per-expert scale ignored: weights as if every expert's scale were 1", _route(c, scale=False))
    if c.renormalize == "lp":
        add("renorm_p", 2.0, "renorm_p=2: the weights divided by their L2 norm", _route(c.replace(renorm_p=2.0)))
    admitted = c.admitted_renormalize_values
    if len(admitted) == 1:  # a model that always (never) renormalizes: a router that does not (does)
        value = not admitted[0]
        add("default_renormalize", value, f"renormalize={value} always: the model's router "
            f"{'leaves the weights unnormalized' if value else 'renormalizes'}",
            _renormalizing(c) if value else _route(_honouring_the_flag(c), renormalize=False))  # fmt: skip
    flag_ignored = equivalent(c, "default_renormalize", True) or getattr(c, "renormalize_when", None) in ("always", "never")
    for value in admitted if not flag_ignored else ():  # wrong only on calls with one admitted value of the option (a
        # contract that renormalizes whatever the flag says, renormalize_when="always", gives both calls one answer)
        add("renormalize", value, f"wrong only at renormalize={value} (it takes the other path there)",
            _only_at(c, _route(c, renormalize=not value), "renormalize", value))  # fmt: skip
    factors = c.admitted_scaling_factors
    if factors is None or any(f != 1.0 for f in factors):
        add("routed_scaling_factor", "ignored", "routed_scaling_factor ignored: weights never scaled", _route(c, rsf=1.0))
    if c.routed_scaling_factor != 1.0:  # the model's own factor: a router wrong only there (a constant folded wrongly)
        add("routed_scaling_factor", c.routed_scaling_factor, f"wrong only at routed_scaling_factor={c.routed_scaling_factor:g}, "
            "the model's own (it scales by 1 there)", _only_at(c, _route(c, rsf=1.0), "routed_scaling_factor", c.routed_scaling_factor))  # fmt: skip
    return out


def _bf16_bias(c) -> Callable:
    right = _route(c)

    def route(case):
        import dataclasses

        return right(dataclasses.replace(case, bias=case.bias.to(torch.bfloat16).to(case.bias.dtype)))

    import torch

    return route


def _without_zero_experts(c) -> Callable:
    """A router that never routes to the zero-computation experts (the last ``zero_experts`` ids): their logits -inf."""
    right = _route(c)

    def route(case):
        import dataclasses

        import torch

        scores = case.scores.clone()
        scores[:, c.experts - c.zero_experts :] = -torch.inf
        return right(dataclasses.replace(case, scores=scores))

    return route


def _honouring_the_flag(c):
    """``c``, renormalizing only when the call asks (``renormalize_when="call"``, where the contract has that field):
    a router that skips the renormalization on ``renormalize=False`` although its model always renormalizes."""
    return c.replace(renormalize_when="call") if hasattr(c, "renormalize_when") else c


def _renormalizing(c) -> Callable:
    """A router that renormalizes under a contract whose model never does: the contract's weights over their sum."""
    right = _route(c)

    def route(case):
        w, ids = right(case)
        return w / w.sum(1, keepdim=True) * case.routed_scaling_factor, ids

    return route


# ---------------------------------------------------------------- what a set of cases leaves at its default


def option_pairs(c) -> tuple[tuple[bool, float], ...]:
    """The ``(renormalize, routed_scaling_factor)`` pairs beside the contract's defaults that its captured cases run
    once each (``contracts.cases.captured.iter_captured_plan``): every renormalize value it admits, and where it admits
    any factor but its own is 1.0, a factor that is not (2.5). A captured file's rows are the model's, its call
    options need not be: a router wrong only at the other option would pass the file's walk."""
    from .pins import SCALING_FACTORS

    factors = [c.routed_scaling_factor]
    if c.admitted_scaling_factors is None and c.routed_scaling_factor == 1.0:
        factors.append(next(f for f in SCALING_FACTORS if f != 1.0))
    default = (c.default_renormalize, c.routed_scaling_factor)
    return tuple((r, f) for r in c.admitted_renormalize_values for f in factors if (r, f) != default)


def unexercised(c, specs: Iterable, *, scale_given: bool = False) -> list[str]:
    """The fields (and regimes) of contract ``c`` that ``specs`` (captured cases) leave at their default, each as a
    short phrase ("per-expert scale", "renormalize off", "correction bias"): a router wrong only there routes these
    cases right. ``scale_given``: the cases carry a per-expert scale of their own (no captured file does today)."""
    import json

    renorms: set[bool] = set()
    factors: set[float] = set()
    zero_bias = False
    biases: dict[tuple, bool] = {}  # (file, bias file, layer) -> whether its bias can change a ranking
    for spec in specs:
        if spec.source:
            src = json.loads(spec.source)
            renorms.add(bool(src.get("renormalize", c.default_renormalize)))
            factors.add(float(src.get("rsf", c.routed_scaling_factor)))
            zero_bias = zero_bias or bool(src.get("zero_bias"))
            where = (src.get("logits"), src.get("bias"), src.get("layer", 0))
            if c.has_bias and not src.get("zero_bias") and where not in biases:
                biases[where] = _bias_varies(*where)
        else:
            if spec.renormalize is not None:
                renorms.add(spec.renormalize)
            if spec.scaling is not None:
                factors.add(spec.scaling)
    out = []
    if c.weight_scale == "per_expert" and not scale_given:
        out.append("per-expert scale")
    if c.has_bias and (zero_bias or (biases and not any(biases.values()))):  # all zeros, or one value an expert
        # everywhere: adding it never changes a ranking, so a router that leaves it out routes the same
        out.append("correction bias")
    for value in c.admitted_renormalize_values:
        if renorms and value not in renorms:
            out.append(f"renormalize {'on' if value else 'off'}")
    admitted = c.admitted_scaling_factors
    if factors and (admitted is None or len(admitted) > 1) and not any(f != 1.0 for f in factors):
        out.append("routed scaling factor")
    return out


# The clause a field left at its default feeds: its evidence is what the field never drew (the pytest plugin's
# ``test_<clause>`` says "not exercised" for it).
FIELD_CLAUSES = {"per-expert scale": "scaling", "correction bias": "selection", "renormalize on": "renorm_guard",
                 "renormalize off": "renorm_guard", "routed scaling factor": "scaling"}  # fmt: skip


def unexercised_clauses(fields: list[str]) -> dict[str, list[str]]:
    """``{clause: [fields]}``: the clauses whose evidence rests on ``fields`` never exercised."""
    out: dict[str, list[str]] = {}
    for f in fields:
        out.setdefault(FIELD_CLAUSES.get(f, "selection"), []).append(f)
    return out


def _bias_varies(logits: str, bias: str | None, layer: int) -> bool:
    """Whether the captured layer's correction bias holds two different values (a constant one ranks as none)."""
    from .logits_file import open_logits

    try:
        b = open_logits(logits, bias).bias(layer)
    except Exception:  # noqa: BLE001 -- a file that cannot be opened here is reported by the check itself
        return True
    return b is not None and b.numel() > 1 and bool((b.float() != b.float()[0]).any())


def unexercised_reason(fields: list[str]) -> str:
    """The summary's reason for a PASS that rests on fields no case exercised."""
    return (f"not exercised: {', '.join(fields)}: no case varied {'it' if len(fields) == 1 else 'them'} from the default, "
            "so a router wrong only there would pass (docs/real-traffic.md#fields-the-captured-rows-never-exercise)")


def not_exercised(summary, c, specs: Iterable) -> list[str]:
    """Record in ``summary`` (``unexercised``) what ``specs`` leave at its default under contract ``c``; a PASS that
    rests on it becomes NOT COVERED, its reason naming each field ("not exercised: per-expert scale: ..."). A FAIL,
    ERROR or INTERRUPTED already says more and keeps its status. Returns the fields."""
    from ..reports.schema import Status

    fields = unexercised(c, specs)
    summary.unexercised = fields
    if fields and summary.status is Status.PASS:
        summary.status = Status.NOT_COVERED
        summary.reason = unexercised_reason(fields)
    return fields
