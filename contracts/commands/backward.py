"""``python -m contracts backward --candidate NAME [--contract C]``: the gradient of a router's weights against the contract's.

For a differentiable candidate (the oracle, torch-native, the engines' torch routers, hf-*, mcore-*): dL/dlogits
(and dL/dbias) for a seeded upstream gradient dL/dweights, compared expert by expert with autograd of the
contract's weight formula in float64 at the candidate's own selection. Rows that choose other experts than the
oracle are not compared (the forward check's). Mismatched rows are filed under a backward clause (grad_unselected,
grad_bias, grad_scaling, grad_renormalization, grad_score_function, grad_accuracy), each with a replay line;
docs/backward.md has what it covers and what not. Exit 0 PASS, 1 FAIL or ERROR, 5 NOT COVERED or NOT
DIFFERENTIABLE (no row compared), 3 the candidate is unavailable here.

Example::

    python -m contracts backward --candidate torch-native --contract aiter --experts 64 --topk 8 --rows 256
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._common import ExitCode, UsageError, make_parser, positive_int, run_main, seed_int, non_negative_int

__all__ = ["build_parser", "main", "run", "run_backward"]

PROG = "python -m contracts backward"
_MAX_SHAPE = 1 << 16  # a float64 reference of [rows, E] per variant: far above any model's 896 experts


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 1)[1])
    ap.add_argument("--candidate", required=True, help="a registered candidate or package.module:attr")
    ap.add_argument("--contract", help="the routing contract (default: the candidate's own)")
    ap.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    ap.add_argument("--rows", type=positive_int("--rows 64", 1 << 20), default=64, help="rows compared (default 64)")
    ap.add_argument("--rows-per-case", type=positive_int("--rows-per-case 8", 1 << 16), default=8,
                    help="rows per call; each call draws its own options (default 8)")
    ap.add_argument("--seed", type=seed_int(), default=0)
    ap.add_argument("--experts", type=positive_int("--experts 64", _MAX_SHAPE), help="E (default: the contract's)")
    ap.add_argument("--topk", type=positive_int("--topk 8", _MAX_SHAPE), help="k (default: the contract's)")
    ap.add_argument("--num-expert-group", type=positive_int("--num-expert-group 8", _MAX_SHAPE))
    ap.add_argument("--topk-group", type=positive_int("--topk-group 4", _MAX_SHAPE))
    ap.add_argument("--replay", type=non_negative_int("--replay 3"), metavar="CASE", help="only this case (a replay line's)")
    ap.add_argument("--row", type=non_negative_int("--row 5"), help="with --replay: print this row, every expert")
    ap.add_argument("--out", type=Path, help="the bundle folder (default reports/<UTC time>-backward-<candidate>)")
    ap.add_argument("--no-bundle", action="store_true", help="print only; write no folder")
    return ap


_EXIT = {"PASS": ExitCode.OK, "FAIL": ExitCode.FAILED, "ERROR": ExitCode.FAILED,
         "NOT COVERED": ExitCode.NOT_COVERED, "NOT DIFFERENTIABLE": ExitCode.NOT_COVERED}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    if args.row is not None and args.replay is None:
        raise UsageError("--row needs --replay CASE (the case a replay line names)")
    return run_backward(args.candidate, args.contract, device=args.device, rows=args.rows, rows_per_case=args.rows_per_case,
                        seed=args.seed, experts=args.experts, topk=args.topk, num_expert_group=args.num_expert_group,
                        topk_group=args.topk_group, replay=args.replay, row=args.row, out=args.out,
                        bundle=not args.no_bundle)  # fmt: skip


def run_backward(candidate_name: str, contract: str | None = None, *, device: str = "cpu", rows: int = 64,
                 rows_per_case: int = 8, seed: int = 0, experts: int | None = None, topk: int | None = None,
                 num_expert_group: int | None = None, topk_group: int | None = None, replay: int | None = None,
                 row: int | None = None, out: Path | None = None, bundle: bool = True) -> int:  # fmt: skip
    """The command without its parser (``check --backward`` calls this): check, print, write the bundle, the exit code.
    Usage errors raise ``UsageError`` (one line, exit 2 through ``run_main``)."""
    import oracle

    from ..backward import check_backward
    from ..backward.report import console_lines, detail_lines, write_bundle
    from ..candidates import get_candidate

    if (num_expert_group is None) != (topk_group is None):
        raise UsageError("--num-expert-group and --topk-group go together; pass both or neither")
    if device not in ("cpu", "cuda") and not device.startswith("cuda:"):
        raise UsageError(f"--device {device!r} is not supported; use cpu or cuda")
    candidate = get_candidate(candidate_name)
    contract = contract or candidate.contract
    try:
        c = oracle.get_contract(contract)
    except (KeyError, ValueError, oracle.ContractError) as exc:
        raise UsageError(str(exc).strip("'\"")) from None
    experts, topk = experts or c.experts, topk or c.topk
    if topk > experts:
        raise UsageError(f"--topk {topk} exceeds the experts ({experts}); use --topk <= --experts")
    ok, why = candidate.available(device)
    if not ok:
        print(f"{candidate.name}: UNAVAILABLE: {why}")
        return ExitCode.UNAVAILABLE
    result = check_backward(candidate, contract, device=device, rows=rows, rows_per_case=rows_per_case, seed=seed,
                            experts=experts, topk=topk, num_expert_group=num_expert_group, topk_group=topk_group,
                            replay=replay, row=row, lookup=candidate_name)  # fmt: skip
    for line in console_lines(result) + detail_lines(result):
        print(line)
    if bundle:
        print(f"bundle: {write_bundle(result, out=out)}")
    return _EXIT[result.status]


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    from ..run.supervisor import supervised  # the candidate runs in this process: os._exit(0) in it is no PASS

    return run_main(lambda: build_parser(prog), supervised("backward", run), argv)
