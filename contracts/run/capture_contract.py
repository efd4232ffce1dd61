"""The contract a captured model's routing follows, read from the model, never looked up by its type.

The contract is read, never looked up by model type: ``routing_facts``
takes what decides the routing from the router class and the values the
config gave it (group shape, the group mask as the installed router's
source writes it, routed_scaling_factor, norm_topk_prob, scoring, bias);
``contract_for`` names the built-in whose routing fields are exactly these,
or makes a contract of them on top of the router family's built-in;
``verify_capture`` routes the first rows of each layer through the oracle
under it against the model's own choice.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass

import torch

from .capture import Captured

__all__ = ["RELATED_CONTRACTS", "SCORING_FUNCS", "VERIFY_ROWS", "Agreement", "RoutingFacts", "contract_for", "contract_toml", "routing_facts",
           "verify_capture"]  # fmt: skip

# Which built-in contracts a router class's routing is also written as (beyond its kernels.models family): a capture
# prefers these when their fields are the model's. DeepSeek-V3's router class is Kimi-K2's (kernels.models' family).
RELATED_CONTRACTS = {"DeepseekV3TopkRouter": ("deepseek-v3", "kimi-k2")}
# The names config.scoring_func takes (DeepSeek-V4's router reads it) -> the contract's scoring.
SCORING_FUNCS = {"sqrtsoftplus": "sqrt_softplus", "sigmoid": "sigmoid", "softmax": "softmax"}
# How a grouped router masks the experts of the groups it drops, as its installed source writes it.
_MASK = re.compile(r"masked_fill\(\s*~\s*score_mask\.bool\(\)\s*,\s*(float\(\s*[\"']-inf[\"']\s*\)|-?0\.0|0)\s*\)")
# Rows per layer the capture routes through the oracle under the contract it names, against the model's own routing.
VERIFY_ROWS = 2048
# Fields that decide nothing about routing or that the file sets (E and k are the capture's; names and text differ).
_NOT_ROUTING = ("name", "summary", "source", "experts", "topk", "zero_experts")
_GROUP_FIELDS = ("group_score", "group_mask", "group_tie_rule")



@dataclass(frozen=True)
class RoutingFacts:
    """What decides a captured model's routing, read from its router class and the values its config gave the router.

    ``family``: the ``kernels.models`` family whose router class this is (its built-in contract is the base);
    None when the class is none of theirs. ``group_mask``: as the installed router's source writes it ("-inf",
    "0.0"), None for an ungrouped router. ``routed_scaling_factor`` / ``norm_topk_prob``: None where the router
    reads no such value (its code fixes it: no factor, always or never renormalized).
    """

    router_class: str
    model_type: str
    family: str | None
    experts: int
    topk: int
    scoring: str | None
    bias: bool
    n_group: int
    topk_group: int
    group_mask: str | None
    routed_scaling_factor: float | None
    norm_topk_prob: bool | None
    renorm_p: float | None = None  # DBRX: the p of its L_p renormalization (moe_normalize_expert_weights)
    notes: tuple[str, ...] = ()  # facts that could not be read: no contract is named
    warnings: tuple[str, ...] = ()  # facts a capture leaves out (a contract is named; the line says what its checks miss)

    def as_json(self) -> str:
        from dataclasses import asdict

        return json.dumps(asdict(self))

    def line(self) -> str:
        groups = f"{self.n_group} / {self.topk_group} groups, mask {self.group_mask}" if self.n_group > 1 else "ungrouped"
        rsf = "no rsf" if self.routed_scaling_factor is None else f"rsf {self.routed_scaling_factor:g}"
        norm = "" if self.norm_topk_prob is None else f", norm_topk_prob {str(self.norm_topk_prob).lower()}"
        if self.renorm_p is not None:
            norm = f", divided by the L{self.renorm_p:g} norm"
        return f"{self.router_class}: {self.scoring or '?'}{' + bias' if self.bias else ''}, {groups}, {rsf}{norm}"


def _family_of(router_class: str) -> str | None:
    from kernels.models import ROUTERS

    return next((f for f, r in ROUTERS.items() if r.cls == router_class), None)


def _mask_in_source(cls) -> str | None:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return None
    found = {"-inf" if "inf" in m else "0.0" for m in _MASK.findall(source)}
    return found.pop() if len(found) == 1 else None


def routing_facts(model, rec: Captured) -> RoutingFacts:
    """The routing facts of ``model``'s routers (the first router's; a model has one router class)."""
    import oracle

    router = rec.routers[0]
    cls = type(router).__name__
    config = model.config
    experts, topk = rec.logits[0][0].shape[-1], rec.ids[0][0].shape[-1]
    notes = []
    classes = sorted({type(m).__name__ for m in rec.routers})
    if len(classes) > 1:
        notes.append(f"the model's routers are of {len(classes)} classes ({', '.join(classes)}); one contract cannot name them all")
    for attr in ("num_group", "n_group", "topk_group", "routed_scaling_factor", "norm_topk_prob", "top_k", "topk_method",
                 "moe_normalize_expert_weights"):
        values = {repr(getattr(m, attr, None)) for m in rec.routers}
        if len(values) > 1:
            notes.append(f"the routers' {attr} differs between layers ({', '.join(sorted(values))}); one contract cannot name them all")
    if len({x[0].shape[-1] for x in rec.logits}) > 1 or len({x[0].shape[-1] for x in rec.ids}) > 1:
        notes.append("the layers have different numbers of experts or k; one contract cannot name them all")
    family = _family_of(cls)
    base = oracle.BUILTIN_CONTRACTS[family] if family else None
    scoring = base.scoring if base else None
    func = getattr(config, "scoring_func", None) if hasattr(router, "score_fn") else None
    if func is not None:
        scoring = SCORING_FUNCS.get(str(func))
        if scoring is None:
            notes.append(f"config.scoring_func={func!r} is no scoring a contract has")
    n_group = int(getattr(router, "num_group", None) or getattr(router, "n_group", None) or 1)
    topk_group = int(getattr(router, "topk_group", None) or 1)
    if getattr(router, "topk_method", "group_limited_greedy") != "group_limited_greedy":  # DeepSeek-V2's greedy: no groups
        n_group = topk_group = 1
    mask = _mask_in_source(type(router)) if n_group > 1 else None
    if n_group > 1 and mask is None:
        notes.append(f"the group mask of {cls} could not be read from its source")
    rsf = getattr(router, "routed_scaling_factor", None)
    norm = getattr(router, "norm_topk_prob", None)
    renorm_p = None
    if hasattr(router, "moe_normalize_expert_weights"):  # DBRX: None = no renormalization, p = divide by the L_p norm
        renorm_p = router.moe_normalize_expert_weights
        norm = renorm_p is not None
    scales = [getattr(m, "per_expert_scale", None) for m in rec.routers]
    warnings = []
    if any(isinstance(x, torch.Tensor) and not bool((x == 1).all()) for x in scales):
        warnings.append("per_expert_scale is not all ones: the capture does not hold it, so checks on it use ones")
    return RoutingFacts(
        router_class=cls, model_type=str(getattr(config, "model_type", "")), family=family, experts=int(experts), topk=int(topk),
        scoring=scoring, bias=bool(base.has_bias) if base else any(b is not None for b in rec.bias), n_group=n_group,
        topk_group=topk_group, group_mask=mask, routed_scaling_factor=None if rsf is None else float(rsf),
        norm_topk_prob=None if norm is None else bool(norm), renorm_p=None if renorm_p is None else float(renorm_p), notes=tuple(notes),
        warnings=tuple(warnings),
    )  # fmt: skip


def _routing_key(c) -> dict:
    d = {k: v for k, v in c.as_dict().items() if k not in _NOT_ROUTING}
    if not c.is_grouped:
        for k in _GROUP_FIELDS:
            d.pop(k, None)
    return d


def contract_for(facts: RoutingFacts):
    """``(contract, builtin, why)``: the contract these facts describe, as a built-in when one's routing fields are
    exactly these (the router class's own first), else as a new contract (``builtin`` False) on top of the family's;
    ``(None, False, why not)`` when the router class is none the harness knows, a fact could not be read or no
    contract can hold the values."""
    import oracle

    if facts.notes:
        return None, False, "; ".join(facts.notes)
    if facts.family is None:
        return None, False, f"{facts.router_class} is no router class of kernels.models"
    base = oracle.BUILTIN_CONTRACTS[facts.family]
    changes = dict(scoring=facts.scoring, n_group=facts.n_group, topk_group=facts.topk_group, experts=facts.experts, topk=facts.topk)
    if base.zero_experts >= facts.experts:
        changes["zero_experts"] = 0
    if facts.n_group > 1:
        changes["group_mask"] = -float("inf") if facts.group_mask == "-inf" else 0.0
    if facts.routed_scaling_factor is not None:
        changes["routed_scaling_factor"] = facts.routed_scaling_factor
    if facts.norm_topk_prob is not None:
        changes["default_renormalize"] = facts.norm_topk_prob
    if facts.renorm_p is not None:
        changes["renorm_p"] = facts.renorm_p
    try:
        derived = base.replace(**changes)
    except ValueError as exc:  # a value no contract can hold (oracle's one line names it): no contract, said so
        return None, False, str(exc)
    key = _routing_key(derived)
    preferred = (facts.family, *RELATED_CONTRACTS.get(facts.router_class, ()))
    for name in (*preferred, *(n for n in oracle.BUILTIN_CONTRACTS if n not in preferred)):
        if _routing_key(oracle.BUILTIN_CONTRACTS[name]) == key:
            return oracle.BUILTIN_CONTRACTS[name], True, ""
    return derived, False, ""


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return ("-inf" if v < 0 else "inf") if v in (float("inf"), -float("inf")) else repr(v)
    return json.dumps(v)


def contract_toml(contract, facts: RoutingFacts, *, name: str, where: str) -> str:
    """A contract file (docs/contracts_as_data.md) for ``contract``: its base built-in and the fields that differ."""
    import oracle

    base = oracle.BUILTIN_CONTRACTS[facts.family]
    lines = [f"# The routing of {where}, as `python -m contracts capture` read it from the model's router and config:",
             f"# {facts.line()}. No built-in contract has these fields; pass this file with --contract.",
             f"base = {json.dumps(base.name)}", f"name = {json.dumps(name)}",
             f"summary = {json.dumps(f'{base.name} with the captured model config values: {facts.line()}')}"]  # fmt: skip
    mine, theirs = contract.as_dict(), base.as_dict()
    lines += [f"{k} = {_toml_value(v)}" for k, v in mine.items() if k not in ("name", "summary", "source") and v != theirs[k]]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Agreement:
    """The model's own routing against a contract's on the first ``VERIFY_ROWS`` rows of each layer."""

    rows: int
    disagree: int  # rows whose ids or weights differ
    ids: int = 0  # ... of them, rows whose expert sets differ
    cast: int = 0  # ... rows with the same ids whose weights are the contract's rounded to the logits' dtype
    first: str | None = None  # "layer L token T" of the first row that disagrees

    def line(self, label: str) -> str:
        if not self.disagree:
            return f"the model's own routing follows {label} on all {self.rows:,} rows checked (the first {VERIFY_ROWS:,} of each layer)"
        other = self.disagree - self.ids - self.cast
        parts = [f"other experts on {self.ids:,}" if self.ids else "", f"weights other than a cast on {other:,}" if other else "",
                 f"weights that are the contract's cast to the logits' dtype on {self.cast:,}" if self.cast else ""]  # fmt: skip
        return (f"the model's own routing differs from {label} on {self.disagree:,} of {self.rows:,} rows checked (first: {self.first}): "
                + ", ".join(p for p in parts if p))  # fmt: skip


def verify_capture(rec: Captured, contract, *, rows: int = VERIFY_ROWS) -> Agreement:
    """Route the captured logits (and bias) of the first ``rows`` tokens of each layer through the oracle under
    ``contract`` and compare with the model's own choice: ids as a set, weights by expert within the contract's
    tolerance (the routers rank with torch.topk, some unsorted)."""
    import oracle

    def head(chunks: list[torch.Tensor]) -> torch.Tensor:  # the first ``rows`` rows, without joining the whole layer
        taken, n = [], 0
        for c in chunks:
            if n >= rows:
                break
            taken.append(c[: rows - n])
            n += taken[-1].shape[0]
        return torch.cat(taken)

    checked = disagree = wrong_ids = cast = 0
    first = None
    groups = dict(num_expert_group=contract.n_group, topk_group=contract.topk_group) if contract.is_grouped else {}
    for layer in range(len(rec.layer_names)):
        logits, ids, weights = head(rec.logits[layer]), head(rec.ids[layer]).long(), head(rec.weights[layer]).float()
        bias = rec.bias[layer] if contract.has_bias else None
        if contract.has_bias and bias is None:
            bias = torch.zeros(logits.shape[-1])  # what check --logits routes a file without a bias with
        ew, eids = oracle.route(logits, bias, ids.shape[-1], renormalize=contract.default_renormalize,
                                routed_scaling_factor=contract.routed_scaling_factor, contract=contract, **groups)  # fmt: skip
        order, eorder = ids.sort(1), eids.long().sort(1)
        w, ew = weights.gather(1, order.indices), ew.gather(1, eorder.indices)
        same_ids = (order.values == eorder.values).all(1)
        same_w = torch.isclose(w, ew, rtol=contract.weight_rtol, atol=contract.weight_atol, equal_nan=True).all(1)
        cast_w = torch.isclose(w, ew.to(logits.dtype).float(), rtol=contract.weight_rtol, atol=contract.weight_atol, equal_nan=True).all(1)
        bad = (~(same_ids & same_w)).nonzero().flatten()
        if bad.numel() and first is None:
            first = f"layer {layer} token {int(bad[0])}"
        checked += logits.shape[0]
        disagree += bad.numel()
        wrong_ids += int((~same_ids).sum())
        cast += int((same_ids & ~same_w & cast_w).sum()) if logits.dtype != torch.float32 else 0
    return Agreement(checked, disagree, wrong_ids, cast, first)

