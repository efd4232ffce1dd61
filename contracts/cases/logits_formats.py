"""Reading a logits file's formats: where each tensor's bytes are, and rows of them read at their offset.

Large files are never loaded whole: ``.safetensors`` and ``.npy`` rows are
read at their byte offset with ``os.pread`` (the header gives the offset),
so only the case in hand is in memory; pages of a memory map would count
toward the process's RSS as they are touched, a read into a fresh buffer does
not. ``.pt`` files are opened with ``torch.load(mmap=True)``. Every file is
first accepted by its own format's library (``safetensors.safe_open``, whose
checks refuse a byte range that does not hold its tensor's shape;
``numpy``'s header reader; ``torch.load``), and only then are its offsets used.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch

__all__ = ["SUFFIXES", "CapturedError", "StoredTensor", "read_entries", "pick", "read_rows"]

SUFFIXES = (".safetensors", ".pt", ".pth", ".npy")

_SAFETENSORS_DTYPES = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F64": torch.float64}


class CapturedError(ValueError):
    """A logits or bias file that cannot be used; the message names the file, what is wrong and the fix."""


@dataclass(frozen=True)
class StoredTensor:
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


def _safetensors_entries(path: Path) -> tuple[dict[str, StoredTensor], dict]:
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
        t = StoredTensor(shape, dtype, base + start)
        if tuple(header[key]["shape"]) != shape or stop - start != t.nbytes:  # what the library checked; never read past a tensor
            raise CapturedError(f"{path}: tensor {key!r} of shape {list(shape)} has a byte range of {stop - start} bytes, not {t.nbytes}; write it again")
        out[key] = t
    ints = {k: shape for k, (shape, _) in checked.items() if k not in out}
    return out, {"metadata": meta, "other_keys": ints}


def _npy_entries(path: Path) -> tuple[dict[str, StoredTensor], dict]:
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
    t = StoredTensor(tuple(shape), names[dtype.newbyteorder("=")], offset)
    if os.path.getsize(path) < offset + t.nbytes:
        raise CapturedError(f"{path}: the file ends before its {list(shape)} array does (truncated?); save it again")
    return {"": t}, {"metadata": {}, "other_keys": {}}


def _pt_entries(path: Path) -> tuple[dict[str, StoredTensor], dict]:
    try:
        obj = torch.load(path, mmap=True, weights_only=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 -- any unreadable file is one line naming it
        raise CapturedError(f"{path}: torch.load could not read it ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    if isinstance(obj, torch.Tensor):
        return {"": StoredTensor(tuple(obj.shape), obj.dtype, tensor=obj)}, {"metadata": {}, "other_keys": {}}
    if not isinstance(obj, dict):
        raise CapturedError(f"{path}: holds a {type(obj).__name__}; save a tensor or a dict with the key 'logits'")
    out = {k: StoredTensor(tuple(v.shape), v.dtype, tensor=v) for k, v in obj.items() if isinstance(v, torch.Tensor) and v.is_floating_point()}
    meta = {k: v for k, v in obj.items() if not isinstance(v, torch.Tensor)}
    return out, {"metadata": meta, "other_keys": {k: tuple(v.shape) for k, v in obj.items() if isinstance(v, torch.Tensor) and not v.is_floating_point()}}


def read_entries(path: Path) -> tuple[dict[str, StoredTensor], dict]:
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


def pick(entries: dict[str, StoredTensor], key: str, path: Path, *, required: bool) -> StoredTensor | None:
    if key in entries:
        return entries[key]
    if "" in entries and key == "logits":
        return entries[""]
    if required:
        raise CapturedError(f"{path}: no tensor under the key {key!r} (it holds {', '.join(sorted(entries)) or 'no float tensor'}); "
                            f"save the router logits [tokens, E] or [layers, tokens, E] under 'logits'")  # fmt: skip
    return None


def read_rows(path: Path, t: StoredTensor, first: int, count: int, width: int) -> torch.Tensor:
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
