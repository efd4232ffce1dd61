"""``python -m contracts capture``: record a transformers MoE model's router logits, chosen ids and weights per layer.

Examples::

    python -m contracts capture --model /models/DeepSeek-V3 --text prompts.txt --out logits.safetensors
    python -m contracts capture --model tiny/config.json --text ids.txt --out tiny.safetensors --seed 0
    python -m contracts check --candidate radix4 --contract deepseek-v3 --logits logits.safetensors

--model is a local checkpoint directory, a directory with only a
config.json, or a config.json file (then the weights are random, from
--seed); nothing is downloaded. --text is a text file (tokenized by the
checkpoint's tokenizer, else byte by byte) or a file of whitespace-separated
token ids. The output (.safetensors) holds logits [layers, tokens, E], ids
and weights [layers, tokens, k], bias [layers, E] where the router has one,
and the layer names: check --logits reads it as cases, trace-diff as a trace
(docs/real-traffic.md).

The contract printed is the one the model's routing follows, read from its
router class and the values its config gives the router (group shape, the
mask in the installed router's source, routed_scaling_factor,
norm_topk_prob, scoring, correction bias; the file's metadata keeps them
under "routing"): a built-in contract whose routing fields are exactly
these, else a contract file written beside --out (FILE.contract.toml, for
--contract). The first 2,048 rows of each layer are routed through the
oracle under it and compared with the model's own choices.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ._common import ExitCode, UsageError, make_parser, positive_int, run_main

from ._common import seed_int  # noqa: E402

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts capture"
_DTYPES = ("float32", "bfloat16", "float16")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 2)[-1])
    ap.add_argument("--model", required=True, metavar="DIR|CONFIG.json", help="a local checkpoint directory or a config.json (random weights)")
    ap.add_argument("--text", required=True, type=Path, metavar="FILE", help="text, or whitespace-separated token ids")
    ap.add_argument("--out", required=True, type=Path, metavar="FILE.safetensors", help="where to write the capture")
    ap.add_argument("--seq-len", type=positive_int("--seq-len 512"), default=512, help="tokens per forward pass (default 512)")
    ap.add_argument("--seed", type=seed_int(), default=0, help="seed of the random weights when --model has none (default 0)")
    ap.add_argument("--dtype", choices=_DTYPES, help="model dtype (default: the checkpoint's; float32 for random weights)")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _contract_file(out: Path) -> Path:
    """Where a capture writes the contract its model follows when no built-in has its fields: beside --out."""
    return out.with_name(out.name[: -len(out.suffix)] + ".contract.toml")


def run(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.force:
        raise UsageError(f"--out {args.out} exists; pass --force to replace it, or choose another path")
    if args.out.suffix.lower() != ".safetensors":
        raise UsageError(f"--out {args.out}: the capture is written as .safetensors; give a path ending in .safetensors")
    toml_path = _contract_file(args.out)
    import torch

    from ..run.capture import CaptureError, capture, load_model, read_tokens
    from ..run.capture_contract import contract_for, contract_toml, routing_facts, verify_capture
    from ..run.capture_file import write_capture

    try:
        model, tokenizer, how = load_model(args.model, seed=args.seed, dtype=getattr(torch, args.dtype) if args.dtype else None)
        text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        tokens, tokens_from = read_tokens(args.text, tokenizer, text_config.vocab_size)
        rec = capture(model, tokens, seq_len=args.seq_len, progress=not args.quiet)
        facts = routing_facts(model, rec)
        contract, builtin, why_not = contract_for(facts)
        label, text = "", ""
        if contract is not None and builtin:
            label = contract.name
        elif contract is not None:
            if toml_path.exists() and not args.force:
                raise UsageError(f"--out {args.out}: {toml_path} exists (the contract file a capture writes beside it); pass --force "
                                 "to replace it, or choose another --out")  # fmt: skip
            text = contract_toml(contract, facts, name=re.sub(r"\s+", "_", f"captured-{args.out.stem}"), where=f"{how}")
            label = str(toml_path)
            import oracle

            try:
                contract = oracle.contract_from_mapping(_toml_loads(text), where=label, default_name=args.out.stem)
            except ValueError as exc:  # ContractError: the values make no valid contract; said, not raised
                contract, label, text, why_not = None, "", "", str(exc)
        agreement = verify_capture(rec, contract) if contract is not None else None
        if text:
            toml_path.parent.mkdir(parents=True, exist_ok=True)
            toml_path.write_text(text, encoding="utf-8")
        out = write_capture(rec, args.out, model_type=model.config.model_type, how=how, tokens_from=tokens_from, facts=facts,
                            contract=label, contract_text=text)  # fmt: skip
    except CaptureError as exc:
        raise UsageError(str(exc)) from None
    print(f"model: {how}; tokens: {tokens.numel():,} from {tokens_from}; {len(rec.layer_names)} MoE layers ({rec.layer_names[0]} .. {rec.layer_names[-1]})")
    print(f"routing: {facts.line()}")
    print(f"capture: {out}")
    if contract is None:
        print(f"contract: none known ({why_not}); write one (docs/contracts_as_data.md) and pass it with --contract FILE.toml")
        return ExitCode.OK
    if builtin:
        same = "" if contract.name in (facts.family, *_related(facts)) else f" (its routing fields are this model's; the {facts.family} router class)"
        print(f"contract: {label}{same}")
    else:
        print(f"contract: {label} (no built-in has these fields: {contract.name}, on top of {facts.family})")
    for warning in facts.warnings:
        print(f"warning: {warning}")
    if agreement.disagree:
        print(f"warning: {agreement.line(label)}; torch.topk breaks exact ties its own way, a checkpoint's dtype casts, and a "
              f"routing fact the capture does not read shows here: check the model's router class on these logits before "
              f"trusting this label: python -m contracts check --candidate hf-{facts.family} --contract {label} --logits {out}")  # fmt: skip
    else:
        print(agreement.line(label))
    print(f"check it: python -m contracts check --candidate oracle --contract {label} --logits {out}")
    return ExitCode.OK


def _related(facts) -> tuple[str, ...]:
    from ..run.capture_contract import RELATED_CONTRACTS

    return RELATED_CONTRACTS.get(facts.router_class, ())


def _toml_loads(text: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    return tomllib.loads(text)


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda: build_parser(prog), run, argv)
