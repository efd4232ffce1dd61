"""``python -m contracts bench``: latency per launch of router candidates against batch size M.

Examples::

    python -m contracts bench --candidate oracle,torch-native
    python -m contracts bench --candidate radix4,torch-native,serial,block-argmax,aiter-model --device cuda --out DIR

``contracts.run.bench`` says how each figure is taken (CUDA graph replay on
a GPU, wall-clock on a CPU). Writes ``bench.json`` and ``bench.png`` under
``--out`` and prints a table with ratios to the first candidate. A point is
timed only after the candidate's answers at that M are checked (a (weights,
ids) pair of [M, k] tensors, as a check takes it); a candidate that raises,
answers something else or exits is an error point, listed in bench.json and
here. Exit codes here: 1 any error point (or the candidate ended the
process: bench.json then says where it was); 3 no candidate could be timed
on this host.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

from ._common import ExitCode, UsageError, add_engine_path, make_parser, positive_int, refuse_unknown_contract, run_main

from ._common import EXPERTS_WHY, INT64_MAX, MAX_EXPERTS, seed_int  # noqa: E402

__all__ = ["build_parser", "main", "print_summary", "run"]

PROG = "python -m contracts bench"
DEFAULT_M = (1, 8, 64, 256, 1024, 1536, 4096)
DTYPE_NAMES = ("bf16", "fp32")


def _m_list(text: str) -> list[int]:
    values = []
    for part in text.split(","):
        part = part.strip()
        try:
            value = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--m {text!r}: {part!r} is not an integer; give comma-separated row counts >= 1, e.g. --m 1,64,1024"
            ) from None
        if not 1 <= value <= INT64_MAX:
            raise argparse.ArgumentTypeError(f"--m {text!r}: {value} is not from 1 to {INT64_MAX:,}; every M is a row count, e.g. --m 1,64,1024")
        values.append(value)
    return sorted(set(values))


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    ap = make_parser(prog, __doc__.split("\n\n")[0].split(": ", 1)[1], __doc__.split("\n\n", 3)[-1])
    ap.add_argument("--candidate", action="append", required=True, metavar="A,B,C",
                    help="candidates (names or package.module:attr), comma-separated; ratios are against the first")  # fmt: skip
    ap.add_argument("--m", type=_m_list, default=list(DEFAULT_M), metavar="M1,M2,...",
                    help=f"batch sizes (rows) to time (default {','.join(map(str, DEFAULT_M))})")  # fmt: skip
    ap.add_argument("--dtype", choices=DTYPE_NAMES, default="bf16", help="logits dtype (default bf16)")
    ap.add_argument("--bias-dtype", choices=["same", *DTYPE_NAMES], default="same",
                    help="bias dtype (default: the logits dtype, as aiter reads it)")  # fmt: skip
    ap.add_argument("--contract", metavar="NAME",
                    help="time every candidate under this built-in routing contract (its shape, groups, bias and call "
                         "options); a candidate that does not serve it is listed unavailable (default: each its own, "
                         "at 896/16)")  # fmt: skip
    ap.add_argument("--experts", type=positive_int("--experts 896", MAX_EXPERTS, EXPERTS_WHY), help="experts (default: the contract's, else 896)")
    ap.add_argument("--topk", type=positive_int("--topk 16", MAX_EXPERTS, EXPERTS_WHY), help="top-k (default: the contract's, else 16)")
    ap.add_argument("--device", help="cpu or cuda (default: cuda when torch sees a GPU, else cpu)")
    ap.add_argument("--out", type=Path, help="output directory (default reports/<UTC time>-bench)")
    ap.add_argument("--replays", type=positive_int("--replays 25"), default=25, help="GPU: timed graph replays (default 25)")
    ap.add_argument("--launches", type=positive_int("--launches 20"), default=20, help="GPU: launches captured per graph (default 20)")
    ap.add_argument("--warmup", type=positive_int("--warmup 3"), default=3, help="GPU: untimed replays first (default 3)")
    ap.add_argument("--repeats", type=positive_int("--repeats 10"), default=10, help="CPU: timed samples per point (default 10)")
    ap.add_argument("--rotate", type=positive_int("--rotate 4"), default=1,
                    help="cycle through this many distinct input buffers (default 1: not rotated)")  # fmt: skip
    ap.add_argument("--seed", type=seed_int(), default=0)
    return add_engine_path(ap)


def print_summary(report: dict, out: Path) -> None:
    from ..run.bench_results import launches_by_candidate, results_table

    timer = report["method"]["timer"]
    table = results_table(report)
    print(f"us per launch ({timer}; median of samples; spread in bench.json); (ratio) = candidate / {report['baseline']}")
    m = report["method"]
    if m.get("contract") and m["contract"] != "each candidate's own":
        groups = f", {m['groups'][0]} groups keep {m['groups'][1]}" if m.get("groups") and m["groups"][0] > 1 else ""
        print(f"every candidate under contract {m['contract']}: {m['experts']} experts, top-{m['topk']}{groups}, "
              f"bias {m['bias_dtype'] or 'none'}, renormalize={m['renormalize']}, routed_scaling_factor={m['routed_scaling_factor']:g}")
    if report["method"].get("pdl"):
        print(report["method"]["pdl"])
    if report["method"].get("launch_floor_us") is not None:
        by_m = list((report["method"].get("launch_floor_by_m_us") or {}).values())
        again = f"; {min(by_m):.2f}-{max(by_m):.2f} timed again before each M's candidates" if by_m else ""
        print(f"launch floor: an empty kernel takes {report['method']['launch_floor_us']:.2f} us per launch on this host "
              f"at the start of the run{again}, timed the same way (compare two hosts' tables above their floors)")
    if not table.empty:
        print(table.to_string(index=False))
    if str(report.get("device", "")).startswith("cuda"):  # the CPU timer launches nothing to count
        for name, launched in launches_by_candidate(report).items():
            print(f"launched: {name}: {launched}")
    if any(p.get("timer") == "cuda-eager" for c in report["candidates"] for p in c["results"]):
        print("* timed eagerly: the route could not be captured in a CUDA graph (bench.json says why)")
    for c in report["candidates"]:
        if c.get("note"):
            print(f"[{c['contract']}]: {c['name']} {c['note']}")
        if c["status"] != "ok":
            print(f"{c['status']}: {c['name']}: {c['reason']}")
        for p in c["results"]:
            if p["status"] in ("skipped", "error"):
                print(f"{p['status']}: {c['name']} M={p['m']}: {p['reason']}")
    shaky = [f"{c['name']} M={p['m']}" for c in report["candidates"] for p in c["results"] if p.get("noisy")]
    if shaky:
        print(f"~ {len(shaky)} point(s) spread wider than their median (a busy host?); no crossover is computed from them: {', '.join(shaky)}")
    for c in report.get("curves", []):
        if c["at_m"] is None:
            shape = "never faster at a larger M"
        else:
            shape = f"largest fall {c['largest_fall_pct']:.1f} % (M={c['at_m']} below M={c['below_m']})"
        above, of_m = c.get("above_floor_us"), c.get("above_floor_of_m_us")
        floor = f"; above the floor: {', '.join(f'M={m} {v:.2f}' for m, v in above.items())} us" if above else ""
        if of_m:
            floor += f"; above the floor of each M: {', '.join(f'M={m} {v:.2f}' for m, v in of_m.items())} us"
        print(f"curve: {c['candidate']}: {shape}{floor}")
    for x in report["crossovers"]:
        print(f"crossover: {x['candidate']} and {x['baseline']} cross near M={x['m']:.0f} "
              f"(between {x['between_m'][0]} and {x['between_m'][1]}); {x['faster_above']} is faster above")  # fmt: skip
    print(f"bench: {out / 'bench.json'}  plot: {out / 'bench.png'}")


def _names(values: list[str]) -> list[str]:
    names = [n.strip() for v in values for n in v.split(",") if n.strip()]
    if not names:
        raise UsageError("--candidate needs at least one name, e.g. --candidate oracle,torch-native")
    if len(set(names)) != len(names):
        raise UsageError(f"--candidate {','.join(names)} names a candidate twice; give each once")
    return names


def run(args: argparse.Namespace) -> int:
    names = _names(args.candidate)
    if args.contract is not None:
        if args.contract.endswith(".toml"):
            raise UsageError(f"--contract {args.contract}: bench takes a built-in contract's name (the candidates say which "
                             "they serve by name); check a contract file with: python -m contracts check --contract FILE.toml")
        refuse_unknown_contract(args.contract)  # before torch is imported: a typo is answered at once
    import torch

    from ..candidates import CandidateLoadError, get_candidate
    from ..run.bench import run_bench, write_bench
    from ..run.bench_options import BenchOptions, options_for_contract

    timing = dict(m=tuple(args.m), dtype=args.dtype, bias_dtype=args.bias_dtype, replays=args.replays, launches=args.launches,
                  warmup=args.warmup, repeats=args.repeats, rotate=args.rotate, seed=args.seed)  # fmt: skip
    shape = {k: v for k, v in (("experts", args.experts), ("topk", args.topk)) if v is not None}
    if args.contract is None:
        options = BenchOptions(**{"experts": 896, "topk": 16, **shape}, **timing)
    else:
        try:
            options = options_for_contract(args.contract, **shape, **timing)
        except ValueError as exc:
            raise UsageError(f"--contract {args.contract}: {exc}") from None
    if options.topk > options.experts:
        raise UsageError(f"--topk {options.topk} is larger than --experts {options.experts}; lower --topk")
    if options.num_expert_group > 1 and options.experts % options.num_expert_group:
        raise UsageError(f"--experts {options.experts} does not split into the {options.num_expert_group} groups of contract "
                         f"{options.contract}; use a multiple of {options.num_expert_group}")  # fmt: skip

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if device.split(":")[0] not in ("cpu", "cuda"):
        raise UsageError(f"--device {device!r} is not supported; use cpu or cuda")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UsageError("--device cuda was asked for, but torch sees no GPU on this host; use --device cpu")
    candidates = []
    for name in names:
        try:
            candidates.append(get_candidate(name))
        except CandidateLoadError as exc:
            text = str(exc)
            raise UsageError(text if "--candidate" in text else f"--candidate: {text}") from None
    out = args.out or Path("reports") / f"{dt.datetime.now(dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}-bench"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {out} is not writable ({exc.strerror or exc}); choose another directory") from None
    from ..reports._atomic import write_json
    from ..reports.schema import HARNESS_ERROR

    report = run_bench(candidates, options, device=device, command=args.command_line,
                       checkpoint=lambda so_far: write_json(out / "bench.json", so_far))  # fmt: skip
    write_bench(out, report)
    print_summary(report, out)
    for fault in report["errors"]:  # the harness's own: its reason here (a candidate's is in the table above)
        if fault.get("kind") == HARNESS_ERROR:
            print(f"harness error: {fault['reason']}", file=sys.stderr)
    if report["errors"]:
        print(f"error: {len(report['errors'])} bench point(s) are errors, not timings: "
              + "; ".join(f"{e['candidate'] or 'the harness'}" + (f" M={e['m']}" if e["m"] is not None else "") for e in report["errors"][:5])
              + (" ..." if len(report["errors"]) > 5 else "") + f" (reasons above and in {out / 'bench.json'})", file=sys.stderr)  # fmt: skip
        return ExitCode.FAILED
    if not any(p["status"] == "timed" for c in report["candidates"] for p in c["results"]):
        print("error: no candidate could be timed on this host (see the reasons above)", file=sys.stderr)
        return ExitCode.UNAVAILABLE
    return ExitCode.OK


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    from ..run.supervisor import supervised  # light: no torch

    # Every candidate runs in this command's process: a supervisor turns an exit past the fence (libc _exit, a crash) into exit 1.
    return run_main(lambda: build_parser(prog), supervised("bench", run), argv)
