"""Capture: run a transformers MoE model on some text and record every MoE layer's routing, through forward hooks.

What is recorded, per MoE layer (in the model's module order) and per
token: the router logits ``[layers, tokens, E]``, the model's own chosen
expert ids and weights ``[layers, tokens, k]``, and, where the router has one,
its correction bias ``[layers, E]`` (DeepSeek-V3's ``e_score_correction_bias``).
The layer names (module paths) and the contract the model's routing
follows go into the file's metadata. The output is a ``.safetensors`` file
that ``check --logits`` reads as cases and ``trace-diff`` reads as a trace.

The contract is read, never looked up by model type: ``routing_facts``
takes what decides the routing from the router class and the values the
config gave it (group shape, the group mask as the installed router's
source writes it, routed_scaling_factor, norm_topk_prob, scoring, bias);
``contract_for`` names the built-in whose routing fields are exactly these,
or makes a contract of them on top of the router family's built-in;
``verify_capture`` routes the first rows of each layer through the oracle
under it against the model's own choice.

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
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

__all__ = ["CaptureError", "Captured", "RoutingFacts", "capture", "contract_for", "load_model", "read_tokens", "routing_facts",
           "verify_capture", "write_capture"]

# Which built-in contracts a router class's routing is also written as (beyond its kernels.models family): a capture
# prefers these when their fields are the model's. DeepSeek-V3's router class is Kimi-K2's (kernels.models' family).
RELATED_CONTRACTS = {"DeepseekV3TopkRouter": ("deepseek-v3", "kimi-k2")}
# The names config.scoring_func takes (DeepSeek-V4's router reads it) -> the contract's scoring.
SCORING_FUNCS = {"sqrtsoftplus": "sqrt_softplus", "sigmoid": "sigmoid", "softmax": "softmax"}
# How a grouped router masks the experts of the groups it drops, as its installed source writes it.
_MASK = re.compile(r"masked_fill\(\s*~\s*score_mask\.bool\(\)\s*,\s*(float\(\s*[\"']-inf[\"']\s*\)|-?0\.0|0)\s*\)")
# Rows per layer the capture routes through the oracle under the contract it names, against the model's own routing.
VERIFY_ROWS = 2048
# Fields that decide nothing about routing or that the file sets (E and k are the capture's; names and text differ).
_NOT_ROUTING = ("name", "summary", "source", "experts", "topk", "zero_experts")
_GROUP_FIELDS = ("group_score", "group_mask", "group_tie_rule")


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


# ---------------------------------------------------------------- the contract the model's routing follows


@dataclass(frozen=True)
class RoutingFacts:
    """What decides a captured model's routing, read from its router class and the values its config gave the router.

    ``family``: the ``kernels.models`` family whose router class this is (its built-in contract is the base);
    None when the class is none of theirs. ``group_mask``: as the installed router's source writes it ("-inf",
    "0.0"), None for an ungrouped router. ``routed_scaling_factor`` / ``norm_topk_prob``: None where the router
    reads no such value (its code fixes it: no factor, always or never renormalized).
    """

    router_class: str
    model_type: str
    family: str | None
    experts: int
    topk: int
    scoring: str | None
    bias: bool
    n_group: int
    topk_group: int
    group_mask: str | None
    routed_scaling_factor: float | None
    norm_topk_prob: bool | None
    renorm_p: float | None = None  # DBRX: the p of its L_p renormalization (moe_normalize_expert_weights)
    notes: tuple[str, ...] = ()  # facts that could not be read: no contract is named
    warnings: tuple[str, ...] = ()  # facts a capture leaves out (a contract is named; the line says what its checks miss)

    def as_json(self) -> str:
        from dataclasses import asdict

        return json.dumps(asdict(self))

    def line(self) -> str:
        groups = f"{self.n_group} / {self.topk_group} groups, mask {self.group_mask}" if self.n_group > 1 else "ungrouped"
        rsf = "no rsf" if self.routed_scaling_factor is None else f"rsf {self.routed_scaling_factor:g}"
        norm = "" if self.norm_topk_prob is None else f", norm_topk_prob {str(self.norm_topk_prob).lower()}"
        if self.renorm_p is not None:
            norm = f", divided by the L{self.renorm_p:g} norm"
        return f"{self.router_class}: {self.scoring or '?'}{' + bias' if self.bias else ''}, {groups}, {rsf}{norm}"


def _family_of(router_class: str) -> str | None:
    from kernels.models import ROUTERS

    return next((f for f, r in ROUTERS.items() if r.cls == router_class), None)


def _mask_in_source(cls) -> str | None:
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return None
    found = {"-inf" if "inf" in m else "0.0" for m in _MASK.findall(source)}
    return found.pop() if len(found) == 1 else None


def routing_facts(model, rec: Captured) -> RoutingFacts:
    """The routing facts of ``model``'s routers (the first router's; a model has one router class)."""
    import oracle

    router = rec.routers[0]
    cls = type(router).__name__
    config = model.config
    experts, topk = rec.logits[0][0].shape[-1], rec.ids[0][0].shape[-1]
    notes = []
    classes = sorted({type(m).__name__ for m in rec.routers})
    if len(classes) > 1:
        notes.append(f"the model's routers are of {len(classes)} classes ({', '.join(classes)}); one contract cannot name them all")
    for attr in ("num_group", "n_group", "topk_group", "routed_scaling_factor", "norm_topk_prob", "top_k", "topk_method",
                 "moe_normalize_expert_weights"):
        values = {repr(getattr(m, attr, None)) for m in rec.routers}
        if len(values) > 1:
            notes.append(f"the routers' {attr} differs between layers ({', '.join(sorted(values))}); one contract cannot name them all")
    if len({x[0].shape[-1] for x in rec.logits}) > 1 or len({x[0].shape[-1] for x in rec.ids}) > 1:
        notes.append("the layers have different numbers of experts or k; one contract cannot name them all")
    family = _family_of(cls)
    base = oracle.BUILTIN_CONTRACTS[family] if family else None
    scoring = base.scoring if base else None
    func = getattr(config, "scoring_func", None) if hasattr(router, "score_fn") else None
    if func is not None:
        scoring = SCORING_FUNCS.get(str(func))
        if scoring is None:
            notes.append(f"config.scoring_func={func!r} is no scoring a contract has")
    n_group = int(getattr(router, "num_group", None) or getattr(router, "n_group", None) or 1)
    topk_group = int(getattr(router, "topk_group", None) or 1)
    if getattr(router, "topk_method", "group_limited_greedy") != "group_limited_greedy":  # DeepSeek-V2's greedy: no groups
        n_group = topk_group = 1
    mask = _mask_in_source(type(router)) if n_group > 1 else None
    if n_group > 1 and mask is None:
        notes.append(f"the group mask of {cls} could not be read from its source")
    rsf = getattr(router, "routed_scaling_factor", None)
    norm = getattr(router, "norm_topk_prob", None)
    renorm_p = None
    if hasattr(router, "moe_normalize_expert_weights"):  # DBRX: None = no renormalization, p = divide by the L_p norm
        renorm_p = router.moe_normalize_expert_weights
        norm = renorm_p is not None
    scales = [getattr(m, "per_expert_scale", None) for m in rec.routers]
    warnings = []
    if any(isinstance(x, torch.Tensor) and not bool((x == 1).all()) for x in scales):
        warnings.append("per_expert_scale is not all ones: the capture does not hold it, so checks on it use ones")
    return RoutingFacts(
        router_class=cls, model_type=str(getattr(config, "model_type", "")), family=family, experts=int(experts), topk=int(topk),
        scoring=scoring, bias=bool(base.has_bias) if base else any(b is not None for b in rec.bias), n_group=n_group,
        topk_group=topk_group, group_mask=mask, routed_scaling_factor=None if rsf is None else float(rsf),
        norm_topk_prob=None if norm is None else bool(norm), renorm_p=None if renorm_p is None else float(renorm_p), notes=tuple(notes),
        warnings=tuple(warnings),
    )  # fmt: skip


def _routing_key(c) -> dict:
    d = {k: v for k, v in c.as_dict().items() if k not in _NOT_ROUTING}
    if not c.is_grouped:
        for k in _GROUP_FIELDS:
            d.pop(k, None)
    return d


def contract_for(facts: RoutingFacts):
    """``(contract, builtin, why)``: the contract these facts describe, as a built-in when one's routing fields are
    exactly these (the router class's own first), else as a new contract (``builtin`` False) on top of the family's;
    ``(None, False, why not)`` when the router class is none the harness knows, a fact could not be read or no
    contract can hold the values."""
    import oracle

    if facts.notes:
        return None, False, "; ".join(facts.notes)
    if facts.family is None:
        return None, False, f"{facts.router_class} is no router class of kernels.models"
    base = oracle.BUILTIN_CONTRACTS[facts.family]
    changes = dict(scoring=facts.scoring, n_group=facts.n_group, topk_group=facts.topk_group, experts=facts.experts, topk=facts.topk)
    if base.zero_experts >= facts.experts:
        changes["zero_experts"] = 0
    if facts.n_group > 1:
        changes["group_mask"] = -float("inf") if facts.group_mask == "-inf" else 0.0
    if facts.routed_scaling_factor is not None:
        changes["routed_scaling_factor"] = facts.routed_scaling_factor
    if facts.norm_topk_prob is not None:
        changes["default_renormalize"] = facts.norm_topk_prob
    if facts.renorm_p is not None:
        changes["renorm_p"] = facts.renorm_p
    try:
        derived = base.replace(**changes)
    except ValueError as exc:  # a value no contract can hold (oracle's one line names it): no contract, said so
        return None, False, str(exc)
    key = _routing_key(derived)
    preferred = (facts.family, *RELATED_CONTRACTS.get(facts.router_class, ()))
    for name in (*preferred, *(n for n in oracle.BUILTIN_CONTRACTS if n not in preferred)):
        if _routing_key(oracle.BUILTIN_CONTRACTS[name]) == key:
            return oracle.BUILTIN_CONTRACTS[name], True, ""
    return derived, False, ""


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return ("-inf" if v < 0 else "inf") if v in (float("inf"), -float("inf")) else repr(v)
    return json.dumps(v)


def contract_toml(contract, facts: RoutingFacts, *, name: str, where: str) -> str:
    """A contract file (docs/contracts_as_data.md) for ``contract``: its base built-in and the fields that differ."""
    import oracle

    base = oracle.BUILTIN_CONTRACTS[facts.family]
    lines = [f"# The routing of {where}, as `python -m contracts capture` read it from the model's router and config:",
             f"# {facts.line()}. No built-in contract has these fields; pass this file with --contract.",
             f"base = {json.dumps(base.name)}", f"name = {json.dumps(name)}",
             f"summary = {json.dumps(f'{base.name} with the captured model config values: {facts.line()}')}"]  # fmt: skip
    mine, theirs = contract.as_dict(), base.as_dict()
    lines += [f"{k} = {_toml_value(v)}" for k, v in mine.items() if k not in ("name", "summary", "source") and v != theirs[k]]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Agreement:
    """The model's own routing against a contract's on the first ``VERIFY_ROWS`` rows of each layer."""

    rows: int
    disagree: int  # rows whose ids or weights differ
    ids: int = 0  # ... of them, rows whose expert sets differ
    cast: int = 0  # ... rows with the same ids whose weights are the contract's rounded to the logits' dtype
    first: str | None = None  # "layer L token T" of the first row that disagrees

    def line(self, label: str) -> str:
        if not self.disagree:
            return f"the model's own routing follows {label} on all {self.rows:,} rows checked (the first {VERIFY_ROWS:,} of each layer)"
        other = self.disagree - self.ids - self.cast
        parts = [f"other experts on {self.ids:,}" if self.ids else "", f"weights other than a cast on {other:,}" if other else "",
                 f"weights that are the contract's cast to the logits' dtype on {self.cast:,}" if self.cast else ""]  # fmt: skip
        return (f"the model's own routing differs from {label} on {self.disagree:,} of {self.rows:,} rows checked (first: {self.first}): "
                + ", ".join(p for p in parts if p))  # fmt: skip


def verify_capture(rec: Captured, contract, *, rows: int = VERIFY_ROWS) -> Agreement:
    """Route the captured logits (and bias) of the first ``rows`` tokens of each layer through the oracle under
    ``contract`` and compare with the model's own choice: ids as a set, weights by expert within the contract's
    tolerance (the routers rank with torch.topk, some unsorted)."""
    import oracle

    def head(chunks: list[torch.Tensor]) -> torch.Tensor:  # the first ``rows`` rows, without joining the whole layer
        taken, n = [], 0
        for c in chunks:
            if n >= rows:
                break
            taken.append(c[: rows - n])
            n += taken[-1].shape[0]
        return torch.cat(taken)

    checked = disagree = wrong_ids = cast = 0
    first = None
    groups = dict(num_expert_group=contract.n_group, topk_group=contract.topk_group) if contract.is_grouped else {}
    for layer in range(len(rec.layer_names)):
        logits, ids, weights = head(rec.logits[layer]), head(rec.ids[layer]).long(), head(rec.weights[layer]).float()
        bias = rec.bias[layer] if contract.has_bias else None
        if contract.has_bias and bias is None:
            bias = torch.zeros(logits.shape[-1])  # what check --logits routes a file without a bias with
        ew, eids = oracle.route(logits, bias, ids.shape[-1], renormalize=contract.default_renormalize,
                                routed_scaling_factor=contract.routed_scaling_factor, contract=contract, **groups)  # fmt: skip
        order, eorder = ids.sort(1), eids.long().sort(1)
        w, ew = weights.gather(1, order.indices), ew.gather(1, eorder.indices)
        same_ids = (order.values == eorder.values).all(1)
        same_w = torch.isclose(w, ew, rtol=contract.weight_rtol, atol=contract.weight_atol, equal_nan=True).all(1)
        cast_w = torch.isclose(w, ew.to(logits.dtype).float(), rtol=contract.weight_rtol, atol=contract.weight_atol, equal_nan=True).all(1)
        bad = (~(same_ids & same_w)).nonzero().flatten()
        if bad.numel() and first is None:
            first = f"layer {layer} token {int(bad[0])}"
        checked += logits.shape[0]
        disagree += bad.numel()
        wrong_ids += int((~same_ids).sum())
        cast += int((same_ids & ~same_w & cast_w).sum()) if logits.dtype != torch.float32 else 0
    return Agreement(checked, disagree, wrong_ids, cast, first)


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
