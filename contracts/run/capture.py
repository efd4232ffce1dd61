"""Capture: run a transformers MoE model on some text and record every MoE layer's routing, through forward hooks.

What is recorded, per MoE layer (in the model's module order) and per
token: the router logits ``[layers, tokens, E]``, the model's own chosen
expert ids and weights ``[layers, tokens, k]``, and, where the router has one,
its correction bias ``[layers, E]`` (DeepSeek-V3's ``e_score_correction_bias``).
The layer names (module paths) and the contract the model's routing
follows go into the file's metadata. The output is a ``.safetensors`` file
that ``check --logits`` reads as cases and ``trace-diff`` reads as a trace.

The routers are found the way transformers itself records router logits:
each MoE model class names its router module class in
``_can_record_outputs["router_logits"]`` (transformers >= 5, whose routers
return ``(logits, weights, ids)``); a forward hook on every instance keeps
those three outputs. Nothing is downloaded: ``--model`` is a local
checkpoint directory (config.json and weights), a directory with only a
config.json, or a config.json file; without weights the model is built with
random weights from ``--seed``.

The text: a file of whitespace-separated integers is taken as token ids;
otherwise it is tokenized by the tokenizer in the model directory when
there is one, else by a byte-level fallback (each UTF-8 byte is a token id,
modulo the vocabulary size): enough to drive the router with varied inputs,
not to reproduce a real tokenization.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch

__all__ = ["CONTRACT_OF_MODEL_TYPE", "CaptureError", "Captured", "capture", "load_model", "read_tokens"]

# The contract a model's own routing code follows (transformers' modeling files), by config.model_type.
CONTRACT_OF_MODEL_TYPE = {
    "deepseek_v3": "deepseek-v3-reference",  # the model code masks dropped groups with 0.0
    "qwen3_moe": "qwen3-moe",
    "mixtral": "mixtral",
    "gpt_oss": "gpt-oss",
}


class CaptureError(ValueError):
    """A model, text or output that cannot be used; the message names it and the fix."""


def _has_weights(folder: Path) -> bool:
    return any(folder.glob("*.safetensors")) or any(folder.glob("*.bin")) or any(folder.glob("*.safetensors.index.json"))


def load_model(model: str | Path, *, seed: int = 0, dtype: torch.dtype | None = None):
    """``(model, tokenizer or None, how it was loaded)`` from a local checkpoint or a config (random weights)."""
    try:
        import transformers
    except ImportError:
        raise CaptureError("capture needs transformers: pip install 'router-contracts[models]'") from None
    path = Path(model)
    config_file = path / "config.json" if path.is_dir() else path
    if not config_file.is_file():
        raise CaptureError(f"--model {model}: no config.json there; give a checkpoint directory or a config.json file")
    try:
        config = transformers.AutoConfig.from_pretrained(str(config_file.parent if path.is_dir() else config_file), local_files_only=True)
    except Exception as exc:  # noqa: BLE001 -- any unreadable config is one line
        raise CaptureError(f"--model {model}: transformers could not read the config ({type(exc).__name__}: {str(exc).splitlines()[0][:200]})") from None
    tokenizer = None
    if path.is_dir() and _has_weights(path):
        loaded = transformers.AutoModelForCausalLM.from_pretrained(str(path), local_files_only=True, dtype=dtype or "auto")
        how = f"checkpoint {path}"
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception:  # noqa: BLE001 -- no tokenizer in the folder: the byte-level fallback
            tokenizer = None
    else:
        torch.manual_seed(seed)
        loaded = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype or torch.float32)
        how = f"random weights (seed {seed}) from {config_file}"
    return loaded.eval(), tokenizer, how


def read_tokens(text_file: str | Path, tokenizer, vocab_size: int) -> tuple[torch.Tensor, str]:
    """The token ids of ``text_file`` and how they were made (ids, the tokenizer, or bytes)."""
    path = Path(text_file)
    if not path.is_file():
        raise CaptureError(f"--text {text_file}: no such file; give a text file, or a file of whitespace-separated token ids")
    text = path.read_text(encoding="utf-8", errors="replace")
    words = text.split()
    if words and all(w.isdigit() for w in words):
        ids = torch.tensor([int(w) for w in words], dtype=torch.long)
        if int(ids.max()) >= vocab_size:
            raise CaptureError(f"--text {text_file}: token id {int(ids.max())} is outside the model's vocabulary of {vocab_size}")
        return ids, "token ids"
    if not text:
        raise CaptureError(f"--text {text_file} is empty; give some text")
    if tokenizer is not None:
        return torch.tensor(tokenizer(text)["input_ids"], dtype=torch.long), "the model's tokenizer"
    return torch.tensor(list(text.encode("utf-8")), dtype=torch.long) % vocab_size, "UTF-8 bytes (no tokenizer in --model)"


def _router_classes(model) -> tuple[type, ...]:
    recorders = getattr(model, "_can_record_outputs", None) or {}
    for sub in model.modules():  # the base model (model.model) carries the table in transformers 5
        recorders = recorders or (getattr(sub, "_can_record_outputs", None) or {})
    spec = recorders.get("router_logits")
    specs = spec if isinstance(spec, (list, tuple)) else [spec]
    classes = tuple(getattr(s, "target_class", s) for s in specs if s is not None)
    return tuple(c for c in classes if isinstance(c, type))


@dataclass
class Captured:
    """What a capture recorded, per layer, before it is written."""

    layer_names: list[str]
    logits: list[list[torch.Tensor]] = field(default_factory=list)
    weights: list[list[torch.Tensor]] = field(default_factory=list)
    ids: list[list[torch.Tensor]] = field(default_factory=list)
    bias: list[torch.Tensor | None] = field(default_factory=list)

    def tensors(self) -> dict[str, torch.Tensor]:
        out = {
            "logits": torch.stack([torch.cat(x) for x in self.logits]),
            "weights": torch.stack([torch.cat(x) for x in self.weights]).float(),
            "ids": torch.stack([torch.cat(x) for x in self.ids]).to(torch.int32),
        }
        if any(b is not None for b in self.bias):
            experts = out["logits"].shape[-1]
            out["bias"] = torch.stack([b if b is not None else torch.zeros(experts) for b in self.bias]).float()
        return {k: v.contiguous() for k, v in out.items()}


def capture(model, tokens: torch.Tensor, *, seq_len: int = 512, progress: bool = True) -> Captured:
    """Run ``model`` on ``tokens`` in sequences of ``seq_len`` and record every router's outputs (see the module docstring)."""
    from tqdm.auto import tqdm

    classes = _router_classes(model)
    routers = [(name, m) for name, m in model.named_modules() if classes and isinstance(m, classes)]
    if not routers:
        raise CaptureError(f"{type(model).__name__}: no MoE router module found (transformers >= 5 MoE models name theirs in _can_record_outputs)")
    rec = Captured([name for name, _ in routers])
    rec.logits, rec.weights, rec.ids = ([[] for _ in routers] for _ in range(3))
    rec.bias = [getattr(m, "e_score_correction_bias", None) for _, m in routers]
    rec.bias = [b.detach().float().cpu().clone() if isinstance(b, torch.Tensor) else None for b in rec.bias]

    def hook(index):
        def keep(_module, _inputs, output):
            if not (isinstance(output, tuple) and len(output) >= 3):
                raise CaptureError(f"router {rec.layer_names[index]} returned {type(output).__name__}; expected (logits, weights, ids)")
            logits, weights, ids = output[:3]
            rec.logits[index].append(logits.detach().reshape(-1, logits.shape[-1]).cpu())
            rec.weights[index].append(weights.detach().reshape(-1, weights.shape[-1]).float().cpu())
            rec.ids[index].append(ids.detach().reshape(-1, ids.shape[-1]).cpu())

        return keep

    handles = [m.register_forward_hook(hook(i)) for i, (_, m) in enumerate(routers)]
    try:
        with torch.no_grad():
            for start in tqdm(range(0, tokens.numel(), seq_len), desc="capture", unit="seq", disable=not progress):
                model(input_ids=tokens[start : start + seq_len].unsqueeze(0), use_cache=False)
    finally:
        for h in handles:
            h.remove()
    return rec


def write_capture(rec: Captured, out: str | Path, *, model_type: str, how: str, tokens_from: str) -> Path:
    """The capture as one ``.safetensors`` file: logits, ids, weights (and bias), with the layer names in its metadata."""
    from safetensors.torch import save_file

    out = Path(out)
    if out.suffix.lower() != ".safetensors":
        raise CaptureError(f"--out {out}: the capture is written as .safetensors; give a path ending in .safetensors")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"layer_names": json.dumps(rec.layer_names), "model_type": model_type, "model": how, "tokens_from": tokens_from,
            "contract": CONTRACT_OF_MODEL_TYPE.get(model_type, "")}  # fmt: skip
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
