"""Trace diff: two engines' routing of the same tokens, every difference explained by one cause.

A trace is what an engine chose per token and layer: ``ids`` ``[tokens, k]``,
``weights`` ``[tokens, k]`` and, where recorded, the router ``logits``
``[tokens, E]`` and the correction ``bias`` ``[E]``, each with or without a
leading layers dimension, in a ``.pt`` dict or a ``.safetensors`` file (the
capture command writes one). A trainer's trace may hold its dense answer
instead of ids and weights, ``probs`` and ``routing_map`` ``[tokens, E]``
(Megatron-core's), read as a check reads one (``contracts.compare.dense``):
a set with no column order, a malformed row a ``router`` flip of clause
``validity``. Two traces of the same tokens (a rollout engine and a
trainer, say) are compared token by token and layer by layer.

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

A row where either side's ids fall outside ``[0, E)``, or name one expert
twice, is a flip of cause ``router``, clause ``validity``, even where both
sides wrote the same ids: there is no such expert to route to (or k slots
went to fewer than k experts). Ids are read as int64 and stay int64 up
to the blame (an id of expert + 2^32 is not that expert).

Layers are paired by the names the files record (metadata ``layer_names``),
so two traces that list the same layers in another order compare layer by
layer; a layer in one trace only is reported (``unpaired_layers``) and fails
the diff. Where either trace records no names, layers pair by index (the
counts must match). Both traces' shapes and dtypes are checked up front:
ids any integer type, weights and bias any float (a bias is taken as fp32),
logits bf16, fp16 or fp32 (as ``check --logits``: float64 logits are
refused, since no router reads them). Two traces of no token, or with no
layer in common, compare nothing and are refused.

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
from ..cases.spec import CaseSpec
from ..compare import expected_for
from ..compare.attribution import CLAUSE_ORDER, INDEX
from ..compare.dense import DenseAnswer, read_answer
from ..compare.departures import FOLLOWS, explain_ids
from ..compare.tolerance import ulp_distance
from ..compare.verdicts import row_blame

__all__ = ["CAUSES", "TraceDiff", "TraceError", "check_traces", "diff_traces", "open_trace", "pair_layers", "token_view"]

CAUSES = ("logits_differ", "near_tie", "router")
CHUNK = 16_384  # tokens of a layer compared at a time
WORST = 20  # tokens listed in trace_diff.json's "worst"
_IDS_CLAUSES = INDEX["bias_in_weight"]  # CLAUSE_ORDER before it: the clauses about which experts, in which column


class TraceError(ValueError):
    """A trace that cannot be compared; the message names the file, what is wrong and the fix."""


@dataclass
class Trace:
    """An opened trace: shapes and dtypes checked, tensors read a slice at a time."""

    path: Path
    layers: int  # 0: no layer dimension
    tokens: int
    topk: int
    experts: int | None  # None without logits
    layer_names: tuple[str, ...]
    named: bool  # the file records its layers' names (else "layer i")
    _get: object  # (key, layer, first, count) -> tensor
    keys: frozenset
    bias_shape: tuple[int, ...] | None = None
    dense: bool = False  # read from probs and routing_map: no column order, each row's faults under "faults"

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


_ST_DTYPES = {"BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16, "I32": torch.int32,
              "U32": torch.uint32, "I64": torch.int64, "U64": torch.uint64, "F16": torch.float16, "BF16": torch.bfloat16,
              "F32": torch.float32, "F64": torch.float64}  # fmt: skip
_ID_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.uint16, torch.int32, torch.uint32, torch.int64)  # each exact in int64
_LOGIT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)  # as check --logits: what a router reads


def _shape_reader(path: Path):
    """(shapes, dtypes, metadata, get(key)) of the file's tensors; get returns a lazily sliceable object."""
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        from safetensors import safe_open

        handle = safe_open(str(path), framework="pt")
        slices = {k: handle.get_slice(k) for k in handle.keys()}
        shapes = {k: tuple(v.get_shape()) for k, v in slices.items()}
        dtypes = {k: _ST_DTYPES.get(v.get_dtype(), v.get_dtype()) for k, v in slices.items()}
        meta = handle.metadata() or {}
        return shapes, dtypes, meta, lambda key: handle.get_slice(key)
    if suffix in (".pt", ".pth"):
        obj = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
        if not isinstance(obj, dict):
            raise TraceError(f"{path}: holds a {type(obj).__name__}; a trace is a dict with the keys ids, weights and (where recorded) logits, bias")
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        meta = {k: v for k, v in obj.items() if not isinstance(v, torch.Tensor)}
        return {k: tuple(v.shape) for k, v in tensors.items()}, {k: v.dtype for k, v in tensors.items()}, meta, tensors.__getitem__
    raise TraceError(f"{path}: unknown suffix {suffix!r}; a trace is a .pt dict or a .safetensors file")


def _name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _check_dtypes(path: Path, dtypes: dict) -> None:
    """Every tensor a trace-diff reads, in a dtype it reads exactly; one line naming the tensor and the fix otherwise."""
    if dtypes["ids"] not in _ID_DTYPES:
        raise TraceError(f"{path}: ids in {_name(dtypes['ids'])}; save the expert ids as an integer tensor (int64 or int32)")
    for key in ("weights", "bias"):
        if key in dtypes and not (isinstance(dtypes[key], torch.dtype) and dtypes[key].is_floating_point):
            raise TraceError(f"{path}: {key} in {_name(dtypes[key])}; save the {'routing weights' if key == 'weights' else 'correction bias'} "
                             "as a float tensor (fp32 as the model keeps it)")  # fmt: skip
    if "logits" in dtypes and dtypes["logits"] not in _LOGIT_DTYPES:
        raise TraceError(f"{path}: logits in {_name(dtypes['logits'])}; record the router logits in the dtype the router read them "
                         "(bf16, fp16 or fp32; float64 and integer logits are refused, as check --logits refuses them)")  # fmt: skip


class _DenseSlices:
    """A dense trace's ``ids``, ``weights`` or ``faults`` read, slice by slice, from its ``probs`` and ``routing_map``
    (``contracts.compare.dense``, as a check reads a dense answer): a faulted row holds -1, so it breaks validity."""

    def __init__(self, get, key: str, experts: int, topk: int):
        self.get, self.key, self.experts, self.topk = get, key, experts, topk

    def __getitem__(self, index):
        probs = torch.as_tensor(self.get("probs")[index]).float()
        routing_map = torch.as_tensor(self.get("routing_map")[index])
        answer = read_answer((probs, routing_map), rows=probs.shape[0], experts=self.experts, topk=self.topk, device=probs.device)
        if isinstance(answer, str):  # shapes and dtypes were checked when the trace was opened
            raise TraceError(answer)
        return {"weights": answer[0], "ids": answer[1], "faults": answer.faults}[self.key]


def _dense_trace(path: Path, shapes: dict, dtypes: dict, meta: dict, get):
    """(shapes, dtypes, get) of a trace holding a dense answer, ``probs`` and ``routing_map`` ``[(layers,) tokens, E]``,
    as those of ``ids`` / ``weights`` ``[(layers,) tokens, k]``: k is the metadata's ``topk``, else the first row's count."""
    p, m = shapes["probs"], shapes["routing_map"]
    if p != m or len(p) not in (2, 3) or 0 in p:
        raise TraceError(f"{path}: probs {list(p)} and routing_map {list(m)} must be the same [tokens, E] or [layers, tokens, E]")
    if dtypes["routing_map"] != torch.bool:
        raise TraceError(f"{path}: routing_map in {_name(dtypes['routing_map'])}; save the routing map as a bool tensor")
    if not (isinstance(dtypes["probs"], torch.dtype) and dtypes["probs"].is_floating_point):
        raise TraceError(f"{path}: probs in {_name(dtypes['probs'])}; save the routing probs as a float tensor")
    try:
        topk = int(meta["topk"]) if "topk" in meta else int(torch.as_tensor(get("routing_map")[(slice(0, 1),) * (len(p) - 1)]).sum())
    except (TypeError, ValueError) as exc:
        raise TraceError(f"{path}: its topk metadata is not an integer ({exc})") from None
    if not 0 < topk <= p[-1]:
        raise TraceError(f"{path}: top-{topk} of {p[-1]} experts (metadata topk, else the first row's count of the routing map)")
    lead = tuple(p[:-1])
    shapes = {**shapes, "ids": lead + (topk,), "weights": lead + (topk,)}
    dtypes = {**dtypes, "ids": torch.int32, "weights": torch.float32}
    views = {key: _DenseSlices(get, key, p[-1], topk) for key in ("ids", "weights", "faults")}
    return shapes, dtypes, (lambda key: views[key] if key in views else get(key))


def open_trace(path: str | Path) -> Trace:
    """Open a trace, checking its keys, shapes and dtypes; ``TraceError`` in one line otherwise."""
    path = Path(path)
    if not path.is_file():
        raise TraceError(f"{path}: no such file; give a trace (.pt or .safetensors with ids, weights, logits)")
    try:
        shapes, dtypes, meta, get = _shape_reader(path)
    except TraceError:
        raise
    except Exception as exc:  # noqa: BLE001 -- an unreadable file is one line naming it
        raise TraceError(f"{path}: could not be read ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    dense = "ids" not in shapes and "weights" not in shapes and "probs" in shapes and "routing_map" in shapes
    if dense:  # a trainer's answer as Megatron gives it
        shapes, dtypes, get = _dense_trace(path, shapes, dtypes, meta, get)
    for key in ("ids", "weights"):
        if key not in shapes:
            raise TraceError(f"{path}: no {key!r}; a trace holds ids [tokens, k] and weights [tokens, k], or probs [tokens, E] and "
                             "routing_map [tokens, E] (and logits [tokens, E] where recorded)")  # fmt: skip
    _check_dtypes(path, dtypes)
    ids = shapes["ids"]
    if len(ids) not in (2, 3) or shapes["weights"] != ids:
        raise TraceError(f"{path}: ids {list(ids)} and weights {list(shapes['weights'])} must be the same [tokens, k] or [layers, tokens, k]")
    if 0 in ids:
        raise TraceError(f"{path}: ids of shape {list(ids)} hold no routed token; nothing to compare (a trace records at least one token "
                         "of one layer, with k >= 1)")  # fmt: skip
    layers = ids[0] if len(ids) == 3 else 0
    lead = ids[:-1]
    experts = None
    if "logits" in shapes:
        lg = shapes["logits"]
        if tuple(lg[:-1]) != tuple(lead) or not lg[-1]:
            raise TraceError(f"{path}: logits {list(lg)} do not match ids {list(ids)}; need {list(lead) + ['E']}")
        experts = lg[-1]
    bias_shape = tuple(shapes["bias"]) if "bias" in shapes else None
    if bias_shape is not None and (len(bias_shape) not in (1, 2) or (len(bias_shape) == 2 and bias_shape[0] != max(layers, 1))):
        raise TraceError(f"{path}: bias {list(bias_shape)} does not fit {max(layers, 1)} layers; need [E] or [layers, E]")
    if bias_shape is not None and experts is not None and bias_shape[-1] != experts:
        raise TraceError(f"{path}: bias {list(bias_shape)} does not fit {experts} experts; need [{experts}] or [{max(layers, 1)}, {experts}]")
    raw = meta.get("layer_names")
    try:
        names = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        names = None
    named = isinstance(names, (list, tuple)) and len(names) == max(layers, 1) and all(isinstance(n, str) for n in names)
    if raw is not None and not named:
        raise TraceError(f"{path}: its layer_names metadata is not a JSON list of {max(layers, 1)} names (one per layer); "
                         "write the layers' module paths, or no layer_names")  # fmt: skip
    if named and len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise TraceError(f"{path}: layer name(s) {', '.join(map(repr, twice))} given to more than one layer; each layer needs its own name")
    if not named:
        names = [f"layer {i}" for i in range(max(layers, 1))]

    def read(key, layer, first, count):
        t = get(key)
        if key == "bias":
            b = t[:] if len(bias_shape) == 1 else t[layer]
            return torch.as_tensor(b).float().reshape(-1)  # any float: fp32, the dtype a router ranks in
        part = t[layer, first : first + count] if layers else t[first : first + count]
        part = torch.as_tensor(part).clone()
        if key == "faults":
            return part
        if key == "ids":
            return part.long()  # one dtype from reading to blame: every integer type above is exact in int64
        if key == "weights":
            return part.float()
        return part

    return Trace(path, layers, ids[-2], ids[-1], experts, tuple(names), named, read, frozenset(shapes) | ({"faults"} if dense else set()),
                 bias_shape, dense)  # fmt: skip


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
    # router flips by the side that departs and why, in the matrix's words (contracts.compare.departures)
    router_departures: dict[str, int] = field(default_factory=dict)
    logits_differ_rows: int = 0  # rows whose logits differ, flipped or not
    moved_cutoff: int = 0  # logits_differ flips whose difference moves the oracle's cutoff
    tokens: int = 0
    tokens_flipped: int = 0  # tokens routed differently in at least one layer
    layers: list[dict] = field(default_factory=list)
    paired_by: str = "name"  # how the layers of A and B were paired: "name" (both record names) or "index"
    unpaired_layers: dict[str, list[str]] = field(default_factory=lambda: {"a": [], "b": []})  # layers in one trace only: fail
    invalid_id_rows: int = 0  # token-layers where a side's ids fall outside [0, E) (cause router, clause validity)
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


def _side_blame(scores, bias, weights, ids, c, topk, layer, first, faults=None):
    """(rows breaking an ids clause, the first such clause, the oracle's ids, each breaking row's departure in words):
    ``ids`` int64 as read, never narrowed; a
    row with an id outside ``[0, E)`` breaks validity whatever else the attribution finds. ``faults``: a dense side's
    (its answer compared as a set, as a check compares it)."""
    case = _case(scores, bias, c, topk, layer, first)
    exp = expected_for(case, c)
    answer = (weights.float(), ids) if faults is None else DenseAnswer(weights.float(), ids, faults)
    broken = row_blame(case, exp, answer, c)
    breaks, clause = _first_ids_clause(broken)
    outside = _outside(ids, scores.shape[1])
    clause = torch.where(outside, INDEX["validity"], clause)
    breaks = breaks | outside
    # each breaking row's departure in the matrix's words (contracts.compare.departures): a variant's, or unexplained
    at = breaks.nonzero().squeeze(1)
    words: list[str | None] = [None] * ids.shape[0]
    for j, d in zip(at.tolist(), explain_ids(case, exp, ids, c, at, clause[at], device=str(scores.device))):
        words[j] = d.words
    return breaks, clause, exp.ids, words


def _repeated(ids: torch.Tensor) -> torch.Tensor:
    """Per row: an expert id given more than once (k slots routed to fewer than k experts)."""
    s = ids.sort(1).values
    return (s[:, 1:] == s[:, :-1]).any(1)


def _outside(ids: torch.Tensor, experts: int) -> torch.Tensor:
    """Per row: an id outside ``[0, experts)`` (compared in int64: expert + 2^32 is outside)."""
    return ((ids < 0) | (ids >= experts)).any(1)


def _replay(a: Path, b: Path, contract: str, layer: int, token: int, layered: bool) -> str:
    import shlex

    parts = ["python", "-m", "contracts", "trace-diff", str(a), str(b), "--contract", contract]
    if layered:
        parts += ["--layer", str(layer)]
    return shlex.join(parts + ["--token", str(token)])


def pair_layers(ta: Trace, tb: Trace) -> tuple[list[tuple[str, int, int]], list[str], list[str], str]:
    """``(pairs (name, layer of A, layer of B), names in A only, names in B only, "name" | "index")``: by the names both
    files record; by index where either records none (then the counts must match)."""
    if ta.named and tb.named:
        at_b = {name: i for i, name in enumerate(tb.layer_names)}
        pairs = [(name, i, at_b[name]) for i, name in enumerate(ta.layer_names) if name in at_b]
        only_a = [n for n in ta.layer_names if n not in at_b]
        only_b = [n for n in tb.layer_names if n not in set(ta.layer_names)]
        return pairs, only_a, only_b, "name"
    if ta.layers != tb.layers:
        raise TraceError(f"{ta.path} has {ta.layer_count} layers, {tb.path} {tb.layer_count}, and "
                         f"{'neither records' if not (ta.named or tb.named) else (str(tb.path if ta.named else ta.path) + ' does not record')} "
                         "its layers' names (metadata layer_names) to pair them by; trace-diff compares traces of the same layers")  # fmt: skip
    return [(ta.layer_names[i], i, i) for i in range(ta.layer_count)], [], [], "index"


def diff_traces(a: str | Path, b: str | Path, contract: str, *, progress=None) -> TraceDiff:
    """Compare traces ``a`` and ``b`` under ``contract`` (a name or a .toml path); see the module docstring."""
    c = oracle.get_contract(contract)
    ta, tb = open_trace(a), open_trace(b)
    pairs, only_a, only_b, paired_by = _check_pair(ta, tb, c)
    ordered = c.output_order != "any" and not (ta.dense or tb.dense)  # a dense answer has no column order
    out = TraceDiff(str(ta.path), str(tb.path), str(contract), tokens=ta.tokens, paired_by=paired_by, unpaired_layers={"a": only_a, "b": only_b})
    if paired_by == "index" and (ta.named or tb.named or ta.layers):
        out.notes.append("the layers were paired by index: " + ("neither trace records" if not (ta.named or tb.named) else "one trace does not record")
                         + " its layers' names (metadata layer_names)")  # fmt: skip
    for side, names in (("a", only_a), ("b", only_b)):
        if names:
            out.notes.append(f"layers only in {ta.path if side == 'a' else tb.path} (not compared, the diff fails): {', '.join(names)}")
    if not ordered:
        why = f"contract {c.name} leaves the column order open (output_order any)" if c.output_order == "any" else "a dense trace has no column order"
        out.notes.append(f"{why}: a flip is another expert set")
    if "logits" not in ta.keys or "logits" not in tb.keys:
        which = ta if "logits" in ta.keys else tb
        out.notes.append(f"only {which.path} holds logits: both sides are taken to have routed them (a routing replay)")
    if c.has_bias and "bias" not in ta.keys and "bias" not in tb.keys:
        out.notes.append(f"contract {c.name} takes a correction bias and neither trace holds one: a zero bias was used")
    flipped_any = torch.zeros(ta.tokens, dtype=torch.bool)
    candidates: list[tuple] = []  # (sort key, record) of flipped rows, trimmed to WORST as we go
    for name, layer, layer_b in pairs:
        per = {"layer": layer, "name": name, "rows": ta.tokens, "flips": 0, **dict.fromkeys(CAUSES, 0), "logits_differ_rows": 0}
        if layer_b != layer:
            per["layer_b"] = layer_b
        bias_a, bias_b = ta.bias(layer), tb.bias(layer_b)
        for first in range(0, ta.tokens, CHUNK):
            n = min(CHUNK, ta.tokens - first)
            rows = _diff_chunk(ta, tb, c, layer, layer_b, first, n, bias_a, bias_b, ordered)
            flips, causes, differ_rows, invalid, records = rows
            per["flips"] += flips
            per["logits_differ_rows"] += differ_rows
            out.invalid_id_rows += invalid
            for cause, count in causes.items():
                per[cause] += count
            for r in records:
                flipped_any[r["token"]] = True
                r["replay"] = _replay(ta.path, tb.path, str(contract), layer, r["token"], bool(ta.layers))
                key = (CAUSES.index(r["cause"]) if r["cause"] != "router" else -1, -(r.get("max_ulp") or 0), layer, r["token"])
                candidates.append((key, r))
                if r["cause"] == "router":
                    out.router_clauses[r["clause"]] = out.router_clauses.get(r["clause"], 0) + 1
                    out.router_sides[r["side"]] += 1
                    key = f"{'both' if r['side'] == 'both' else r['side'].upper()} departs: {r['departs']}"
                    out.router_departures[key] = out.router_departures.get(key, 0) + 1
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
        for cause in CAUSES:
            out.causes[cause] += per[cause]
    out.tokens_flipped = int(flipped_any.sum())
    out.worst = [r for _, r in candidates]
    return out


def check_traces(a: str | Path, b: str | Path, contract: str) -> int:
    """Open both traces and check them as a pair, reading no row (``TraceError`` in one line); the token-layers a diff
    compares."""
    ta, tb = open_trace(a), open_trace(b)
    pairs, _, _, _ = _check_pair(ta, tb, oracle.get_contract(contract))
    return len(pairs) * ta.tokens


def _check_pair(ta: Trace, tb: Trace, c) -> tuple[list[tuple[str, int, int]], list[str], list[str], str]:
    """Everything about the pair checked before a row is read; the layer pairs (``pair_layers``)."""
    if (ta.tokens, ta.topk) != (tb.tokens, tb.topk):
        raise TraceError(f"{ta.path} has {ta.layer_count} layers x {ta.tokens} tokens x top-{ta.topk}, {tb.path} {tb.layer_count} x {tb.tokens} x top-{tb.topk}; "
                         "trace-diff compares two traces of the same tokens")  # fmt: skip
    if bool(ta.layers) != bool(tb.layers):
        raise TraceError(f"{ta.path if ta.layers else tb.path} has a layers dimension and {tb.path if ta.layers else ta.path} none; "
                         "save both traces as [tokens, k] or both as [layers, tokens, k]")  # fmt: skip
    if ta.experts is None and tb.experts is None:
        raise TraceError(f"neither {ta.path} nor {tb.path} holds logits; record the router logits in at least one trace (the capture command does)")
    if ta.experts is not None and tb.experts is not None and ta.experts != tb.experts:
        raise TraceError(f"{ta.path} has {ta.experts} experts, {tb.path} {tb.experts}; both traces must come from the same model")
    experts = ta.experts or tb.experts
    for t in (ta, tb):
        if t.bias_shape is not None and t.bias_shape[-1] != experts:
            raise TraceError(f"{t.path}: bias {list(t.bias_shape)} does not fit the {experts} experts of the logits; "
                             f"need [{experts}] or [{t.layer_count}, {experts}]")  # fmt: skip
    if ta.topk > experts:
        raise TraceError(f"{ta.path}: top-{ta.topk} of {experts} experts")
    if c.is_grouped and experts % c.n_group:
        raise TraceError(f"contract {c.name} splits experts into {c.n_group} groups; {experts} experts do not split; choose another --contract")
    pairs, only_a, only_b, by = pair_layers(ta, tb)
    if not pairs:
        raise TraceError(f"no layer of {ta.path} ({', '.join(ta.layer_names)}) has a namesake in {tb.path} ({', '.join(tb.layer_names)}); "
                         "nothing to compare: give two traces of the same layers")  # fmt: skip
    return pairs, only_a, only_b, by


def _bias_for(b: torch.Tensor | None, other: torch.Tensor | None, c, experts: int) -> torch.Tensor | None:
    if not c.has_bias:
        return None
    if b is not None:
        return b
    return other if other is not None else torch.zeros(experts)


def _diff_chunk(ta: Trace, tb: Trace, c, layer: int, layer_b: int, first: int, n: int, bias_a, bias_b, ordered: bool):
    ids_a, ids_b = ta.read("ids", layer, first, n), tb.read("ids", layer_b, first, n)  # int64 as read
    la, lb = ta.read("logits", layer, first, n), tb.read("logits", layer_b, first, n)
    la = la if la is not None else lb
    lb = lb if lb is not None else la
    experts = la.shape[1]
    ba, bb = _bias_for(bias_a, bias_b, c, experts), _bias_for(bias_b, bias_a, c, experts)
    inputs_differ = (_bits(la) != _bits(lb)).any(1)
    if ba is not None and not torch.equal(_bits(ba), _bits(bb)):
        inputs_differ[:] = True
    # an id that names no expert, or one expert named twice in a row, is the router's, flipped or not
    invalid = _outside(ids_a, experts) | _outside(ids_b, experts) | _repeated(ids_a) | _repeated(ids_b)
    flip = ~_same_routing(ids_a, ids_b, ordered) | invalid
    rows = flip.nonzero().squeeze(1)
    differ_rows = int(inputs_differ.sum())
    if not rows.numel():
        return 0, dict.fromkeys(CAUSES, 0), differ_rows, 0, []
    wa, wb = ta.read("weights", layer, first, n)[rows], tb.read("weights", layer_b, first, n)[rows]
    ia, ib = ids_a[rows], ids_b[rows]
    topk = ia.shape[1]
    fa, fb = (t.read("faults", at, first, n) for t, at in ((ta, layer), (tb, layer_b)))
    breaks_a, clause_a, oracle_a, words_a = _side_blame(la[rows], ba, wa, ia, c, topk, layer, first, None if fa is None else fa[rows])
    breaks_b, clause_b, oracle_b, words_b = _side_blame(lb[rows], bb, wb, ib, c, topk, layer, first, None if fb is None else fb[rows])
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
            a_words, b_words = words_a[j] or FOLLOWS.words, words_b[j] or FOLLOWS.words
            departs = a_words if side == "a" else b_words if side == "b" else f"A: {a_words} | B: {b_words}"
            r.update(side=side, clause=clause, a_departs=a_words, b_departs=b_words, departs=departs,
                     why=f"{'both sides break' if side == 'both' else f'side {side} breaks'} {clause} under contract {c.name}"
                         + ("" if side == "both" else f"; side {'b' if side == 'a' else 'a'} follows it") + f": {departs}")  # fmt: skip
        records.append(r)
    counts = {name: int((cause == i).sum()) for i, name in enumerate(CAUSES)}
    return int(rows.numel()), counts, differ_rows, int(invalid.sum()), records


def token_view(a: str | Path, b: str | Path, contract: str, layer: int, token: int) -> str:
    """One token of one layer side by side (a replay line's ``--layer L --token T``: L is A's layer, B's is its namesake)."""
    c = oracle.get_contract(contract)
    ta, tb = open_trace(a), open_trace(b)
    pairs, _, _, _ = _check_pair(ta, tb, c)
    if not (0 <= layer < ta.layer_count and 0 <= token < ta.tokens):
        raise TraceError(f"--layer {layer} --token {token} is outside the traces' {ta.layer_count} layers x {ta.tokens} tokens")
    layer_b = next((lb for _, la, lb in pairs if la == layer), None)
    if layer_b is None:
        raise TraceError(f"--layer {layer} ({ta.layer_names[layer]}) of {ta.path} has no namesake in {tb.path}; choose a layer both traces hold")
    lines = [f"layer {layer} ({ta.layer_names[layer]}), token {token}, contract {c.name}" + (f"; layer {layer_b} of {tb.path}" if layer_b != layer else "")]
    for name, t, at in (("a", ta, layer), ("b", tb, layer_b)):
        lines.append(f"  {name} ids     {t.read('ids', at, token, 1)[0].tolist()}")
        lines.append(f"  {name} weights {[round(float(w), 7) for w in t.read('weights', at, token, 1)[0]]}")
    la, lb = ta.read("logits", layer, token, 1), tb.read("logits", layer_b, token, 1)
    for name, lg, t, other, at, at_other in (("a", la, ta, tb, layer, layer_b), ("b", lb, tb, ta, layer_b, layer)):
        if lg is None:
            continue
        bias = _bias_for(t.bias(at), other.bias(at_other), c, lg.shape[1])
        w, ids = oracle.route(lg, bias, ta.topk, renormalize=c.default_renormalize, routed_scaling_factor=c.routed_scaling_factor,
                              contract=c, **({"num_expert_group": c.n_group, "topk_group": c.topk_group} if c.is_grouped else {}))  # fmt: skip
        lines.append(f"  oracle on {name}'s logits: ids {ids[0].tolist()}")
    if la is not None and lb is not None:
        d = ulp_distance(la.float(), lb.float())[0]
        lines.append(f"  logits differ at {int((d > 0).sum())} experts, by at most {float(d.max()):g} ULP (fp32)")
    return "\n".join(lines)
