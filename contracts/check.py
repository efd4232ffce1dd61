"""``python -m contracts.check``: check router candidates against a routing contract.

Examples::

    python -m contracts.check --candidate torch-native --contract aiter
    python -m contracts.check --candidate all
    python -m contracts.check --candidate serial --against block-argmax --exact
    python -m contracts.check --candidate mypkg.router:route --contract serial
    python -m contracts.check --candidate radix4 --replay tie_pool_straddle:12345:16 --row 3

Exit codes: 0 no unexpected mismatch; 1 unexpected mismatches (or a
candidate error); 2 usage error; 3 a candidate asked for by name is
unavailable on this host (the message says why).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from pathlib import Path

import pandas as pd
import torch

import oracle

from . import families as fams
from ._atomic import write_json, write_text
from .environment import environment
from .registry import Candidate, CandidateLoadError, DuplicateCandidateError, all_candidates, get_candidate
from .report import write_bundle
from .runner import SCHEMA_VERSION, CheckResult, check_candidate

__all__ = ["main"]

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
DEFAULT_ROWS = 250_000


class UsageError(Exception):
    """Bad command-line input; the message says what to change."""


def _positive_int(name):
    def parse(text):
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be an integer, got {text!r}") from None
        if value <= 0:
            raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {value}")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m contracts.check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidate", action="append", required=True, metavar="NAME",
                    help="candidate name, package.module:attr, or 'all'; repeat or comma-separate for several")  # fmt: skip
    ap.add_argument("--contract", choices=sorted(oracle.CONTRACTS), help="contract to check (default: the one the candidate claims)")
    ap.add_argument("--against", metavar="NAME", help="compare with this candidate instead of the oracle")
    ap.add_argument("--exact", action="store_true", help="bit-identity: weights to 0 ULP and no near-tie allowance")
    ap.add_argument("--out", type=Path, help="bundle directory (default reports/<UTC time>-<candidate>)")
    ap.add_argument("--rows", type=_positive_int("--rows"), default=DEFAULT_ROWS, help=f"rows over all families (default {DEFAULT_ROWS:,})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", help=f"comma-separated subset of: {', '.join(fams.FAMILIES)}")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when the candidate runs there and a GPU is present)")
    ap.add_argument("--experts", type=_positive_int("--experts"), default=896)
    ap.add_argument("--topk", type=_positive_int("--topk"), default=16)
    ap.add_argument("--replay", metavar="FAMILY:SEED:ROWS", help="run exactly one case (from a report's replay line)")
    ap.add_argument("--row", type=int, help="with --replay: print this row side by side")
    ap.add_argument("--shard", metavar="I/N", help="run the I-th of N deterministic slices of the cases (1-based); merge with contracts.merge")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _split_names(values: list[str]) -> list[str]:
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if not names:
        raise UsageError("--candidate needs at least one name")
    return names


def _families(text: str | None) -> list[str]:
    if not text:
        return list(fams.FAMILIES)
    chosen = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in fams.FAMILIES]
    if unknown:
        raise UsageError(f"unknown family {', '.join(map(repr, unknown))}; known: {', '.join(fams.FAMILIES)}")
    return chosen


def _replay_spec(text: str, experts: int, topk: int) -> fams.CaseSpec:
    try:
        family, seed, rows = text.split(":")
        spec = fams.CaseSpec(family, int(seed), int(rows), experts, topk)
    except ValueError:
        raise UsageError(f"--replay {text!r} must be FAMILY:SEED:ROWS, as printed in a report") from None
    if family not in fams.FAMILIES:
        raise UsageError(f"--replay family {family!r} is unknown; known: {', '.join(fams.FAMILIES)}")
    if spec.rows < 1:
        raise UsageError(f"--replay rows must be >= 1, got {spec.rows}")
    return spec


def _shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise UsageError(f"--shard {text!r} must look like I/N, e.g. 2/4") from None
    if n < 1 or not 1 <= i <= n:
        raise UsageError(f"--shard {text}: need 1 <= I <= N (got I={i}, N={n})")
    return i, n


def _device_for(candidate: Candidate, requested: str | None) -> str:
    if requested:
        return requested
    if "cuda" in candidate.devices and torch.cuda.is_available():
        return "cuda"
    return "cpu" if "cpu" in candidate.devices else candidate.devices[0]


def _check_device(device: str) -> None:
    kind = device.split(":")[0]
    if kind not in ("cpu", "cuda"):
        raise UsageError(f"--device {device!r} is not supported; use cpu or cuda")
    if kind == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no GPU on this host; use --device cpu")


def _default_out(label: str) -> Path:
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in label)
    return Path("reports") / f"{stamp}-{safe}"


def _unavailable_result(candidate: Candidate, contract: str, device: str, reason: str, command: str, seed: int) -> CheckResult:
    summary = {
        "schema_version": SCHEMA_VERSION,
        "candidate": candidate.name,
        "contract": contract,
        "against": None,
        "device": device,
        "status": "unavailable",
        "reason": reason,
        "rows_checked": 0,
        "rows_skipped": 0,
        "mismatched_rows": 0,
        "clauses": {},
        "families": {},
        "expected_deviations": {},
        "environment": environment(device),
        "seed": seed,
        "command": command,
    }
    return CheckResult(summary)


def _print_row_side_by_side(result: CheckResult, row: int) -> None:
    for d in result.details:
        if d["row"] == row:
            print(f"row {row}: {d['clause']} ({d['verdict']}): {d['reason']}")
            print(f"  expected ids {d['expected_ids']}\n  actual ids   {d['actual_ids']}")
            print(f"  expected w   {d['expected_weights']}\n  actual w     {d['actual_weights']}")
            return
    print(f"row {row}: matches (no mismatch recorded for it)")


def _verdict_table(results: list[CheckResult]) -> str:
    rows = []
    for r in results:
        s = r.summary
        rows.append(
            {
                "candidate": s["candidate"] + (f" vs {s['against']}" if s.get("against") else ""),
                "contract": s["contract"],
                "device": s["device"],
                "status": s["status"].upper(),
                "rows": s["rows_checked"],
                "skipped": s["rows_skipped"],
                "mismatched": s["mismatched_rows"],
                "near ties": s.get("near_tie_rows", 0),
                "declared": s.get("expected_deviation_rows", 0),
                "rows/s": f"{s['rows_per_s']:,.0f}" if s.get("rows_per_s") else "-",
                "note": s.get("reason", "") or ", ".join(f"{k}:{v}" for k, v in s["clauses"].items() if v),
            }
        )
    return pd.DataFrame(rows).to_string(index=False)


def _run(args, argv_text: str) -> int:
    names = _split_names(args.candidate)
    fam_list = _families(args.families)
    shard = _shard(args.shard)
    if args.topk > args.experts:
        raise UsageError(f"--topk {args.topk} is larger than --experts {args.experts}")
    if args.row is not None and not args.replay:
        raise UsageError("--row needs --replay FAMILY:SEED:ROWS")
    if args.device:
        _check_device(args.device)
    everything = names == ["all"]
    if everything:
        candidates = [c for c in all_candidates().values()]
    else:
        if "all" in names:
            raise UsageError("--candidate all cannot be combined with other names")
        candidates = [get_candidate(n) for n in names]
    against = get_candidate(args.against) if args.against else None

    specs_for = {}
    results: list[CheckResult] = []
    unavailable_by_name = []
    several = len(candidates) > 1
    label = "all" if everything else ("+".join(c.name for c in candidates) if several else candidates[0].name)
    out_root = args.out or _default_out(label)
    try:
        out_root.mkdir(parents=True, exist_ok=True)
        probe = out_root / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"--out {out_root} is not writable ({exc.strerror}); choose another directory") from None

    for cand in candidates:
        contract = args.contract or cand.contract
        device = _device_for(cand, args.device)
        ok, why = cand.available(device)
        if ok and against is not None:
            ok, why2 = against.available(device)
            why = why if ok else f"--against {against.name}: {why2}"
        if not ok:
            if not everything:
                unavailable_by_name.append((cand.name, why))
            results.append(_unavailable_result(cand, contract, device, why, argv_text, args.seed))
            continue
        key = (device,)
        if key not in specs_for:
            if args.replay:
                specs_for[key] = [_replay_spec(args.replay, args.experts, args.topk)]
            else:
                specs_for[key] = fams.plan(fam_list, args.rows, args.seed, args.experts, args.topk)
                if shard:
                    i, n = shard
                    specs_for[key] = [s for index, s in enumerate(specs_for[key]) if index % n == i - 1]
        specs = specs_for[key]
        total = sum(s.rows for s in specs)
        from tqdm import tqdm

        with tqdm(total=total, unit="row", unit_scale=True, desc=cand.name, disable=args.quiet or None, leave=False, file=sys.stderr) as bar:
            result = check_candidate(
                cand, specs, contract=contract, device=device, against=against, exact=args.exact,
                seed=args.seed, command=argv_text, progress=bar,
            )  # fmt: skip
        result.summary["environment"] = environment(device)
        result.summary["shard"] = args.shard
        results.append(result)

    for r in results:
        target = out_root / r.summary["candidate"].replace(":", "_") if several else out_root
        if r.summary["status"] == "unavailable":
            target.mkdir(parents=True, exist_ok=True)
            write_text(target / "report.md", f"# UNAVAILABLE: `{r.summary['candidate']}`\n\n{r.summary['reason']}\n")
            write_json(target / "summary.json", r.summary)
        else:
            write_bundle(target, r)
        r.summary["bundle"] = str(target)
    if several:
        index = [{k: r.summary.get(k) for k in ("candidate", "contract", "device", "status", "rows_checked", "mismatched_rows", "reason", "bundle")} for r in results]
        write_json(out_root / "index.json", {"schema_version": SCHEMA_VERSION, "command": argv_text, "candidates": index})
        write_text(out_root / "index.md", "# Check index\n\n```\n" + _verdict_table(results) + "\n```\n")

    print(_verdict_table(results))
    print(f"bundle: {out_root}")
    if args.replay and args.row is not None:
        for r in results:
            if r.summary["status"] != "unavailable":
                _print_row_side_by_side(r, args.row)
    if unavailable_by_name:
        for name, why in unavailable_by_name:
            print(f"unavailable: {name}: {why}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    failed = any(r.summary["status"] in ("fail", "error") for r in results)
    return EXIT_MISMATCH if failed else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed the message
        return EXIT_USAGE if exc.code else EXIT_OK
    argv_text = shlex.join(["python", "-m", "contracts.check", *argv])
    try:
        return _run(args, argv_text)
    except (UsageError, CandidateLoadError, DuplicateCandidateError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
