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

Large files are never loaded whole: ``.safetensors`` and ``.npy`` rows are
read at their byte offset with ``os.pread`` (the header gives the offset),
so only the case in hand is in memory; pages of a memory map would count
toward the process's RSS as they are touched, a read into a fresh buffer does
not. ``.pt`` files are opened with ``torch.load(mmap=True)``. Every file is
first accepted by its own format's library (``safetensors.safe_open``, whose
checks refuse a byte range that does not hold its tensor's shape;
``numpy``'s header reader; ``torch.load``), and only then are its offsets used.

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
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import torch

from .pins import CALL_CONTEXTS
from .spec import CaseSpec

__all__ = ["CAPTURED_SIZES", "CapturedError", "LogitsFile", "build_captured", "family_name", "file_row", "iter_captured_plan",
           "captured_rows", "open_logits", "parse_captured_replay", "plan_position", "sha256_of"]  # fmt: skip

# Case sizes walked first on every layer: odd and power-of-two batch sizes around the launch-shape edges.
CAPTURED_SIZES = (1, 2, 3, 7, 8, 16, 17, 33, 64, 65, 128, 129, 255, 256, 513, 1024, 1025, 4096)
FAMILY = "captured"
SUFFIXES = (".safetensors", ".pt", ".pth", ".npy")

_SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}
_LOGIT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class CapturedError(ValueError):
    """A logits or bias file that cannot be used; the message names the file, what is wrong and the fix."""


class InputChanged(CapturedError):
    """A captured file whose bytes changed after the check pinned them: neither the candidate's fault nor the
    harness's, so the check ends ERROR ``input_changed`` (``contracts.run.containment``), never with a blame."""


@dataclass(frozen=True)
class _Tensor:
    """Where a tensor's bytes are: a C-contiguous array at ``offset`` in ``path`` (or an in-memory tensor)."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    offset: int = 0
    tensor: torch.Tensor | None = None  # .pt: the (memory-mapped) tensor itself

    @property
    def nbytes(self) -> int:
        n = torch.empty((), dtype=self.dtype).element_size()
        for d in self.shape:
            n *= d
        return n


def _read_safetensors_header(path: Path) -> tuple[dict, int]:
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) != 8:
            raise CapturedError(f"{path}: not a safetensors file (shorter than its 8-byte header length)")
        (n,) = struct.unpack("<Q", head)
        if n > 100 << 20:
            raise CapturedError(f"{path}: not a safetensors file (a header of {n} bytes)")
        try:
            header = json.loads(f.read(n))
        except ValueError:
            raise CapturedError(f"{path}: not a safetensors file (its header is not JSON)") from None
    return header, 8 + n


def _safetensors_entries(path: Path) -> tuple[dict[str, _Tensor], dict]:
    # The safetensors library checks the file first (every tensor's byte range holds exactly its shape and dtype, the
    # ranges tile the data, the file is long enough); its verdict is final. Only then are the header's offsets read
    # here, for pread (safe_open's slices come from a memory map, whose touched pages stay in the RSS).
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            checked = {k: (tuple(handle.get_slice(k).get_shape()), handle.get_slice(k).get_dtype()) for k in handle.keys()}
            meta = handle.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise CapturedError(f"{path}: the safetensors library refuses it ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__}); "
                            "write it again with safetensors.torch.save_file (or the capture command)") from None  # fmt: skip
    header, base = _read_safetensors_header(path)
    header.pop("__metadata__", None)
    out = {}
    for key, (shape, dtype_name) in checked.items():
        dtype = _SAFETENSORS_DTYPES.get(dtype_name)
        if dtype is None:
            continue  # ids (I32/I64) and other integer tensors of a capture: not logits
        start, stop = header[key]["data_offsets"]
        t = _Tensor(shape, dtype, base + start)
        if tuple(header[key]["shape"]) != shape or stop - start != t.nbytes:  # what the library checked; never read past a tensor
            raise CapturedError(f"{path}: tensor {key!r} of shape {list(shape)} has a byte range of {stop - start} bytes, not {t.nbytes}; write it again")
        out[key] = t
    ints = {k: shape for k, (shape, _) in checked.items() if k not in out}
    return out, {"metadata": meta, "other_keys": ints}


def _npy_entries(path: Path) -> tuple[dict[str, _Tensor], dict]:
    import numpy as np

    with open(path, "rb") as f:
        try:
            version = np.lib.format.read_magic(f)
            read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
            shape, fortran, dtype = read(f)
        except (ValueError, EOFError) as exc:
            raise CapturedError(f"{path}: not a .npy array ({exc})") from None
        offset = f.tell()
    if fortran and len(shape) > 1:
        raise CapturedError(f"{path}: a Fortran-ordered array; save it C-ordered (np.save(path, np.ascontiguousarray(a)))")
    names = {np.dtype("float16"): torch.float16, np.dtype("float32"): torch.float32, np.dtype("float64"): torch.float64}
    if dtype.newbyteorder("=") not in names or dtype.byteorder == ">":
        raise CapturedError(f"{path}: dtype {dtype} is not a float type the harness reads; save float32 or float16 (numpy has no bf16: use .safetensors or .pt)")
    t = _Tensor(tuple(shape), names[dtype.newbyteorder("=")], offset)
    if os.path.getsize(path) < offset + t.nbytes:
        raise CapturedError(f"{path}: the file ends before its {list(shape)} array does (truncated?); save it again")
    return {"": t}, {"metadata": {}, "other_keys": {}}


def _pt_entries(path: Path) -> tuple[dict[str, _Tensor], dict]:
    try:
        obj = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 -- any unreadable file is one line naming it
        raise CapturedError(f"{path}: torch.load could not read it ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if isinstance(obj, torch.Tensor):
        return {"": _Tensor(tuple(obj.shape), obj.dtype, tensor=obj)}, {"metadata": {}, "other_keys": {}}
    if not isinstance(obj, dict):
        raise CapturedError(f"{path}: holds a {type(obj).__name__}; save a tensor or a dict with the key 'logits'")
    out = {k: _Tensor(tuple(v.shape), v.dtype, tensor=v) for k, v in obj.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    meta = {k: v for k, v in obj.items() if not isinstance(v, torch.Tensor)}
    return out, {"metadata": meta, "other_keys": {k: tuple(v.shape) for k, v in obj.items() if isinstance(v, torch.Tensor) and not v.is_floating_point()}}


def _entries(path: Path) -> tuple[dict[str, _Tensor], dict]:
    if not path.is_file():
        raise CapturedError(f"{path}: no such file; give the path of a .safetensors, .pt or .npy logits file")
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        return _safetensors_entries(path)
    if suffix == ".npy":
        return _npy_entries(path)
    if suffix in (".pt", ".pth"):
        return _pt_entries(path)
    raise CapturedError(f"{path}: unknown suffix {suffix!r}; logits files are {', '.join(SUFFIXES)}")


def _pick(entries: dict[str, _Tensor], key: str, path: Path, *, required: bool) -> _Tensor | None:
    if key in entries:
        return entries[key]
    if "" in entries and key == "logits":
        return entries[""]
    if required:
        raise CapturedError(f"{path}: no tensor under the key {key!r} (it holds {', '.join(sorted(entries)) or 'no float tensor'}); "
                            f"save the router logits [tokens, E] or [layers, tokens, E] under 'logits'")  # fmt: skip
    return None


def _read_rows(path: Path, t: _Tensor, first: int, count: int, width: int) -> torch.Tensor:
    """Rows ``first .. first + count`` of a 2-D view ``[*, width]`` of ``t``, as a fresh tensor."""
    if t.tensor is not None:
        return t.tensor.reshape(-1, width)[first : first + count].clone()
    item = torch.empty((), dtype=t.dtype).element_size()
    n = count * width * item
    buf = bytearray(n)
    fd = os.open(path, os.O_RDONLY)
    try:
        view, done, at = memoryview(buf), 0, t.offset + first * width * item
        while done < n:
            got = os.preadv(fd, [view[done:]], at + done)
            if got <= 0:
                raise CapturedError(f"{path}: the file ends before row {first + count} (truncated?); capture it again")
            done += got
    finally:
        os.close(fd)
    return torch.frombuffer(buf, dtype=t.dtype).reshape(count, width)


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


def _pin_file(path: Path, tensors: list[_Tensor], widths: list[int]) -> list[_Pin]:
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


def _read_pinned(path: Path, t: _Tensor, pin: _Pin, first: int, count: int) -> torch.Tensor:
    """Rows ``first .. first + count`` of ``t`` (2-D view ``[*, pin.width]``), each block they touch read whole and
    checked against the pin: a file changed since it was opened is a ``CapturedError`` naming it, never other rows."""
    if count <= 0:
        return _read_rows(path, t, first, 0, pin.width)
    total = (t.nbytes // (torch.empty((), dtype=t.dtype).element_size() * pin.width))
    b0, b1 = first // pin.block_rows, (first + count - 1) // pin.block_rows
    lo, hi = b0 * pin.block_rows, min((b1 + 1) * pin.block_rows, total)
    rows = _read_rows(path, t, lo, hi - lo, pin.width)
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
    _logits: _Tensor
    _bias: _Tensor | None
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
    entries, info = _entries(path)
    t = _pick(entries, "logits", path, required=True)
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
    b = None if bias_path is not None else _pick(entries, "bias", path, required=False)
    if bias_path is not None:
        bias_file = Path(bias_path)
        b_entries, _ = _entries(bias_file)
        b = _pick(b_entries, "bias", bias_file, required=False) or _pick(b_entries, "logits", bias_file, required=False)
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


DIGEST_CHARS = 16  # of the SHA-256 in a replay line: enough to tell two files apart, short enough to read


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
