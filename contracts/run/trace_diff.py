"""Trace diff: two engines' routing of the same tokens, every difference explained by one cause.

A trace is what an engine chose per token and layer: ``ids`` ``[tokens, k]``,
``weights`` ``[tokens, k]`` and, where recorded, the router ``logits``
``[tokens, E]`` and the correction ``bias`` ``[E]``, each with or without a
leading layers dimension, in a ``.pt`` dict or a ``.safetensors`` file (the
capture command writes one). Two traces of the same tokens (a rollout engine
and a trainer, say) are compared token by token and layer by layer.

A **flip** is a token-and-layer the two routed differently: another expert
set, or another column order where the contract fixes the order (a
contract whose ``output_order`` is ``any`` makes column order unobservable).
Each flip gets exactly one cause, decided in this order:

1. ``router``: a side's ids break contract C on its own logits (the
   oracle's attribution, ``contracts.compare.verdicts.row_blame``, names
   the clause: the first ids clause the row breaks; weight clauses never
   decide a flip, which is about ids). A broken router is named even when the
   logits differ too: that is what a kernel engineer fixes.
2. ``logits_differ``: the two sides' logits (or biases) are not bit-equal,
   and each side routed its own logits as the contract says. The record
   gives the largest ULP distance at the experts that matter (those either
   side chose) and whether the difference moves the cutoff (the oracle picks
   another expert set on A's logits than on B's).
3. ``near_tie``: the same logits, both sides within the contract: the two
   experts' ranking values are within their error bounds
   (docs/contracts.md#tolerances-and-near-ties).

At least one trace must hold the logits; where only one does, both sides
are taken to have routed those logits (routing replay). Rows are read a
layer and a chunk of tokens at a time (``safe_open`` slices, ``torch.load``
with ``mmap``), so the traces are never loaded whole.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

import oracle

from ..cases.build import Case
from ..cases.plan import CaseSpec
from ..compare import expected_for
from ..compare.attribution import CLAUSE_ORDER, INDEX
from ..compare.tolerance import ulp_distance
from ..compare.verdicts import row_blame

__all__ = ["CAUSES", "TraceDiff", "TraceError", "diff_traces", "open_trace", "token_view"]

CAUSES = ("logits_differ", "near_tie", "router")
CHUNK = 16_384  # tokens of a layer compared at a time
WORST = 20  # tokens listed in trace_diff.json's "worst"
_IDS_CLAUSES = INDEX["bias_in_weight"]  # CLAUSE_ORDER before it: the clauses about which experts, in which column


class TraceError(ValueError):
    """A trace that cannot be compared; the message names the file, what is wrong and the fix."""


@dataclass
class Trace:
    """An opened trace: shapes checked, tensors read a slice at a time."""

    path: Path
    layers: int  # 0: no layer dimension
    tokens: int
    topk: int
    experts: int | None  # None without logits
    layer_names: tuple[str, ...]
    _get: object  # (key, layer, first, count) -> tensor
    keys: frozenset

    @property
    def layer_count(self) -> int:
        return max(self.layers, 1)

    def read(self, key: str, layer: int, first: int, count: int) -> torch.Tensor | None:
        if key not in self.keys:
            return None
        return self._get(key, layer, first, count)

    def bias(self, layer: int) -> torch.Tensor | None:
        if "bias" not in self.keys:
            return None
        return self._get("bias", layer, 0, 0)


def _shape_reader(path: Path):
    """(shapes, get(key, index)) of the file's tensors; get returns a lazily sliceable object."""
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        from safetensors import safe_open

        handle = safe_open(str(path), framework="pt")
        shapes = {k: tuple(handle.get_slice(k).get_shape()) for k in handle.keys()}
        meta = handle.metadata() or {}
        return shapes, meta, lambda key: handle.get_slice(key)
    if suffix in (".pt", ".pth"):
        obj = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
        if not isinstance(obj, dict):
            raise TraceError(f"{path}: holds a {type(obj).__name__}; a trace is a dict with the keys ids, weights and (where recorded) logits, bias")
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        meta = {k: v for k, v in obj.items() if not isinstance(v, torch.Tensor)}
        return {k: tuple(v.shape) for k, v in tensors.items()}, meta, tensors.__getitem__
    raise TraceError(f"{path}: unknown suffix {suffix!r}; a trace is a .pt dict or a .safetensors file")


def open_trace(path: str | Path) -> Trace:
    """Open a trace, checking its keys and shapes; ``TraceError`` in one line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file; give a trace (.pt or .safetensors with ids, weights, logits)")
    try:
        shapes, meta, get = _shape_reader(path)
    except TraceError:
        raise
    except Exception as exc:  # noqa: BLE001 -- an unreadable file is one line naming it
        raise TraceError(f"{path}: could not be read ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    for key in ("ids", "weights"):
        if key not in shapes:
            raise TraceError(f"{path}: no {key!r}; a trace holds ids [tokens, k] and weights [tokens, k] (and logits [tokens, E] where recorded)")
    ids = shapes["ids"]
    if len(ids) not in (2, 3) or shapes["weights"] != ids:
        raise TraceError(f"{path}: ids {list(ids)} and weights {list(shapes['weights'])} must be the same [tokens, k] or [layers, tokens, k]")
    layers = ids[0] if len(ids) == 3 else 0
    lead = ids[:-1]
    experts = None
    if "logits" in shapes:
        lg = shapes["logits"]
        if tuple(lg[:-1]) != tuple(lead):
            raise TraceError(f"{path}: logits {list(lg)} do not match ids {list(ids)}; need {list(lead) + ['E']}")
        experts = lg[-1]
    if "bias" in shapes and experts is not None:
        want = {(experts,), (max(layers, 1), experts)}
        if tuple(shapes["bias"]) not in want:
            raise TraceError(f"{path}: bias {list(shapes['bias'])} does not fit {experts} experts; need [E] or [layers, E]")
    raw = meta.get("layer_names")
    names = json.loads(raw) if isinstance(raw, str) else raw
    if not (isinstance(names, (list, tuple)) and len(names) == max(layers, 1)):
        names = [f"layer {i}" for i in range(max(layers, 1))]

    def read(key, layer, first, count):
        t = get(key)
        if key == "bias":
            b = t[:] if len(shapes["bias"]) == 1 else t[layer]
            return torch.as_tensor(b).float().reshape(-1)
        part = t[layer, first : first + count] if layers else t[first : first + count]
        return torch.as_tensor(part).clone()

    return Trace(path, layers, ids[-2], ids[-1], experts, tuple(names), read, frozenset(shapes))


def _bits(x: torch.Tensor) -> torch.Tensor:
    """Each value's fp32 bit pattern, so that equality is bit equality (NaN equals the same NaN, -0 differs from +0)."""
    return x.float().contiguous().view(torch.int32)


@dataclass
class TraceDiff:
    """``trace_diff.json``: the counts, per layer, and the worst tokens."""

    a: str
    b: str
    contract: str
    rows: int = 0
    flips: int = 0
    causes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0))
    router_clauses: dict[str, int] = field(default_factory=dict)
    router_sides: dict[str, int] = field(default_factory=lambda: {"a": 0, "b": 0, "both": 0})
    logits_differ_rows: int = 0  # rows whose logits differ, flipped or not
    moved_cutoff: int = 0  # logits_differ flips whose difference moves the oracle's cutoff
    tokens: int = 0
    tokens_flipped: int = 0  # tokens routed differently in at least one layer
    layers: list[dict] = field(default_factory=list)
    worst: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def _case(scores, bias, c, topk, layer, first) -> Case:
    spec = CaseSpec("trace", first, scores.shape[0], scores.shape[1], topk, c.n_group if c.is_grouped else 1,
                    c.topk_group if c.is_grouped else 1, bias=bias is not None)  # fmt: skip
    return Case(spec, scores, bias, c.default_renormalize, c.routed_scaling_factor)


def _first_ids_clause(broken: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(does the row break an ids clause, the index of the first one)."""
    ids_part = broken[:, :_IDS_CLAUSES]
    return ids_part.any(1), ids_part.float().argmax(1)


def _same_routing(ids_a: torch.Tensor, ids_b: torch.Tensor, ordered: bool) -> torch.Tensor:
    if ordered:
        return (ids_a == ids_b).all(1)
    return (ids_a.sort(1).values == ids_b.sort(1).values).all(1)


def _side_blame(scores, bias, weights, ids, c, topk, layer, first):
    case = _case(scores, bias, c, topk, layer, first)
    exp = expected_for(case, c)
    broken = row_blame(case, exp, (weights.float(), ids.int()), c)
    breaks, clause = _first_ids_clause(broken)
    return breaks, clause, exp.ids


def _replay(a: Path, b: Path, contract: str, layer: int, token: int, layered: bool) -> str:
    import shlex

    parts = ["python", "-m", "contracts", "trace-diff", str(a), str(b), "--contract", contract]
    if layered:
        parts += ["--layer", str(layer)]
    return shlex.join(parts + ["--token", str(token)])


def diff_traces(a: str | Path, b: str | Path, contract: str, *, progress=None) -> TraceDiff:
    """Compare traces ``a`` and ``b`` under ``contract`` (a name or a .toml path); see the module docstring."""
    c = oracle.get_contract(contract)
    ta, tb = open_trace(a), open_trace(b)
    _check_pair(ta, tb, c)
    ordered = c.output_order != "any"
    out = TraceDiff(str(ta.path), str(tb.path), str(contract), tokens=ta.tokens)
    if not ordered:
        out.notes.append(f"contract {c.name} leaves the column order open (output_order any): a flip is another expert set")
    if "logits" not in ta.keys or "logits" not in tb.keys:
        which = ta if "logits" in ta.keys else tb
        out.notes.append(f"only {which.path} holds logits: both sides are taken to have routed them (a routing replay)")
    if c.has_bias and "bias" not in ta.keys and "bias" not in tb.keys:
        out.notes.append(f"contract {c.name} takes a correction bias and neither trace holds one: a zero bias was used")
    flipped_any = torch.zeros(ta.tokens, dtype=torch.bool)
    candidates: list[tuple] = []  # (sort key, record) of flipped rows, trimmed to WORST as we go
    for layer in range(ta.layer_count):
        per = {"layer": layer, "name": ta.layer_names[layer], "rows": ta.tokens, "flips": 0, **dict.fromkeys(CAUSES, 0), "logits_differ_rows": 0}
        bias_a, bias_b = ta.bias(layer), tb.bias(layer)
        for first in range(0, ta.tokens, CHUNK):
            n = min(CHUNK, ta.tokens - first)
            rows = _diff_chunk(ta, tb, c, layer, first, n, bias_a, bias_b, ordered)
            if rows is None:
                continue
            flips, causes, differ_rows, records = rows
            per["flips"] += flips
            per["logits_differ_rows"] += differ_rows
            for name, count in causes.items():
                per[name] += count
            for r in records:
                flipped_any[r["token"]] = True
                r["replay"] = _replay(ta.path, tb.path, str(contract), layer, r["token"], bool(ta.layers))
                key = (CAUSES.index(r["cause"]) if r["cause"] != "router" else -1, -(r.get("max_ulp") or 0), layer, r["token"])
                candidates.append((key, r))
                if r["cause"] == "router":
                    out.router_clauses[r["clause"]] = out.router_clauses.get(r["clause"], 0) + 1
                    out.router_sides[r["side"]] += 1
                elif r["cause"] == "logits_differ" and r["moves_cutoff"]:
                    out.moved_cutoff += 1
            candidates.sort(key=lambda kr: kr[0])
            del candidates[WORST:]
            if progress:
                progress.update(n, per["name"])
        out.layers.append(per)
        out.rows += ta.tokens
        out.flips += per["flips"]
        out.logits_differ_rows += per["logits_differ_rows"]
        for name in CAUSES:
            out.causes[name] += per[name]
    out.tokens_flipped = int(flipped_any.sum())
    out.worst = [r for _, r in candidates]
    return out


def _check_pair(ta: Trace, tb: Trace, c) -> None:
    if (ta.layers, ta.tokens, ta.topk) != (tb.layers, tb.tokens, tb.topk):
        raise TraceError(f"{ta.path} has {ta.layer_count} layers x {ta.tokens} tokens x top-{ta.topk}, {tb.path} {tb.layer_count} x {tb.tokens} x top-{tb.topk}; "
                         "trace-diff compares two traces of the same tokens")  # fmt: skip
    if ta.experts is None and tb.experts is None:
        raise TraceError(f"neither {ta.path} nor {tb.path} holds logits; record the router logits in at least one trace (the capture command does)")
    if ta.experts is not None and tb.experts is not None and ta.experts != tb.experts:
        raise TraceError(f"{ta.path} has {ta.experts} experts, {tb.path} {tb.experts}; both traces must come from the same model")
    experts = ta.experts or tb.experts
    if ta.topk > experts:
        raise TraceError(f"{ta.path}: top-{ta.topk} of {experts} experts")
    if c.is_grouped and experts % c.n_group:
        raise TraceError(f"contract {c.name} splits experts into {c.n_group} groups; {experts} experts do not split; choose another --contract")


def _bias_for(b: torch.Tensor | None, other: torch.Tensor | None, c, experts: int) -> torch.Tensor | None:
    if not c.has_bias:
        return None
    if b is not None:
        return b
    return other if other is not None else torch.zeros(experts)


def _diff_chunk(ta: Trace, tb: Trace, c, layer: int, first: int, n: int, bias_a, bias_b, ordered: bool):
    ids_a, ids_b = ta.read("ids", layer, first, n).long(), tb.read("ids", layer, first, n).long()
    la, lb = ta.read("logits", layer, first, n), tb.read("logits", layer, first, n)
    la = la if la is not None else lb
    lb = lb if lb is not None else la
    if la.dtype == torch.float64:  # the oracle routes bf16, fp16 and fp32 logits; fp64 ones are an fp32 router's input widened
        la, lb = la.float(), lb.float()
    experts = la.shape[1]
    ba, bb = _bias_for(bias_a, bias_b, c, experts), _bias_for(bias_b, bias_a, c, experts)
    inputs_differ = (_bits(la) != _bits(lb)).any(1)
    if ba is not None and not torch.equal(_bits(ba), _bits(bb)):
        inputs_differ[:] = True
    flip = ~_same_routing(ids_a, ids_b, ordered)
    rows = flip.nonzero().squeeze(1)
    differ_rows = int(inputs_differ.sum())
    if not rows.numel():
        return 0, dict.fromkeys(CAUSES, 0), differ_rows, []
    wa, wb = ta.read("weights", layer, first, n)[rows], tb.read("weights", layer, first, n)[rows]
    ia, ib = ids_a[rows], ids_b[rows]
    topk = ia.shape[1]
    breaks_a, clause_a, oracle_a = _side_blame(la[rows], ba, wa, ia, c, topk, layer, first)
    breaks_b, clause_b, oracle_b = _side_blame(lb[rows], bb, wb, ib, c, topk, layer, first)
    differ = inputs_differ[rows]
    router = breaks_a | breaks_b
    cause = torch.where(router, 2, torch.where(differ, 0, 1))
    # how far apart the logits are at the experts either side chose, and whether the oracle's own set moves
    chosen = torch.cat([ia, ib], 1).clamp(0, experts - 1)
    ulp = ulp_distance(la[rows].float().gather(1, chosen), lb[rows].float().gather(1, chosen)).amax(1)
    moves = ~_same_routing(oracle_a.long(), oracle_b.long(), False)
    records = []
    for j in range(rows.numel()):
        kind = CAUSES[int(cause[j])]
        r = {"layer": layer, "token": first + int(rows[j]), "cause": kind, "ids_a": ia[j].tolist(), "ids_b": ib[j].tolist(),
             "oracle_ids_a": oracle_a[j].tolist(), "oracle_ids_b": oracle_b[j].tolist()}  # fmt: skip
        if bool(differ[j]):
            r["max_ulp"] = float(ulp[j])
            r["moves_cutoff"] = bool(moves[j])
        if kind == "router":
            side = "both" if breaks_a[j] and breaks_b[j] else ("a" if breaks_a[j] else "b")
            clause = CLAUSE_ORDER[int(clause_a[j] if side != "b" else clause_b[j])]
            r.update(side=side, clause=clause,
                     why=f"{'both sides break' if side == 'both' else f'side {side} breaks'} {clause} under contract {c.name}"
                         + ("" if side == "both" else f"; side {'b' if side == 'a' else 'a'} follows it"))  # fmt: skip
        records.append(r)
    counts = {name: int((cause == i).sum()) for i, name in enumerate(CAUSES)}
    return int(rows.numel()), counts, differ_rows, records


def token_view(a: str | Path, b: str | Path, contract: str, layer: int, token: int) -> str:
    """One token of one layer side by side (a replay line's ``--layer L --token T``)."""
    c = oracle.get_contract(contract)
    ta, tb = open_trace(a), open_trace(b)
    _check_pair(ta, tb, c)
    if not (0 <= layer < ta.layer_count and 0 <= token < ta.tokens):
        raise TraceError(f"--layer {layer} --token {token} is outside the traces' {ta.layer_count} layers x {ta.tokens} tokens")
    lines = [f"layer {layer} ({ta.layer_names[layer]}), token {token}, contract {c.name}"]
    for name, t in (("a", ta), ("b", tb)):
        lines.append(f"  {name} ids     {t.read('ids', layer, token, 1)[0].tolist()}")
        lines.append(f"  {name} weights {[round(float(w), 7) for w in t.read('weights', layer, token, 1)[0]]}")
    la, lb = ta.read("logits", layer, token, 1), tb.read("logits", layer, token, 1)
    for name, lg, t, other in (("a", la, ta, tb), ("b", lb, tb, ta)):
        if lg is None:
            continue
        bias = _bias_for(t.bias(layer), other.bias(layer), c, lg.shape[1])
        w, ids = oracle.route(lg.float() if lg.dtype == torch.float64 else lg, bias, ta.topk, renormalize=c.default_renormalize,
                              routed_scaling_factor=c.routed_scaling_factor, contract=c, **({"num_expert_group": c.n_group, "topk_group": c.topk_group} if c.is_grouped else {}))  # fmt: skip
        lines.append(f"  oracle on {name}'s logits: ids {ids[0].tolist()}")
    if la is not None and lb is not None:
        d = ulp_distance(la.float(), lb.float())[0]
        lines.append(f"  logits differ at {int((d > 0).sum())} experts, by at most {float(d.max()):g} ULP (fp32)")
    return "\n".join(lines)
