"""Inputs of issue 55's data classes (ids read two ways, data mixed, tracebacks): traces, logits files and a router
that rewrites its own input file, each right wherever the old harness looked.

- ``trace(...)``: a routing trace the oracle wrote (ids, weights, logits), to be tampered with by a test;
- ``short_range_safetensors(...)``: a safetensors file whose logits' byte range is shorter than their shape (the
  safetensors library refuses it; a hand parser read past the tensor into the next one);
- ``rewrites_the_logits_file``: a correct router (the oracle's answer) that, on its first call, rewrites the captured
  logits file named by ``$REWRITE_LOGITS`` in place (same size, other rows), as a capture job writing the same path
  during a check would.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import torch

import oracle

QWEN = "qwen3-moe"


def route(logits: torch.Tensor, contract: str = QWEN, topk: int = 4, bias=None):
    """The oracle's (weights, ids) of ``logits`` under ``contract``."""
    c = oracle.get_contract(contract)
    return oracle.route(logits, bias, topk, renormalize=c.default_renormalize, routed_scaling_factor=c.routed_scaling_factor, contract=c)


def trace(layers: int = 0, tokens: int = 24, experts: int = 16, topk: int = 4, seed: int = 0) -> dict:
    """{"ids", "weights", "logits"} of the oracle's routing under qwen3-moe, with a layers dimension when ``layers``."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(max(layers, 1), tokens, experts, generator=g)
    ws, ids = zip(*(route(logits[i], topk=topk) for i in range(max(layers, 1))))
    out = {"ids": torch.stack(ids).long(), "weights": torch.stack(ws).float(), "logits": logits}
    return out if layers else {k: v[0] for k, v in out.items()}


def save(path: Path, tensors: dict, layer_names: list[str] | None = None) -> Path:
    """``tensors`` as a .safetensors file (with ``layer_names`` metadata) or a .pt dict, by the suffix."""
    path = Path(path)
    if path.suffix == ".pt":
        torch.save({**tensors, **({"layer_names": json.dumps(layer_names)} if layer_names else {})}, path)
        return path
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in tensors.items()}, str(path), metadata={"layer_names": json.dumps(layer_names)} if layer_names else None)
    return path


def short_range_safetensors(path: Path, tokens: int = 8, experts: int = 16) -> Path:
    """A safetensors file whose ``logits`` claim ``[tokens, experts]`` fp32 but whose byte range holds half of that; the
    other half is the next tensor (``pad``, all 1e30: a reader that runs past the range reads it as logits)."""
    half = tokens * experts * 4 // 2
    logits = torch.randn(tokens * experts // 2).numpy().tobytes()
    pad = torch.full((tokens * experts // 2,), 1e30).numpy().tobytes()
    header = {"logits": {"dtype": "F32", "shape": [tokens, experts], "data_offsets": [0, half]},
              "pad": {"dtype": "F32", "shape": [tokens * experts // 2], "data_offsets": [half, 2 * half]}}  # fmt: skip
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    Path(path).write_bytes(struct.pack("<Q", len(raw)) + raw + logits + pad)
    return Path(path)


_rewritten = []


def rewrites_the_logits_file(scores, bias, topk, renormalize, rsf):
    """The oracle's answer under aiter; on the first call, the file at ``$REWRITE_LOGITS`` is rewritten in place: the same
    size and header, every logit negated (another expert set on every row), its mtime put back."""
    path = os.environ.get("REWRITE_LOGITS")
    if path and not _rewritten:
        _rewritten.append(path)
        from safetensors.torch import load_file, save_file

        st = os.stat(path)
        tensors = load_file(path)
        tensors["logits"] = -tensors["logits"]
        tmp = Path(path).with_suffix(".tmp")
        save_file(tensors, str(tmp))
        with open(path, "r+b") as f:  # in place: a process that opened the file sees the new bytes
            f.write(tmp.read_bytes())
        tmp.unlink()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    return oracle.route(scores, bias, topk, renormalize=renormalize, routed_scaling_factor=rsf, contract="aiter")
