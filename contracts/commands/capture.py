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
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import ExitCode, UsageError, make_parser, positive_int, run_main

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts capture"
_DTYPES = ("float32", "bfloat16", "float16")


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 2)[-1])
    ap.add_argument("--model", required=True, metavar="DIR|CONFIG.json", help="a local checkpoint directory or a config.json (random weights)")
    ap.add_argument("--text", required=True, type=Path, metavar="FILE", help="text, or whitespace-separated token ids")
    ap.add_argument("--out", required=True, type=Path, metavar="FILE.safetensors", help="where to write the capture")
    ap.add_argument("--seq-len", type=positive_int("--seq-len 512"), default=512, help="tokens per forward pass (default 512)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights when --model has none (default 0)")
    ap.add_argument("--dtype", choices=_DTYPES, help="model dtype (default: the checkpoint's; float32 for random weights)")
    ap.add_argument("--force", action="store_true", help="replace --out if it exists")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def run(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.force:
        raise UsageError(f"--out {args.out} exists; pass --force to replace it, or choose another path")
    if args.out.suffix.lower() != ".safetensors":
        raise UsageError(f"--out {args.out}: the capture is written as .safetensors; give a path ending in .safetensors")
    import torch

    from ..run.capture import CaptureError, capture, load_model, read_tokens, write_capture

    try:
        model, tokenizer, how = load_model(args.model, seed=args.seed, dtype=getattr(torch, args.dtype) if args.dtype else None)
        tokens, tokens_from = read_tokens(args.text, tokenizer, model.config.vocab_size)
        rec = capture(model, tokens, seq_len=args.seq_len, progress=not args.quiet)
        out = write_capture(rec, args.out, model_type=model.config.model_type, how=how, tokens_from=tokens_from)
    except CaptureError as exc:
        raise UsageError(str(exc)) from None
    from ..run.capture import CONTRACT_OF_MODEL_TYPE

    contract = CONTRACT_OF_MODEL_TYPE.get(model.config.model_type)
    print(f"model: {how}; tokens: {tokens.numel():,} from {tokens_from}; {len(rec.layer_names)} MoE layers ({rec.layer_names[0]} .. {rec.layer_names[-1]})")
    print(f"capture: {out}")
    if contract:
        print(f"check it: python -m contracts check --candidate oracle --contract {contract} --logits {out}")
    return ExitCode.OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    return run_main(lambda: build_parser(prog), run, argv)
