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
those three outputs (``READERS`` and ``LOGITS_FROM`` read the two routers that
return something else: Llama 4's and Gemma 4's). Nothing is downloaded: ``--model`` is a local
checkpoint directory (config.json and weights), a directory with only a
config.json, or a config.json file; without weights the model is built with
random weights from ``--seed``.

The text: a file of whitespace-separated integers is taken as token ids;
otherwise it is tokenized by the tokenizer in the model directory when
there is one, else by a byte-level fallback (each UTF-8 byte is a token id,
modulo the vocabulary size): enough to drive the router with varied inputs,
not to reproduce a real tokenization.

The contract the model's routing follows is ``contracts.run.capture_contract``'s to read; the file is written
by ``contracts.run.capture_file``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

__all__ = ["LOGITS_FROM", "READERS", "ROUTED_BY_PARENT", "CaptureError", "Captured", "capture", "load_model", "read_tokens"]


class CaptureError(ValueError):
    """A model, text or output that cannot be used; the message names it and the fix."""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else "no message")[:200]


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
    # the causal-LM class, else the base model (Mistral 4 has a causal-LM class that AutoModelForCausalLM does not map):
    # the routers run either way
    auto = transformers.AutoModelForCausalLM if type(config) in transformers.AutoModelForCausalLM._model_mapping else transformers.AutoModel
    if path.is_dir() and _has_weights(path):
        try:
            loaded = auto.from_pretrained(str(path), local_files_only=True, dtype=dtype or "auto")
        except Exception as exc:  # noqa: BLE001 -- an unloadable checkpoint is one line
            raise CaptureError(f"--model {model}: transformers could not load the checkpoint ({type(exc).__name__}: {_first_line(exc)})") from None
        how = f"checkpoint {path}"
        try:
            tokenizer = transformers.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        except Exception:  # noqa: BLE001 -- no tokenizer in the folder: the byte-level fallback
            tokenizer = None
    else:
        torch.manual_seed(seed)
        try:
            loaded = auto.from_config(config, dtype=dtype or torch.float32)
        except Exception as exc:  # noqa: BLE001 -- a config transformers cannot build a model from is one line
            raise CaptureError(f"--model {model}: transformers could not build {type(config).__name__}'s model "
                               f"({type(exc).__name__}: {_first_line(exc)})") from None  # fmt: skip
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


def _three(module, output):
    """``(logits, weights, ids)`` of a transformers 5 router (its forward returns the three)."""
    if not (isinstance(output, tuple) and len(output) >= 3):
        raise CaptureError(f"router {type(module).__name__} returned {type(output).__name__}; expected (logits, weights, ids)")
    return output[:3]


def _llama4(module, output):
    """Llama4Router returns ``(scores [M, E], logits)``: the scores are sigmoid of the logit at the
    ``torch.topk(logits, top_k, dim=1)`` experts and ``sigmoid(-inf) = 0`` elsewhere. Its ids are that topk
    call's, made again on the same tensor (the router keeps none); its weights the scores there."""
    scores, logits = output
    ids = torch.topk(logits, module.top_k, dim=1).indices
    return logits, scores.gather(1, ids), ids


# router class name -> how its output reads as (logits, weights, ids); any other class returns the three itself
READERS = {"Llama4Router": _llama4}
# router class name -> the submodule whose output is the logits, where the router returns something else first
# (Gemma4TextRouter returns the softmax probabilities; its ``proj`` computes the logits)
LOGITS_FROM = {"Gemma4TextRouter": "proj"}
# router class name -> the method of its parent module that turns its logits into (weights, ids), where the router
# returns the logits only (DBRX: DbrxFFN.route_tokens_to_experts); the parent's attributes then decide the routing
ROUTED_BY_PARENT = {"DbrxRouter": "route_tokens_to_experts"}


def _logits_only(module, output):
    if not isinstance(output, torch.Tensor):
        raise CaptureError(f"router {type(module).__name__} returned {type(output).__name__}; expected the logits")
    return output, None, None


READERS.update({name: _logits_only for name in ROUTED_BY_PARENT})


def _bias_of(module) -> torch.Tensor | None:
    """The router's correction bias where it keeps one: its own buffer, or its ``moe_statics`` (ERNIE 4.5)."""
    for holder in (module, getattr(module, "moe_statics", None)):
        b = getattr(holder, "e_score_correction_bias", None)
        if isinstance(b, torch.Tensor):
            return b.detach().float().cpu().reshape(-1).clone()
    return None


def _bias_argument(module) -> int | None:
    """The position of a ``e_score_correction_bias`` argument of the router's forward (MiniMax-M2's router is passed
    its MoE block's bias), or None."""
    try:
        names = list(inspect.signature(module.forward).parameters)
    except (TypeError, ValueError):
        return None
    return names.index("e_score_correction_bias") if "e_score_correction_bias" in names else None


@dataclass
class Captured:
    """What a capture recorded, per layer, before it is written."""

    layer_names: list[str]
    logits: list[list[torch.Tensor]] = field(default_factory=list)
    weights: list[list[torch.Tensor]] = field(default_factory=list)
    ids: list[list[torch.Tensor]] = field(default_factory=list)
    bias: list[torch.Tensor | None] = field(default_factory=list)
    routers: list = field(default_factory=list, repr=False)  # the router modules, in layer order (routing_facts reads the first)

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
    parents = {i: model.get_submodule(name.rsplit(".", 1)[0] if "." in name else "")
               for i, (name, m) in enumerate(routers) if type(m).__name__ in ROUTED_BY_PARENT}  # fmt: skip
    rec = Captured([name for name, _ in routers], routers=[parents.get(i, m) for i, (_, m) in enumerate(routers)])
    rec.logits, rec.weights, rec.ids = ([[] for _ in routers] for _ in range(3))
    rec.bias = [_bias_of(m) for _, m in routers]
    detach = _attach(rec, routers, parents)
    try:
        with torch.no_grad():
            for start in tqdm(range(0, tokens.numel(), seq_len), desc="capture", unit="seq", disable=not progress):
                model(input_ids=tokens[start : start + seq_len].unsqueeze(0), use_cache=False)
    except CaptureError:
        raise
    except Exception as exc:  # noqa: BLE001 -- the model's own forward failing (its config's shapes, memory) is one line
        raise CaptureError(f"{type(model).__name__}: the model's forward pass raised {type(exc).__name__}: {_first_line(exc)}; "
                           "check the config (--model) and --seq-len") from None  # fmt: skip
    finally:
        detach()
    if any(len(w) != len(x) for w, x in zip(rec.weights, rec.logits)):
        raise CaptureError(f"{type(model).__name__}: a router's logits and its choice were not recorded call for call; capture cannot read this model")
    return rec


def _attach(rec: Captured, routers: list, parents: dict) -> Callable[[], None]:
    """Hook every router (and, where its routing is elsewhere, its parent's routing method or its logits submodule) so
    that each forward appends to ``rec``; the function that takes every hook off again. A router that cannot be hooked
    raises ``CaptureError`` here, before the model runs."""
    inner: dict[int, torch.Tensor] = {}  # router index -> the logits its LOGITS_FROM submodule computed in this call

    def inner_hook(index):
        def keep(_module, _inputs, output):
            inner[index] = output

        return keep

    def hook(index):
        read = READERS.get(type(routers[index][1]).__name__, _three)
        bias_at = _bias_argument(routers[index][1]) if rec.bias[index] is None else None

        def keep(module, args, kwargs, output):
            try:
                logits, weights, ids = read(module, output)
            except (TypeError, ValueError) as exc:
                raise CaptureError(f"router {rec.layer_names[index]} ({type(module).__name__}): its output does not read as "
                                   f"(logits, weights, ids): {exc}") from None  # fmt: skip
            if type(module).__name__ in LOGITS_FROM:
                logits = inner.pop(index)
            rec.logits[index].append(logits.detach().reshape(-1, logits.shape[-1]).cpu())
            if weights is not None:  # else the parent's routing method records them (ROUTED_BY_PARENT)
                rec.weights[index].append(weights.detach().reshape(-1, weights.shape[-1]).float().cpu())
                rec.ids[index].append(ids.detach().reshape(-1, ids.shape[-1]).cpu())
            if bias_at is not None and rec.bias[index] is None:
                b = kwargs.get("e_score_correction_bias", args[bias_at] if len(args) > bias_at else None)
                if isinstance(b, torch.Tensor):
                    rec.bias[index] = b.detach().float().cpu().reshape(-1).clone()

        return keep

    def routed(index, method):
        def wrapped(logits, *args, **kwargs):
            weights, ids = method(logits, *args, **kwargs)
            rec.weights[index].append(weights.detach().reshape(-1, weights.shape[-1]).float().cpu())
            rec.ids[index].append(ids.detach().reshape(-1, ids.shape[-1]).cpu())
            return weights, ids

        return wrapped

    handles = [m.register_forward_hook(hook(i), with_kwargs=True) for i, (_, m) in enumerate(routers)]
    wrapped_methods = []
    for i, parent in parents.items():
        method = ROUTED_BY_PARENT[type(routers[i][1]).__name__]
        if not callable(getattr(parent, method, None)) or method in vars(parent):
            raise CaptureError(f"router {routers[i][0]}: its parent {type(parent).__name__} has no {method} method to record the routing of")
        setattr(parent, method, routed(i, getattr(parent, method)))  # an instance attribute over the class's method, removed below
        wrapped_methods.append((parent, method))
    for i, (name, m) in enumerate(routers):
        sub = LOGITS_FROM.get(type(m).__name__)
        if sub is not None:
            if not isinstance(getattr(m, sub, None), torch.nn.Module):
                raise CaptureError(f"router {name} ({type(m).__name__}) has no {sub} submodule to read its logits from")
            handles.append(getattr(m, sub).register_forward_hook(inner_hook(i)))

    def detach() -> None:
        for h in handles:
            h.remove()
        for parent, method in wrapped_methods:
            delattr(parent, method)

    return detach

