"""``python -m contracts.check``: check router candidates against a routing contract.

Examples::

    python -m contracts.check --candidate torch-native --contract aiter
    python -m contracts.check --candidate all
    python -m contracts.check --candidate serial --against block-argmax --exact
    python -m contracts.check --candidate mypkg.router:route --contract serial
    python -m contracts.check --candidate radix4 --replay tie_pool_straddle:12345:16 --row 3
    python -m contracts.check --candidate radix4 --repeat 3 --timeout 30

Exit codes: 0 no unexpected mismatch; 1 unexpected mismatches, a
nondeterministic candidate or a candidate error (crash, hang, out of
memory); 2 usage error (one line on stderr naming the argument and the fix);
3 a candidate asked for by name is unavailable on this host (the message
says why); 130 interrupted by SIGINT (Ctrl-C), 143 by SIGTERM: the bundle
then holds every case checked so far, with status ``interrupted``.

GPU candidates and third-party candidates run in a worker process
(``--isolate``, see ``contracts.isolation``); ``docs/robustness.md`` has the
details.
"""

from __future__ import annotations

import argparse
import datetime as dt
import shlex
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

import oracle

from ._cli import UsageError, check_device, device_for, ensure_writable, positive_int
from . import families as fams
from ._atomic import write_json, write_text
from .environment import environment
from .isolation import Interrupted, Worker, WorkerFailure, load_error_message
from .registry import Candidate, CandidateLoadError, DuplicateCandidateError, all_candidates, get_candidate
from .report import write_bundle
from .families import iter_plan, planned_rows
from .runner import SCHEMA_VERSION, CheckResult, check_candidate

__all__ = ["main"]

EXIT_OK, EXIT_MISMATCH, EXIT_USAGE, EXIT_UNAVAILABLE = 0, 1, 2, 3
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130; SIGTERM gives 143
DEFAULT_ROWS = 250_000
DEFAULT_TIMEOUT_S = 60.0


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, through main()'s single exit point, not argparse's usage dump
        raise UsageError(f"{message} (see --help)")


def _positive_seconds(text):
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}; e.g. --timeout 60") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text}; e.g. --timeout 60")
    return value


def build_parser() -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m contracts.check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--candidate", action="append", required=True, metavar="NAME",
                    help="candidate name, package.module:attr, or 'all'; repeat or comma-separate for several")  # fmt: skip
    ap.add_argument("--contract", choices=sorted(oracle.CONTRACTS), help="contract to check (default: the one the candidate claims)")
    ap.add_argument("--against", metavar="NAME", help="compare with this candidate instead of the oracle")
    ap.add_argument("--exact", action="store_true", help="bit-identity: weights to 0 ULP and no near-tie allowance")
    ap.add_argument("--out", type=Path, help="bundle directory (default reports/<UTC time>-<candidate>)")
    ap.add_argument("--rows", type=positive_int("--rows 100000"), default=DEFAULT_ROWS, help=f"rows over all families (default {DEFAULT_ROWS:,})")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--families", help=f"comma-separated subset of: {', '.join(fams.FAMILIES)}")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when the candidate runs there and a GPU is present)")
    ap.add_argument("--experts", type=positive_int("--experts 896"), default=896)
    ap.add_argument("--topk", type=positive_int("--topk 16"), default=16)
    ap.add_argument("--replay", metavar="FAMILY:SEED:ROWS", help="run exactly one case (from a report's replay line)")
    ap.add_argument("--row", type=int, help="with --replay: print this row side by side")
    ap.add_argument("--shard", metavar="I/N", help="run the I-th of N deterministic slices of the cases (1-based); merge with contracts.merge")
    ap.add_argument("--isolate", action=argparse.BooleanOptionalAction, default=None,
                    help="run each candidate in a worker process, so a crash or hang is reported, not fatal "
                         "(default: on for GPU and third-party candidates)")  # fmt: skip
    ap.add_argument("--timeout", type=_positive_seconds, default=DEFAULT_TIMEOUT_S, metavar="S",
                    help=f"isolated runs: seconds one call may take before the worker is killed (default {DEFAULT_TIMEOUT_S:g})")  # fmt: skip
    ap.add_argument("--repeat", type=positive_int("--repeat 3"), default=1, metavar="N",
                    help="call the candidate N times per case (and once from a CUDA graph on GPUs); differences fail the run")  # fmt: skip
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    return ap


def _split_names(values: list[str]) -> list[str]:
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if not names:
        raise UsageError("--candidate needs at least one name; e.g. --candidate oracle")
    return names


def _families(text: str | None) -> list[str]:
    if not text:
        return list(fams.FAMILIES)
    chosen = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in fams.FAMILIES]
    if unknown or not chosen:
        raise UsageError(f"--families: unknown family {', '.join(map(repr, unknown)) or repr(text)}; known: {', '.join(fams.FAMILIES)}")
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
        raise UsageError(f"--shard {text!r} must look like I/N, e.g. --shard 2/4") from None
    if n < 1 or not 1 <= i <= n:
        raise UsageError(f"--shard {text}: need 1 <= I <= N (got I={i}, N={n}); e.g. --shard 1/{max(n, 1)}")
    return i, n


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


def _note(s: dict) -> str:
    if s.get("reason"):
        return s["reason"]
    parts = [f"{k}:{v}" for k, v in s["clauses"].items() if v]
    det = s.get("determinism") or {}
    if det.get("rows_differing"):
        parts.append(f"determinism:{det['rows_differing']}")
    if s["status"] == "error" and s.get("error"):
        parts.insert(0, f"{s['error'].get('kind', 'error')}: {s['error'].get('message', '')}"[:120])
    if s["status"] == "interrupted":
        parts.insert(0, f"interrupted ({s.get('interrupted') or 'signal'})")
    declared = [f"{k}:{v['rows']}" for k, v in (s.get("expected_deviations") or {}).items() if v.get("rows")]
    if declared:
        parts.append("declared " + ", ".join(declared))
    gone = [k for k, v in (s.get("expected_deviations") or {}).items() if not v.get("observed")]
    if gone:
        parts.append("declared but not seen: " + ", ".join(gone))
    return ", ".join(parts)


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
                "note": _note(s),
            }
        )
    return pd.DataFrame(rows).to_string(index=False)


class _StopSignals:
    """SIGINT/SIGTERM: the first asks the run to stop after the current case and write its bundle;
    a second stops at once (KeyboardInterrupt), except while bundles are being written."""

    def __init__(self):
        self.reason: str | None = None
        self.signum = 0
        self.writing = False
        self._previous: dict = {}

    def __call__(self) -> str | None:
        return self.reason

    def __enter__(self):
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)

    def _handle(self, signum, frame):
        if self.reason is None:
            self.reason, self.signum = signal.Signals(signum).name, signum
            print(f"\n{self.reason}: stopping after the current case; the bundle keeps what ran (again to stop at once)", file=sys.stderr)
        elif not self.writing:
            raise KeyboardInterrupt


@dataclass
class _Target:
    candidate: Candidate
    lookup: str  # what a worker passes to registry.get_candidate
    worker: Worker | None = None  # already started: it imported the candidate to describe it


def _resolve(name: str, arg: str, args, stop: _StopSignals) -> _Target:
    """A candidate by name or ``module:attr``. With isolation allowed, a ``module:attr`` is imported in a worker only."""
    known = all_candidates()
    if name in known:
        return _Target(known[name], name)
    if ":" in name and args.isolate is not False:
        worker = Worker(name, timeout=args.timeout, should_stop=stop)
        meta = worker.describe()  # CandidateLoadError if it does not import
        proxy = Candidate(
            name=meta["name"],
            route=_runs_in_worker,
            contract=meta["contract"],
            devices=tuple(meta["devices"]),
            description=meta["description"],
            expected_deviations=meta["expected_deviations"],
            third_party=meta["third_party"],
            origin=meta["origin"],
        )
        return _Target(proxy, name, worker)
    try:
        return _Target(get_candidate(name), name)
    except CandidateLoadError as exc:
        message = load_error_message(exc)
        raise CandidateLoadError(message if arg in message else f"{arg}: {message}") from None


def _runs_in_worker(*_args, **_kwargs):
    raise RuntimeError("this candidate was imported in a worker process only; run it with --isolate")


def _should_isolate(args, candidate: Candidate, device: str, against: Candidate | None) -> bool:
    if args.isolate is not None:
        return args.isolate

    def risky(c):
        return c.third_party or "cpu" not in c.devices

    return device.startswith("cuda") or risky(candidate) or (against is not None and risky(against))


def _error_result(target: _Target, contract: str, device: str, kind: str, message: str, detail: str, args, argv_text) -> CheckResult:
    result = check_candidate(target.candidate, [], contract=contract, device=device, seed=args.seed, command=argv_text, worker=target.worker)
    result.summary["status"] = "error"
    result.summary["error"] = {"kind": kind, "case": f"loading {target.lookup}", "message": message, "traceback": detail or message, "replay": None}
    return result


def _check_one(target: _Target, against: _Target | None, args, argv_text, stop, plan_for) -> tuple[CheckResult, str | None]:
    """Check one candidate; ``(result, unavailable reason or None)``."""
    cand = target.candidate
    contract = args.contract or cand.contract
    device = device_for(cand, args.device)
    kind = device.split(":")[0]
    against_c = against.candidate if against else None
    if kind not in cand.devices:
        why = f"{cand.name} runs on {'/'.join(cand.devices)}, not on {kind}"
        return _unavailable_result(cand, contract, device, why, argv_text, args.seed), why
    isolate = _should_isolate(args, cand, device, against_c)
    worker = None
    if isolate:
        if kind == "cuda" and not torch.cuda.is_available():
            why = f"{cand.name} runs on {'/'.join(cand.devices)}, and torch {torch.__version__} sees no GPU on this host"
            return _unavailable_result(cand, contract, device, why, argv_text, args.seed), why
        worker = target.worker or Worker(target.lookup, timeout=args.timeout, should_stop=stop)
        target.worker = worker
        try:
            ok, why = worker.load(
                contract=contract, device=device, against=against.lookup if against else None, repeat=args.repeat, origin=cand.origin
            )
        except WorkerFailure as failure:
            detail = failure.message + (f"\n\nworker stderr (tail):\n{failure.stderr_tail}" if failure.stderr_tail else "")
            return _error_result(target, contract, device, failure.kind, failure.message, detail, args, argv_text), None
    else:
        ok, why = cand.available(device)
        if ok and against_c is not None:
            ok, why2 = against_c.available(device)
            why = why if ok else f"--against {against_c.name}: {why2}"
    if not ok:
        return _unavailable_result(cand, contract, device, why, argv_text, args.seed), why
    specs, total = plan_for(device)
    from tqdm import tqdm

    with tqdm(total=total, unit="row", unit_scale=True, desc=cand.name, disable=args.quiet or None, leave=False, file=sys.stderr) as bar:
        result = check_candidate(
            cand, specs, contract=contract, device=device, against=against_c, exact=args.exact,
            seed=args.seed, command=argv_text, progress=bar, repeat=args.repeat, worker=worker, should_stop=stop,
        )  # fmt: skip
    return result, None


def _run(args, argv_text: str, stop: _StopSignals) -> int:
    names = _split_names(args.candidate)
    fam_list = _families(args.families)
    shard = _shard(args.shard)
    if args.topk > args.experts:
        raise UsageError(f"--topk {args.topk} is larger than --experts {args.experts}; choose --topk <= {args.experts}")
    if args.row is not None and not args.replay:
        raise UsageError("--row needs --replay FAMILY:SEED:ROWS")
    replay = _replay_spec(args.replay, args.experts, args.topk) if args.replay else None
    if args.device:
        check_device(args.device)
    if args.out:
        ensure_writable(args.out)
    everything = names == ["all"]
    if not everything and "all" in names:
        raise UsageError("--candidate all cannot be combined with other names")

    targets: list[_Target] = []
    against: _Target | None = None
    try:
        if everything:
            targets = [_Target(c, name) for name, c in all_candidates().items()]
        else:
            for n in names:
                targets.append(_resolve(n, "--candidate", args, stop))
        if args.against:
            against = _resolve(args.against, "--against", args, stop)
            if against.worker is not None:  # it runs in each candidate's worker; only its name was needed here
                against.worker.close()
                against.worker = None
        return _check_all(targets, against, args, argv_text, stop, fam_list, shard, replay, everything)
    finally:
        for t in targets:
            if t.worker is not None:
                t.worker.close()


def _check_all(targets, against, args, argv_text, stop, fam_list, shard, replay, everything) -> int:
    several = len(targets) > 1
    label = "all" if everything else ("+".join(t.candidate.name for t in targets) if several else targets[0].candidate.name)
    out_root = args.out or _default_out(label)
    ensure_writable(out_root)

    def plan_for(device):
        if replay is not None:
            return [replay], replay.rows
        if shard is None:
            return iter_plan(fam_list, args.rows, args.seed, args.experts, args.topk), planned_rows(fam_list, args.rows)
        i, n = shard

        def sliced():
            return (s for index, s in enumerate(iter_plan(fam_list, args.rows, args.seed, args.experts, args.topk)) if index % n == i - 1)

        return sliced(), sum(s.rows for s in sliced())

    results: list[CheckResult] = []
    unavailable_by_name = []
    not_started: list[str] = []
    try:
        for position, target in enumerate(targets):
            if stop():
                not_started = [t.candidate.name for t in targets[position:]]
                break
            try:
                result, unavailable = _check_one(target, against, args, argv_text, stop, plan_for)
            except Interrupted:
                not_started = [t.candidate.name for t in targets[position:]]
                break
            finally:
                if target.worker is not None:
                    target.worker.close()
                    target.worker = None
            if unavailable is not None:
                if not everything:
                    unavailable_by_name.append((target.candidate.name, result.summary["reason"]))
            else:
                result.summary["environment"] = environment(result.summary["device"])
                result.summary["shard"] = args.shard
            results.append(result)
            if result.summary["status"] == "interrupted":
                not_started = [t.candidate.name for t in targets[position + 1 :]]
                break
    except KeyboardInterrupt:  # a second signal outside a candidate's run: keep what finished
        stop.reason = stop.reason or "SIGINT"
        not_started = [t.candidate.name for t in targets[len(results) :]]

    stop.writing = True  # from here on a signal only waits for the bundles
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
        index += [
            {"candidate": name, "status": "interrupted", "rows_checked": 0, "reason": "not started: the run was interrupted", "bundle": None}
            for name in not_started
        ]  # fmt: skip
        write_json(out_root / "index.json", {"schema_version": SCHEMA_VERSION, "command": argv_text, "interrupted": stop.reason, "candidates": index})
        write_text(out_root / "index.md", "# Check index\n\n```\n" + (_verdict_table(results) if results else "(nothing ran)") + "\n```\n")

    if results:
        print(_verdict_table(results))
    print(f"bundle: {out_root}")
    if args.replay and args.row is not None:
        for r in results:
            if r.summary["status"] != "unavailable":
                _print_row_side_by_side(r, args.row)
    for name, why in unavailable_by_name:
        print(f"unavailable: {name}: {why}", file=sys.stderr)
    if stop.reason or any(r.summary["status"] == "interrupted" for r in results):
        if not_started:
            print(f"interrupted; not started: {', '.join(not_started)}", file=sys.stderr)
        return 128 + (stop.signum or signal.SIGINT)
    if unavailable_by_name:
        return EXIT_UNAVAILABLE
    failed = any(r.summary["status"] in ("fail", "error") for r in results)
    return EXIT_MISMATCH if failed else EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    with _StopSignals() as stop:
        try:
            args = parser.parse_args(argv)
            argv_text = shlex.join(["python", "-m", "contracts.check", *argv])
            return _run(args, argv_text, stop)
        except SystemExit as exc:  # --help
            return EXIT_USAGE if exc.code else EXIT_OK
        except (UsageError, CandidateLoadError, DuplicateCandidateError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_USAGE
        except (Interrupted, KeyboardInterrupt):  # before any candidate ran: nothing to write
            print("interrupted before any check ran", file=sys.stderr)
            return 128 + (stop.signum or signal.SIGINT)


if __name__ == "__main__":
    raise SystemExit(main())
