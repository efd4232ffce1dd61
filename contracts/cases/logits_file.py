"""An opened logits file, pinned: its shape, layers and bias, and its rows on demand, checked against what was read
when it was opened.

A file is **pinned** for the whole check: opening it reads it once, taking
its SHA-256 (the replay line's) and a digest of every block of about 1 MiB of
its logits; every later read of rows checks the blocks it reads against
those, and a process that opens the file again (an isolated candidate's
worker) checks that its SHA-256 is the one the case names. So the oracle and
the candidate route the same bytes, and a file changed during a check ends
it with an error naming the file (``CapturedError``), never a blame. The
bias is read once, when the file is opened, and kept; a float64 bias is
taken as fp32 (rounded to nearest), the dtype the contracts rank in.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .logits_formats import CapturedError, StoredTensor, pick, read_entries, read_rows

__all__ = ["DIGEST_CHARS", "FAMILY", "InputChanged", "LogitsFile", "family_name", "open_logits", "sha256_of"]

FAMILY = "captured"
_LOGIT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)
DIGEST_CHARS = 16  # of the SHA-256 in a replay line: enough to tell two files apart, short enough to read


class InputChanged(CapturedError):
    """A captured file whose bytes changed after the check pinned them: neither the candidate's fault nor the
    harness's, so the check ends ERROR ``input_changed`` (``contracts.run.containment``), never with a blame."""


def sha256_of(path: str | Path, chunk: int = 8 << 20) -> str:
    """The file's SHA-256, read in chunks (a replay line names it; a replay refuses another file)."""
    h = hashlib.sha256()
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
    return h.hexdigest()


PIN_BLOCK_BYTES = 1 << 20  # the bytes of rows one block digest covers (whole rows; at least one)


def _block_digest(data) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True)
class _Pin:
    """A tensor's bytes as they were when the file was opened: a digest per block of ``block_rows`` rows of its 2-D view
    ``[rows, width]``, and the file's SHA-256 taken in the same read."""

    sha256: str
    width: int
    block_rows: int
    blocks: tuple[bytes, ...]


def _block_rows(width: int, dtype: torch.dtype) -> int:
    return max(1, PIN_BLOCK_BYTES // (width * torch.empty((), dtype=dtype).element_size()))


def _pin_file(path: Path, tensors: list[StoredTensor], widths: list[int]) -> list[_Pin]:
    """One read of ``path``: its SHA-256 and the block digests of each tensor (``.safetensors``, ``.npy``: their byte
    ranges as the read passes them; ``.pt``: the memory-mapped tensors, after the file's digest)."""
    if all(t.tensor is not None for t in tensors):
        sha = sha256_of(path)
        pins = []
        for t, width in zip(tensors, widths):
            rows, per = t.tensor.reshape(-1, width), _block_rows(width, t.dtype)
            blocks = tuple(_block_digest(_raw(rows[i : i + per])) for i in range(0, rows.shape[0], per))
            pins.append(_Pin(sha, width, per, blocks))
        return pins
    item = [torch.empty((), dtype=t.dtype).element_size() for t in tensors]
    spans = [(t.offset, t.offset + t.nbytes, _block_rows(w, t.dtype) * w * i) for t, w, i in zip(tensors, widths, item)]
    blocks: list[list[bytes]] = [[] for _ in tensors]
    open_block = [hashlib.blake2b(digest_size=16) for _ in tensors]
    filled = [0] * len(tensors)
    h = hashlib.sha256()
    buf = bytearray(8 << 20)
    view = memoryview(buf)
    pos = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
            for j, (lo, hi, size) in enumerate(spans):
                at, stop = max(pos, lo), min(pos + n, hi)
                while at < stop:
                    take = min(stop - at, size - filled[j])
                    open_block[j].update(view[at - pos : at - pos + take])
                    filled[j] += take
                    at += take
                    if filled[j] == size:
                        blocks[j].append(open_block[j].digest())
                        open_block[j], filled[j] = hashlib.blake2b(digest_size=16), 0
            pos += n
    sha = h.hexdigest()
    pins = []
    for j, (t, w) in enumerate(zip(tensors, widths)):
        if filled[j]:
            blocks[j].append(open_block[j].digest())
        if pos < spans[j][1]:
            raise CapturedError(f"{path}: the file ends before its tensor does (truncated?); capture it again")
        pins.append(_Pin(sha, w, _block_rows(w, t.dtype), tuple(blocks[j])))
    return pins


def _raw(rows: torch.Tensor):
    """The bytes of C-contiguous rows, as a buffer (bf16 included)."""
    return rows.contiguous().view(torch.uint8).numpy().data if rows.numel() else b""


def _read_pinned(path: Path, t: StoredTensor, pin: _Pin, first: int, count: int) -> torch.Tensor:
    """Rows ``first .. first + count`` of ``t`` (2-D view ``[*, pin.width]``), each block they touch read whole and
    checked against the pin: a file changed since it was opened is a ``CapturedError`` naming it, never other rows."""
    if count <= 0:
        return read_rows(path, t, first, 0, pin.width)
    total = (t.nbytes // (torch.empty((), dtype=t.dtype).element_size() * pin.width))
    b0, b1 = first // pin.block_rows, (first + count - 1) // pin.block_rows
    lo, hi = b0 * pin.block_rows, min((b1 + 1) * pin.block_rows, total)
    rows = read_rows(path, t, lo, hi - lo, pin.width)
    for b in range(b0, b1 + 1):
        part = rows[(b - b0) * pin.block_rows : (b - b0 + 1) * pin.block_rows]
        if b >= len(pin.blocks) or _block_digest(_raw(part)) != pin.blocks[b]:
            raise InputChanged(f"{path} changed while it was being checked (rows {b * pin.block_rows}..{b * pin.block_rows + part.shape[0] - 1} "
                                f"differ from the file of SHA-256 {pin.sha256[:DIGEST_CHARS]}... this check opened); the check stops: "
                                "leave the file alone while it is checked, and check it again")  # fmt: skip
    return rows[first - lo : first - lo + count].clone()


@dataclass(frozen=True)
class LogitsFile:
    """An opened logits file, pinned (see the module docstring): its shape, its layers' names and bias, and its rows on
    demand, checked against what was read when it was opened."""

    path: Path
    layers: int  # 0: a [tokens, E] file (no layer dimension)
    tokens: int
    experts: int
    dtype: torch.dtype
    layer_names: tuple[str, ...]
    bias_path: Path | None  # --bias, when the bias is not in the logits file
    topk: int | None  # the k of the model's own ids, when the file holds them (a capture does): the default --topk
    _logits: StoredTensor
    _bias: StoredTensor | None
    _bias_file: Path
    sha256: str = ""  # of the logits file, as opened (pinned)
    bias_sha256: str | None = None  # of the --bias file, as opened (None: no --bias file)
    bias_dtype: torch.dtype | None = None  # as stored (a float64 one is kept as fp32)
    _pin: _Pin | None = None
    _bias_rows: torch.Tensor | None = None  # [1 or layers, E], read once when opened

    @property
    def layer_count(self) -> int:
        return max(self.layers, 1)

    @property
    def rows(self) -> int:
        return self.layer_count * self.tokens

    @property
    def has_bias(self) -> bool:
        return self._bias is not None

    def family(self, layer: int) -> str:
        return family_name(layer if self.layers else None)

    def logits(self, layer: int, first: int, count: int) -> torch.Tensor:
        """Rows ``first .. first + count`` of ``layer`` (0 for a file without layers), in the stored dtype."""
        if not (0 <= layer < self.layer_count and 0 <= first and first + count <= self.tokens):
            raise CapturedError(f"{self.path}: rows {first}..{first + count - 1} of layer {layer} are outside its {self.layer_count} x {self.tokens} rows")
        return _read_pinned(self.path, self._logits, self._pin, layer * self.tokens + first, count)

    def bias(self, layer: int) -> torch.Tensor | None:
        if self._bias_rows is None:
            return None
        return self._bias_rows[layer if self._bias_rows.shape[0] > 1 else 0].clone()


def _layer_names(info: dict, layers: int) -> tuple[str, ...]:
    raw = info["metadata"].get("layer_names")
    names = json.loads(raw) if isinstance(raw, str) else raw
    if isinstance(names, (list, tuple)) and len(names) == max(layers, 1) and all(isinstance(n, str) for n in names):
        return tuple(names)
    return tuple(f"layer {i}" for i in range(max(layers, 1)))


def _version(path: str | Path | None) -> tuple | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_dev)


def open_logits(path: str | Path, bias_path: str | Path | None = None) -> LogitsFile:
    """Open ``path`` (and ``bias_path``): shapes and dtypes checked, the file pinned (read once: its SHA-256 and block
    digests), the bias read. Once per file version (size, mtime, inode) in a process.

    ``CapturedError`` (one line naming the file and the fix) for a file that does not fit.
    """
    return _open_logits(str(path), None if bias_path is None else str(bias_path), _version(path), _version(bias_path))


@functools.lru_cache(maxsize=8)
def _open_logits(path: str, bias_path: str | None, _logits_version, _bias_version) -> LogitsFile:
    path = Path(path)
    entries, info = read_entries(path)
    t = pick(entries, "logits", path, required=True)
    if len(t.shape) not in (2, 3) or 0 in t.shape:
        raise CapturedError(f"{path}: logits of shape {list(t.shape)}; need [tokens, E] or [layers, tokens, E] with no empty dimension")
    if t.dtype not in _LOGIT_DTYPES:
        raise CapturedError(f"{path}: logits in {t.dtype}; the harness checks bf16, fp16 or fp32 logits, the dtype the router read "
                            "(float64 logits are refused by check, matrix, nightly and trace-diff alike: save them in that dtype)")  # fmt: skip
    layers = t.shape[0] if len(t.shape) == 3 else 0
    tokens, experts = t.shape[-2], t.shape[-1]
    if bias_path is None and "bias" in info["other_keys"]:  # not a float tensor: never taken for "no bias" (a zero one)
        raise CapturedError(f"{path}: its 'bias' is not a float tensor; save the correction bias as float (fp32 as the model keeps it)")
    bias_file = path
    b = None if bias_path is not None else pick(entries, "bias", path, required=False)
    if bias_path is not None:
        bias_file = Path(bias_path)
        b_entries, _ = read_entries(bias_file)
        b = pick(b_entries, "bias", bias_file, required=False) or pick(b_entries, "logits", bias_file, required=False)
        if b is None:
            raise CapturedError(f"{bias_file}: no tensor under the key 'bias'; save the correction bias [E] or [layers, E] as a bare tensor or under 'bias'")
    if b is not None:
        ok = (len(b.shape) == 1 and b.shape[0] == experts) or (len(b.shape) == 2 and b.shape == (max(layers, 1), experts))
        if not ok:
            raise CapturedError(f"{bias_file}: bias of shape {list(b.shape)} does not fit logits {list(t.shape)}; need [{experts}] or [{max(layers, 1)}, {experts}]")
    same_file = b is not None and bias_file == path
    pins = _pin_file(path, [t, b] if same_file else [t], [experts, experts] if same_file else [experts])
    bias_rows = bias_sha = None
    if b is not None:
        bias_pin = pins[1] if same_file else _pin_file(bias_file, [b], [experts])[0]
        bias_sha = None if same_file else bias_pin.sha256
        bias_rows = _read_pinned(bias_file, b, bias_pin, 0, b.shape[0] if len(b.shape) == 2 else 1)
        if bias_rows.dtype == torch.float64:  # any float (docs/real-traffic.md): fp32, the dtype the contracts rank in
            bias_rows = bias_rows.float()
    ids = info["other_keys"].get("ids")
    topk = ids[-1] if ids and tuple(ids[:-1]) == tuple(t.shape[:-1]) else None
    return LogitsFile(path, layers, tokens, experts, t.dtype, _layer_names(info, layers), Path(bias_path) if bias_path else None, topk,
                      t, b, bias_file, sha256=pins[0].sha256, bias_sha256=bias_sha, bias_dtype=None if b is None else b.dtype,
                      _pin=pins[0], _bias_rows=bias_rows)  # fmt: skip


open_logits.cache_clear = _open_logits.cache_clear  # tests and long-lived processes


def family_name(layer: int | None) -> str:
    return FAMILY if layer is None else f"{FAMILY}.L{layer}"
