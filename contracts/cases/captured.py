"""Captured router logits as cases: rows a model produced, read from a file a slice at a time.

A logits file is ``.safetensors``, ``.pt`` or ``.npy`` holding ``[tokens, E]``
or ``[layers, tokens, E]`` logits, as the bare tensor or under the key
``logits``; a correction bias ``[E]`` or ``[layers, E]`` may sit beside it
under the key ``bias`` (or come from its own file, ``--bias``). The capture
command (``contracts.run.capture``) writes such a file, with the layer names
in its metadata.

Each layer is a family (``captured`` for a file without layers, else
``captured.L<i>``). A case is a run of consecutive rows, so its replay id
``captured.L3:START:ROWS`` names the first row and the row count, and the
plan walks every row once: first in cases of ``CAPTURED_SIZES`` rows (the
batch sizes that pick a kernel's launch shapes, on real rows), then in bulk
cases of the plan's bulk size; then the first layer's first rows once more
in every call context (``CALL_CONTEXTS``) at each launch class of the
contract's kernels, with the context's tags in the replay id
(``captured.L0:0:64:grad-inference:autocast``). The spec carries the file (``CaseSpec.source``,
a JSON string), so a worker process rebuilds the same case from it.

Reading the file is ``contracts.cases.logits_formats``; pinning and opening it, ``contracts.cases.logits_file``.
"""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Iterator

import torch

from .logits_file import DIGEST_CHARS, FAMILY, InputChanged, LogitsFile, open_logits, sha256_of
from .logits_formats import CapturedError
from .pins import CALL_CONTEXTS
from .spec import CaseSpec

__all__ = ["CAPTURED_SIZES", "CapturedError", "build_captured", "captured_rows", "captured_spec", "check_digest", "describe", "file_digest", "file_row",
           "iter_captured_plan", "parse_captured_replay", "plan_position", "replay_args", "source_from_record"]  # fmt: skip

# Case sizes walked first on every layer: odd and power-of-two batch sizes around the launch-shape edges.
CAPTURED_SIZES = (1, 2, 3, 7, 8, 16, 17, 33, 64, 65, 128, 129, 255, 256, 513, 1024, 1025, 4096)


def _layer_of(family: str) -> int | None:
    if family == FAMILY:
        return None
    prefix = FAMILY + ".L"
    if family.startswith(prefix) and family[len(prefix) :].isdigit():
        return int(family[len(prefix) :])
    raise CapturedError(f"{family!r} is not a captured family; captured cases are {FAMILY} or {FAMILY}.L<layer>")


def _source(f: LogitsFile, layer: int, renormalize: bool, rsf: float, zero_bias: bool) -> str:
    return json.dumps({"logits": str(f.path), "bias": str(f.bias_path) if f.bias_path else None, "layer": layer,
                       "renormalize": renormalize, "rsf": rsf, "zero_bias": zero_bias, "sha256": f.sha256,
                       "bias_sha256": f.bias_sha256}, sort_keys=True)  # fmt: skip


@functools.lru_cache(maxsize=8)
def _digest(path: str, size: int, mtime_ns: int) -> str:
    return sha256_of(path)


def file_digest(path: str | Path) -> str:
    """``sha256_of`` once per file version (size and mtime) in this process."""
    st = os.stat(path)
    return _digest(str(path), st.st_size, st.st_mtime_ns)




def check_digest(path: str | Path | LogitsFile, expected: str) -> None:
    """``--logits-sha256``: refuse a file whose digest does not start with ``expected`` (a replay on another file). An opened
    ``LogitsFile``: its pinned digest (the bytes the check reads)."""
    actual = path.sha256 if isinstance(path, LogitsFile) else file_digest(path)
    path = path.path if isinstance(path, LogitsFile) else path
    if not expected or not actual.startswith(expected.lower()):
        raise CapturedError(f"--logits-sha256 {expected}: {path} has SHA-256 {actual[:DIGEST_CHARS]}...; the replay line was written for another file")


def replay_args(spec: CaseSpec, row: int | None) -> tuple[list[str], str]:
    """The options a replay line of a captured case adds (``--logits FILE --logits-sha256 D [--bias FILE]``), and a
    shell comment naming the file's row (the token) of ``row``."""
    src = json.loads(spec.source)
    args = ["--logits", src["logits"], "--logits-sha256", src["sha256"][:DIGEST_CHARS]]
    if src["bias"]:
        args += ["--bias", src["bias"]]
    family, first = spec.replay_id.split(":")[:2]  # what a spec rebuilt from a summary has, too
    where = f"layer {src['layer']} " if family != FAMILY else ""
    return args, (f"  # {where}token {int(first) + row}" if row is not None else "")


def source_from_record(record: dict | None, replay_id: str) -> str:
    """A captured case's ``CaseSpec.source`` rebuilt from a summary's ``options["logits"]`` (for replay lines written
    from a bundle's files); "" when the summary is not of captured logits."""
    if not record:
        return ""
    try:
        layer = _layer_of(replay_id.split(":")[0])
    except CapturedError:
        return ""
    bias = record.get("bias")
    return json.dumps({"logits": record["path"], "bias": None if bias in ("none", "zero", record["path"]) else bias,
                       "layer": layer or 0, "sha256": record["sha256"]}, sort_keys=True)  # fmt: skip


def _contexts(contract_bias: bool) -> list[dict]:
    return [c for c in CALL_CONTEXTS if contract_bias or c["bias_parameter"] is None]


def _context_tags(context: dict) -> tuple[str, ...]:
    return CaseSpec(FAMILY, 0, 0, 1, 1, **context).tags


@functools.lru_cache(maxsize=1)
def _contexts_by_tags() -> dict[str, dict]:
    """Each call context by its replay tags (``grad-inference:autocast``): built once, as a merge parses a replay id per cell."""
    return {":".join(_context_tags(c)): c for c in CALL_CONTEXTS}


def iter_captured_plan(f: LogitsFile, topk: int, *, bulk_rows: int | None, renormalize: bool, routed_scaling_factor: float,
                       contract_bias: bool, n_group: int = 1, topk_group: int = 1, sizes=CAPTURED_SIZES,
                       context_sizes: tuple[int, ...] = (), options: tuple[tuple[bool, float], ...] = ()) -> Iterator[CaseSpec]:  # fmt: skip
    """Every row of every layer once: cases of ``sizes`` rows first, then bulk cases of ``bulk_rows``. Then the first
    layer's first rows again in every call context (``CALL_CONTEXTS``: grad mode, the bias as a Parameter, logits
    requiring grad, autocast, a bf16 default dtype) at each of ``context_sizes`` (the launch classes of the contract's kernels): the default
    context is the walk's, and a router served under inference mode or trained under autocast must route the captured
    rows right there too. Last, the first layer's first ``OPTION_ROWS`` rows once with each ``(renormalize,
    routed_scaling_factor)`` of ``options``: the call options the contract admits beside the model's own."""
    zero_bias = contract_bias and not f.has_bias
    shape = dict(n_group=n_group, topk_group=topk_group, bias=contract_bias)
    for layer in range(f.layer_count):
        source = _source(f, layer, renormalize, routed_scaling_factor, zero_bias)
        family = f.family(layer)
        first, index = 0, 0
        while first < f.tokens:
            if index < len(sizes) or bulk_rows is None:
                rows, bulk = sizes[index % len(sizes)], False
            else:
                rows, bulk = bulk_rows, True
            rows = min(rows, f.tokens - first)
            yield CaseSpec(family, first, rows, f.experts, topk, bulk=bulk, source=source, **shape)
            first += rows
            index += 1
    source = _source(f, 0, renormalize, routed_scaling_factor, zero_bias)
    for context in _contexts(contract_bias):
        for rows in _context_rows(f.tokens, context_sizes):
            yield CaseSpec(f.family(0), 0, rows, f.experts, topk, source=source, **shape, **context)
    for r, rsf in options:  # the call options the model's own leave unexercised (contracts.cases.exercised.option_pairs)
        yield CaseSpec(f.family(0), 0, min(OPTION_ROWS, f.tokens), f.experts, topk, source=_source(f, 0, r, rsf, zero_bias),
                       renormalize=r, scaling=rsf, **shape)  # fmt: skip


def _context_rows(tokens: int, context_sizes: tuple[int, ...]) -> list[int]:
    return sorted({min(n, tokens) for n in context_sizes if n > 0})


OPTION_ROWS = 64  # rows of a captured case pinned to a call option pair (the first layer's first rows)


def captured_rows(f: LogitsFile, contract_bias: bool, context_sizes: tuple[int, ...] = (), options: tuple = ()) -> int:
    """The rows ``iter_captured_plan`` routes: the file's, the call contexts' repeats of the first layer's, and its
    option cases'."""
    return f.rows + len(_contexts(contract_bias)) * sum(_context_rows(f.tokens, context_sizes)) + len(options) * min(OPTION_ROWS, f.tokens)


def captured_spec(f: LogitsFile, replay_id: str, topk: int, *, renormalize: bool, routed_scaling_factor: float, contract_bias: bool,
                  n_group: int = 1, topk_group: int = 1) -> CaseSpec:  # fmt: skip
    """The spec of a captured case's replay id ``captured.L3:START:ROWS[:bulk]`` or ``...:ROWS:CONTEXT`` (a call
    context's tags, ``grad-inference:autocast``)."""
    family, first, rows, bulk, context = parse_captured_replay(replay_id)
    renormalize = context.get("renormalize", renormalize)  # an option case's tags name its call options
    routed_scaling_factor = context.get("scaling", routed_scaling_factor)
    if context.get("bias_parameter") and not contract_bias:
        raise CapturedError(f"--replay {replay_id}: the contract has no correction bias, so no case pins the bias's kind; drop the bias_parameter tag")
    layer = _layer_of(family)
    if (layer is None) != (f.layers == 0) or (layer is not None and layer >= f.layers):
        want = FAMILY if f.layers == 0 else f"{FAMILY}.L0 .. {FAMILY}.L{f.layers - 1}"
        raise CapturedError(f"--replay {replay_id}: {f.path} has no family {family}; its families are {want}")
    if first + rows > f.tokens:
        raise CapturedError(f"--replay {replay_id}: rows {first}..{first + rows - 1} are outside the file's {f.tokens} tokens")
    source = _source(f, layer or 0, renormalize, routed_scaling_factor, contract_bias and not f.has_bias)
    return CaseSpec(family, first, rows, f.experts, topk, n_group, topk_group, bulk=bulk, bias=contract_bias, source=source, **context)


def parse_captured_replay(text: str) -> tuple[str, int, int, bool, dict]:
    """``(family, first row, rows, bulk, call context)`` of a captured case's replay id."""
    parts = text.split(":")
    bulk = len(parts) == 4 and parts[3] == "bulk"
    option = _option_of(parts[3:]) if len(parts) > 3 and not bulk else None
    context = option if option is not None else _contexts_by_tags().get(":".join(parts[3:])) if len(parts) > 3 and not bulk else {}
    if len(parts) < 3 or context is None:
        raise CapturedError(f"--replay {text!r} must be {FAMILY}[.L<layer>]:FIRST_ROW:ROWS[:bulk] or ...:ROWS:CONTEXT (a call "
                            "context's tags, e.g. :grad-inference:autocast), as printed in a report's replay line")  # fmt: skip
    _layer_of(parts[0])  # its own message: the family is not a captured one
    try:
        first, rows = int(parts[1]), int(parts[2])
    except ValueError:
        raise CapturedError(f"--replay {text!r}: FIRST_ROW and ROWS must be integers, as printed in a report's replay line") from None
    if first < 0 or rows < 1:
        raise CapturedError(f"--replay {text!r}: need FIRST_ROW >= 0 and ROWS >= 1")
    return parts[0], first, rows, bulk, context


def _option_of(tags: list[str]) -> dict | None:
    """``{"renormalize": bool, "scaling": float}`` of an option case's tags (``renormalize-off:scaling-2.5``), else None."""
    out: dict = {}
    for tag in tags:
        if tag in ("renormalize-on", "renormalize-off"):
            out["renormalize"] = tag == "renormalize-on"
        elif tag.startswith("scaling-"):
            try:
                out["scaling"] = float(tag.removeprefix("scaling-"))
            except ValueError:
                return None
        else:
            return None
    return out if len(out) == 2 else None


def plan_position(replay_id: str, tokens: int) -> int:
    """Where a captured case stands in its plan (layer by layer, each layer's rows in order, then the call contexts'
    cases) from its replay id alone: the file row of its first row, or past every file row, by context and rows. A
    merge puts the shards' cells back in this order without opening the file."""
    family, first, rows, _, context = parse_captured_replay(replay_id)
    if context and "scaling" in context:  # an option case: after the contexts' cases
        return _AFTER_THE_FILE + (len(CALL_CONTEXTS) + 1) * _CONTEXT_STRIDE + (not context["renormalize"]) * 2**32 + round(context["scaling"] * 2**16)
    if context:
        return _AFTER_THE_FILE + CALL_CONTEXTS.index(context) * _CONTEXT_STRIDE + rows
    return (_layer_of(family) or 0) * tokens + first


_CONTEXT_STRIDE = 1 << 40  # more rows than any case has
_AFTER_THE_FILE = 1 << 56  # more rows than any file has


def file_row(spec: CaseSpec, row: int) -> int:
    """The token index in the file of a case's ``row``."""
    return spec.case_seed + row


def build_captured(spec: CaseSpec, device: str = "cpu") -> tuple:
    """The inputs of a captured spec, ``(scores, bias, renormalize, routed_scaling_factor)``: its rows read from the
    file, the layer's bias (or a zero bias), the contract's call options. ``build.build_case`` makes the ``Case`` (this
    module does not import ``build``, which imports it: no import cycle)."""
    src = json.loads(spec.source)
    f = open_logits(src["logits"], src["bias"])
    for what, pinned, now in (("", src.get("sha256"), f.sha256), ("bias ", src.get("bias_sha256"), f.bias_sha256)):
        if pinned and pinned != now:  # another process (a worker) opened another version of the file than the check's
            path = f.path if not what else f.bias_path
            raise InputChanged(f"{path} changed while it was being checked (SHA-256 {str(now)[:DIGEST_CHARS]}..., the check opened "
                                f"{pinned[:DIGEST_CHARS]}...); the check stops: leave the {what}file alone while it is checked, and check it again")  # fmt: skip
    scores = f.logits(src["layer"], spec.case_seed, spec.rows).to(device)
    bias = None
    if spec.bias:
        b = f.bias(src["layer"])
        bias = (torch.zeros(f.experts, dtype=torch.float32) if b is None else b).to(device)
    return scores, bias, bool(src["renormalize"]), float(src["rsf"])


def describe(f: LogitsFile, contract) -> tuple[dict, list[str]]:
    """What a summary records of the file (``options["logits"]``), and the notes a reader must see (a zero bias)."""
    record = {"path": str(f.path), "sha256": f.sha256, "layers": f.layers, "tokens": f.tokens, "experts": f.experts,
              "dtype": str(f.dtype).removeprefix("torch."), "layer_names": list(f.layer_names),
              "bias": "none" if not contract.has_bias else (str(f.bias_path or f.path) if f.has_bias else "zero"),
              "bias_sha256": f.bias_sha256 if contract.has_bias and f.has_bias else None,
              "bias_dtype": str(f.bias_dtype).removeprefix("torch.") if contract.has_bias and f.has_bias else None}  # fmt: skip
    notes = []
    if contract.has_bias and f.bias_dtype == torch.float64:
        notes.append(f"the correction bias in {f.bias_path or f.path} is float64: it was taken as fp32 (rounded to nearest), "
                     "the dtype the contracts rank in")  # fmt: skip
    if contract.has_bias and not f.has_bias:
        notes.append(f"warning: {f.path} has no correction bias and no --bias was given; contract {contract.name} takes one, "
                     "so the rows were checked with a zero bias (pass --bias FILE with the model's e_score_correction_bias)")  # fmt: skip
    return record, notes
