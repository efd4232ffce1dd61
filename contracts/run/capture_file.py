"""A capture, or an engine's own trace, written as one ``.safetensors`` file in the layout ``check --logits`` and
``trace-diff`` read (the layer names, the routing facts and the contract in its metadata)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from .capture import CaptureError, Captured
from .capture_contract import RoutingFacts

__all__ = ["save_trace", "write_capture"]


def write_capture(rec: Captured, out: str | Path, *, model_type: str, how: str, tokens_from: str, facts: RoutingFacts | None = None,
                  contract: str = "", contract_text: str = "") -> Path:  # fmt: skip
    """The capture as one ``.safetensors`` file: logits, ids, weights (and bias), with the layer names, the routing
    facts and the contract they name in its metadata (``contract``: a built-in's name or a contract file's path,
    ``contract_toml``: that file's text)."""
    from safetensors.torch import save_file

    out = Path(out)
    if out.suffix.lower() != ".safetensors":
        raise CaptureError(f"--out {out}: the capture is written as .safetensors; give a path ending in .safetensors")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"layer_names": json.dumps(rec.layer_names), "model_type": model_type, "model": how, "tokens_from": tokens_from,
            "contract": contract}  # fmt: skip
    if facts is not None:
        meta["routing"] = facts.as_json()
    if contract_text:
        meta["contract_toml"] = contract_text
    save_file(rec.tensors(), str(out), metadata=meta)
    return out


def save_trace(path: str | Path, *, logits: torch.Tensor | None = None, ids: torch.Tensor | None = None, weights: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, layer_names: list[str] | None = None, **metadata: str) -> Path:  # fmt: skip
    """Write tensors an engine's own hooks collected in the layout ``check --logits`` and ``trace-diff`` read.

    ``logits`` ``[tokens, E]`` or ``[layers, tokens, E]``; ``ids`` and ``weights``
    ``[tokens, k]`` or ``[layers, tokens, k]``; ``bias`` ``[E]`` or ``[layers, E]``;
    any may be left out (a check needs logits, a trace ids and weights).
    """
    from safetensors.torch import save_file

    tensors = {"logits": logits, "ids": None if ids is None else ids.to(torch.int32), "weights": None if weights is None else weights.float(),
               "bias": None if bias is None else bias.float()}  # fmt: skip
    meta = {k: str(v) for k, v in metadata.items()}
    if layer_names is not None:
        meta["layer_names"] = json.dumps(list(layer_names))
    path = Path(path)
    save_file({k: v.detach().cpu().contiguous() for k, v in tensors.items() if v is not None}, str(path), metadata=meta)
    return path
