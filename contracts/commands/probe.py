"""``python -m contracts probe``: recover a candidate's tie priority from its answers alone.

Examples::

    python -m contracts probe --candidate aiter-model
    python -m contracts probe --candidate oracle --contract serial
    python -m contracts probe --candidate torch-native --device cuda --out reports/probe-tn-h200

``contracts.run.tie_probe`` explains the questions it asks and how it verifies
the order it recovers. Exit codes here: 0 probe done (whatever the rule);
1 the candidate raised or gave answers that are not a tie order at all.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from ._common import ExitCode, UsageError, add_engine_path, make_parser, positive_int, refuse_unknown_candidates, run_main

from ._common import EXPERTS_WHY, INT64_MAX, MAX_EXPERTS, seed_int  # noqa: E402

__all__ = ["build_parser", "main", "run"]

PROG = "python -m contracts probe"


def _batch_sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--batch-sizes must be comma-separated integers, got {text!r}") from None
    if not sizes or min(sizes) < 1 or max(sizes) > INT64_MAX:
        raise argparse.ArgumentTypeError(f"--batch-sizes needs sizes from 1 to {INT64_MAX:,}, got {text!r}")
    return sizes


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 3)[-1])
    ap.add_argument("--candidate", required=True, metavar="NAME", help="candidate name or package.module:attr")
    ap.add_argument("--contract", help="route the candidate follows for this contract (matters for 'oracle'); default: its own")
    ap.add_argument("--experts", type=positive_int("--experts 896", MAX_EXPERTS, EXPERTS_WHY), help="experts E (default: the contract's)")
    ap.add_argument("--topk", type=positive_int("--topk 16", MAX_EXPERTS, EXPERTS_WHY), help="top-k (default: the contract's)")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when the candidate runs there and a GPU is present)")
    ap.add_argument("--out", type=Path, help="directory for probe.json (default reports/<UTC time>-probe-<candidate>)")
    ap.add_argument("--seed", type=seed_int(), default=0, help="seed of the padding rows and the verification pools")
    ap.add_argument("--batch-sizes", type=_batch_sizes, default=(1, 2, 7, 64, 1025), help="verification batch sizes (default 1,2,7,64,1025)")
    ap.add_argument("--no-verify", action="store_true", help="recover only")
    return add_engine_path(ap)


def _fmt_table(values: list[int], per_line: int = 16) -> str:
    return "\n".join("  " + " ".join(f"{v:3d}" for v in values[i : i + per_line]) for i in range(0, len(values), per_line))


def _report(run) -> None:
    import oracle

    from ..run.probe import RULE_TEXT, dependence
    from ..run.tie_probe import short_ids

    r, doc = run.result, run.doc
    print(f"probe {r.candidate} on {r.device}: contract {r.contract}, E={r.experts}, k={r.topk}, {r.dtype} logits, {r.bias_dtype} bias")
    print(f"recovered the tie order in {r.recovery_calls} candidate calls (M={r.recovery_batch_size} each)")
    verified = {b: v for b, v in r.verified.items() if "pools" in v}
    if verified:
        pools = sum(v["pools"] for v in verified.values())
        print(f"verified with {pools} tie pools in {r.verification_calls} calls at M={','.join(verified)}; {r.calls} calls in all")
    skipped = [b for b, v in r.verified.items() if "skipped" in v]
    if skipped:
        print(f"not covered, not verified: M={','.join(skipped)}")
    print("order (strongest first, first 32): " + " ".join(map(str, r.permutation[:32])))
    matches, disagreements = doc["matches"], doc["first_disagreement"]
    if matches != "none":
        print(f"matches {RULE_TEXT[matches]}")
    else:
        rule = oracle.get_contract(r.contract).tie_rule
        d = disagreements[rule]
        print(
            f"matches none of {', '.join(RULE_TEXT.values())}; first disagreement with the {r.contract} contract's "
            f"{RULE_TEXT[rule]}: position {d['position']}, expected {d['expected']}, got {d['got']}"
        )
    print(f"consistent: {'yes' if r.consistent else 'NO'}: {dependence(r)}")
    shown = [e for e in r.evidence if e["stage"] == "recovery"][:2] + [e for e in r.evidence if e["stage"] == "verification"][:3]
    for e in shown:
        print(
            f"  evidence ({e['stage']}): M={e['batch_size']} row {e['row']}, pool of {e['pool_size']}, "
            f"{e['winners_from_pool']} to win: predicted {short_ids(e['predicted'])}, got {short_ids(e['got'])}"
        )
    facts = r.output_order
    if facts and not facts["tied_winners_in_priority_order"]:
        print(f"output order: tied winners not written in priority order in {facts['set_questions_out_of_order']} of {facts['set_questions']} set questions")
    if doc["lane_table"] is not None:
        print("wave64 lane order; lane table (lane -> traversal rank):")
        print(_fmt_table(doc["lane_table"]))
    print(f"probe.json: {run.path}")


def run(args: argparse.Namespace) -> int:
    if args.topk and args.experts and args.topk > args.experts:
        raise UsageError(f"--topk {args.topk} is larger than --experts {args.experts}")
    if args.topk and args.experts and args.experts < 2 * args.topk - 1:
        raise UsageError(f"--experts {args.experts} is too small for --topk {args.topk}: the probe needs E >= 2k-1 = {2 * args.topk - 1}")
    refuse_unknown_candidates([args.candidate], allow_all=False)  # before the torch-heavy imports below
    from ..candidates import get_candidate
    from ..run.checks import bundle_dirname, device_for
    from ..run.probe import run_probe

    from .check import check_contract

    check_contract(args.contract)
    candidate = get_candidate(args.candidate)
    device = device_for(candidate, args.device)
    out = args.out or Path("reports") / f"{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}-probe-{bundle_dirname(candidate.name)}"
    done = run_probe(candidate, out=out, contract=args.contract, experts=args.experts, topk=args.topk, device=device,
                     batch_sizes=args.batch_sizes, seed=args.seed, verify=not args.no_verify, command=args.command_line)  # fmt: skip
    if done.status == "unavailable":
        print(f"unavailable: {candidate.name}: {done.reason}", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    if done.status == "error":
        print(f"error: {done.reason}", file=sys.stderr)
        return ExitCode.FAILED
    if done.result is None:  # a grouped contract: the group order
        d = done.doc
        print(f"probe {d['candidate']} on {d['device']}: contract {d['contract']}, {d['n_group']} groups, {d['topk_group']} kept; {d['calls']} calls")
        print(f"group order (strongest first): {' '.join(map(str, d['group_permutation']))}; matches: {d['group_matches']} "
              f"(the contract's group tie rule: {d['group_rule']})")  # fmt: skip
        print(f"probe.json: {done.path}")
        return ExitCode.OK
    _report(done)
    return ExitCode.OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    from ..run.supervisor import supervised  # light: no torch

    # The candidate runs in this command's process: a supervisor turns its exits (os._exit(0) and the like) into exit 1.
    return run_main(lambda: build_parser(prog), supervised("probe", run), argv)
