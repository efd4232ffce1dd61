"""``python -m contracts.nightly``: check everything this host can run, in one dated bundle.

Examples::

    python -m contracts.nightly --out /tmp/n --upload file:///tmp/store
    python -m contracts.nightly --upload s3://bucket/router-nightly --compare-previous
    python -m contracts.nightly --candidates oracle,serial --rows 2000 --no-probe

What runs, each through its own command's ``main(argv)``:

1. ``contracts.check`` for every registered candidate (``--candidates`` picks
   some), each in ``candidates/<name>/``; one unavailable here is recorded
   with its reason.
2. ``contracts.check --against`` for the pairs that make sense on this host
   (``pairs/<a>--vs--<b>/``): radix4 vs aiter on ROCm, serial vs block-argmax
   with ``--exact`` on NVIDIA, aiter vs aiter-model wherever aiter runs. A
   pair that does not apply is recorded as skipped, with why.
3. ``contracts.probe`` (the tie order each candidate follows) in
   ``probe/<name>/``, and ``contracts.bench`` (latency per launch) in
   ``bench/``. The bench runs by default only on a GPU host: CPU wall-clock
   figures on a shared machine are too noisy for a night-to-night diff
   (``--bench`` forces it).
4. ``junit.xml`` (``contracts.junit``), and with ``--compare-previous`` the
   regression diff against the newest earlier bundle of the same execution
   target (``diff.md``, ``diff.json``; ``contracts.diff``), looked up at the
   ``--upload`` URL, or beside the bundle when there is no URL.
5. ``nightly.json``, the versioned envelope, written last; then, with
   ``--upload URL``, the bundle is copied to ``URL/YYYY/MM/DD/<name>/`` and
   verified (``contracts.upload``).

The bundle is ``--out``/``nightly-<UTC time>-<backend>`` (default
``reports/``); the backend (cpu, cuda, rocm) keeps the bundles of a CI matrix
apart. Rows per check: 250,000 on a GPU host, 50,000 on a CPU-only one.

Exit codes: 0 done; 1 ``--fail-on`` met (default ``regression``: the diff
found a regression; ``failure``: also any check that failed or errored);
2 usage error; 4 the upload failed (the bundle is still on disk).
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import importlib.metadata
import importlib.util
import platform
import shlex
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import torch

from ._cli import UsageError, check_device, run_command
from . import check
from ._atomic import write_json
from .environment import environment, git_commit

__all__ = ["NIGHTLY_SCHEMA_VERSION", "PAIRS", "Pair", "main"]

NIGHTLY_SCHEMA_VERSION = 1
EXIT_OK, EXIT_FAIL, EXIT_USAGE, EXIT_UPLOAD = 0, 1, 2, 4
CPU_ROWS, GPU_ROWS = 50_000, 250_000
PACKAGE = "router-contracts"


@dataclass(frozen=True)
class Pair:
    """Two candidates checked against each other (``check --against``)."""

    candidate: str
    against: str
    exact: bool
    backends: tuple[str, ...]  # where the pair makes sense; () = wherever both run
    why: str

    @property
    def label(self) -> str:
        return f"{self.candidate} vs {self.against}"


PAIRS = (
    Pair("radix4", "aiter", False, ("rocm",), "our radix-4 kernel against AMD aiter itself, same GPU"),
    Pair("serial", "block-argmax", True, ("cuda",), "the block-parallel argmax must be bit-identical to the serial scan"),
    Pair("aiter", "aiter-model", False, (), "aiter against its behavioural model: does the model still describe aiter?"),
)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _suite_version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def execution_target(device: str) -> dict:
    env = environment(device)
    model = env.get("device_name")
    if env.get("backend") == "cpu":
        model = _cpu_model() or model
    return {
        "backend": env.get("backend"),
        "device": device,
        "device_model": model,
        "runtime": env.get("runtime"),
        "driver": env.get("driver"),
        "torch": env.get("torch"),
        "python": env.get("python"),
        "platform": env.get("platform"),
        "host": platform.node(),
    }


def _main_of(module: str):
    """``module.main`` if the module exists here, else None."""
    try:
        if importlib.util.find_spec(module) is None:
            return None
        return getattr(importlib.import_module(module), "main", None)
    except ImportError:
        return None


def _read_json(path: Path):
    import json

    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def _run_check(label: str, argv: list[str], folder: Path, bundle: Path) -> dict:
    print(f"\n== check {label} ==", flush=True)
    record = {"bundle": folder.relative_to(bundle).as_posix(), "command": shlex.join(["python", "-m", "contracts.check", *argv])}
    try:
        code = check.main(argv)
    except Exception as exc:  # a crash of the harness for one check must not lose the others
        record.update(status="error", exit_code=None, reason=f"contracts.check raised {type(exc).__name__}: {exc}",
                      traceback=traceback.format_exc(limit=5)[-4000:])  # fmt: skip
        return record
    record["exit_code"] = code
    if (folder / "summary.json").exists():
        summary = _read_json(folder / "summary.json")
        record["status"] = summary.get("status")
        if summary.get("reason"):
            record["reason"] = summary["reason"]
        record["summary"] = {k: v for k, v in summary.items() if k != "environment"}
    else:
        record.update(status="error", reason=f"contracts.check exited {code} without writing a bundle (see the log)")
    return record


def _pair_record(pair: Pair, backend: str, known: dict) -> str | None:
    """Why the pair is skipped here, or None to run it."""
    missing = [n for n in (pair.candidate, pair.against) if n not in known]
    if missing:
        return f"candidate {', '.join(map(repr, missing))} is not registered here"
    if pair.backends and backend not in pair.backends:
        return f"only on {'/'.join(pair.backends)} hosts (this host: {backend})"
    return None


def _run_probe(names: list[str], device: str | None, seed: int, bundle: Path) -> dict:
    probe_main = _main_of("contracts.probe")
    if probe_main is None:
        return {"status": "not available", "reason": "probe not available (contracts.probe is not in this checkout)"}
    runs = {}
    for name in names:
        folder = bundle / "probe" / _safe(name)
        argv = ["--candidate", name, "--out", str(folder), "--seed", str(seed)] + (["--device", device] if device else [])
        print(f"\n== probe {name} ==", flush=True)
        run = {"command": shlex.join(["python", "-m", "contracts.probe", *argv])}
        try:
            code = probe_main(argv)
        except Exception as exc:
            runs[name] = {**run, "status": "error", "reason": f"contracts.probe raised {type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc(limit=5)[-4000:]}  # fmt: skip
            continue
        run["exit_code"] = code
        if (folder / "probe.json").exists():
            doc = _read_json(folder / "probe.json")
            run.update(path=(folder / "probe.json").relative_to(bundle).as_posix(), status=doc.get("status"),
                       matches=doc.get("matches"), consistent=doc.get("consistent"), error=doc.get("error"))  # fmt: skip
        else:
            run["status"] = "unavailable" if code == 3 else "error"
            run["reason"] = f"contracts.probe exited {code} without writing probe.json"
        runs[name] = run
    return {"status": "ok", "runs": runs}


def _run_bench(names: list[str], device: str | None, seed: int, bundle: Path, wanted: bool | None, gpu: bool) -> dict:
    if wanted is None and not gpu:
        return {"status": "skipped", "reason": "no GPU: CPU wall-clock latencies on a shared host are too noisy to diff night to night (--bench runs it anyway)"}
    if wanted is False:
        return {"status": "skipped", "reason": "--no-bench"}
    bench_main = _main_of("contracts.bench")
    if bench_main is None:
        return {"status": "not available", "reason": "bench not available (contracts.bench is not in this checkout)"}
    if gpu:
        # The oracle is a reference, not a router to time: on a GPU it cannot be
        # graph-captured and would only put every ratio against a slow baseline.
        # Our kernels go first, so the table's ratios read against radix4.
        order = ("radix4", "block-argmax", "serial", "aiter", "torch-native", "aiter-model")
        names = sorted((n for n in names if n != "oracle"), key=lambda n: order.index(n) if n in order else len(order))
    if not names:
        return {"status": "skipped", "reason": "no candidate ran here"}
    folder = bundle / "bench"
    argv = ["--candidate", ",".join(names), "--out", str(folder), "--seed", str(seed)] + (["--device", device] if device else [])
    print("\n== bench ==", flush=True)
    record = {"command": shlex.join(["python", "-m", "contracts.bench", *argv])}
    try:
        code = bench_main(argv)
    except Exception as exc:
        return {**record, "status": "error", "reason": f"contracts.bench raised {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=5)[-4000:]}  # fmt: skip
    record["exit_code"] = code
    if (folder / "bench.json").exists():
        record.update(status="ok" if code == 0 else "error", path="bench/bench.json")
        if code:
            record["reason"] = f"contracts.bench exited {code}"
    else:
        record.update(status="error", reason=f"contracts.bench exited {code} without writing bench.json")
    return record


def _bundle_dir(out: Path, started: dt.datetime, backend: str) -> Path:
    base = f"nightly-{started:%Y%m%dT%H%M%SZ}-{backend}"
    folder, n = out / base, 1
    while folder.exists():
        n += 1
        folder = out / f"{base}-{n}"
    folder.mkdir(parents=True)
    return folder


def _same_target(a: dict | None, b: dict) -> bool:
    return bool(a) and all(a.get(k) == b.get(k) for k in ("backend", "device_model"))


def _previous_bundle(bundle: Path, target: dict, upload: str | None) -> tuple[str | None, str]:
    """The newest earlier bundle of the same execution target, and where it was looked for."""
    if upload:
        from .upload import list_bundles, read_remote_json

        where = upload
        for remote in reversed(list_bundles(upload)):
            if remote.name >= bundle.name:
                continue
            try:
                doc = read_remote_json(remote.url + "/nightly.json")
            except (OSError, ValueError):
                continue
            if _same_target(doc.get("execution_target"), target):
                return remote.url, where
        return None, where
    where = str(bundle.parent)
    for folder in sorted(bundle.parent.glob("nightly-*/nightly.json"), reverse=True):
        if folder.parent.name >= bundle.name:
            continue
        try:
            doc = _read_json(folder)
        except (OSError, ValueError):
            continue
        if _same_target(doc.get("execution_target"), target):
            return str(folder.parent), where
    return None, where


def _compare(bundle: Path, target: dict, upload: str | None, threshold: float) -> dict:
    from .diff import diff_bundles, load_bundle

    try:
        previous, where = _previous_bundle(bundle, target, upload)
    except Exception as exc:
        return {"previous": None, "status": "error", "reason": f"could not list earlier bundles: {type(exc).__name__}: {exc}"}
    if previous is None:
        print(f"\ncompare-previous: no earlier bundle for this execution target under {where}")
        return {"previous": None, "status": "no previous", "reason": f"no earlier bundle for this execution target under {where}"}
    result = diff_bundles(load_bundle(previous), load_bundle(bundle), latency_threshold=threshold)
    text = result.render()
    print("\n" + text, end="")
    write_json(bundle / "diff.json", result.to_dict())
    (bundle / "diff.md").write_text("# Regression diff against the previous nightly\n\n```\n" + text + "```\n", encoding="utf-8")
    return {"previous": previous, "status": "regression" if result.regressed else "no regression",
            "regressions": result.regressions, "changes": len(result.changes), "report": "diff.md"}  # fmt: skip


def _positive_rows(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--rows must be an integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--rows must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m contracts.nightly", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--out", type=Path, default=Path("reports"), help="parent folder of the bundle (default reports/)")
    ap.add_argument("--upload", metavar="URL", help="copy the bundle to URL/YYYY/MM/DD/<name>/ (any fsspec URL: file://, s3://, gs://)")
    ap.add_argument("--rows", type=_positive_rows, help=f"rows per check (default {GPU_ROWS:,} with a GPU, {CPU_ROWS:,} without)")
    ap.add_argument("--seed", type=int, default=0, help="case seed (default 0: fixed, so that night-to-night diffs compare like with like)")
    ap.add_argument("--device", choices=["cpu", "cuda"], help="run every check on this device (default: cuda where a candidate runs there and a GPU is present)")
    ap.add_argument("--candidates", metavar="A,B", help="check only these candidates (default: every registered one)")
    ap.add_argument("--compare-previous", action="store_true", help="diff against the newest earlier bundle of this execution target")
    ap.add_argument("--latency-threshold", type=float, default=0.10, help="latency growth counted as a regression by the diff (default 0.10)")
    ap.add_argument("--probe", action=argparse.BooleanOptionalAction, default=True, help="run contracts.probe per candidate (default on)")
    ap.add_argument("--bench", action=argparse.BooleanOptionalAction, default=None, help="run contracts.bench (default: only on a GPU host)")
    ap.add_argument("--fail-on", choices=["regression", "failure", "never"], default="regression",
                    help="what makes the exit code 1 (default regression; failure adds failed checks)")  # fmt: skip
    return ap


def _run(args, argv_text: str) -> int:
    from .registry import all_candidates

    started = _now()
    clock = time.perf_counter()
    gpu = torch.cuda.is_available() and args.device != "cpu"
    if args.device:
        check_device(args.device)
    target = execution_target("cuda" if gpu else "cpu")
    rows = args.rows or (GPU_ROWS if gpu else CPU_ROWS)
    known = all_candidates()
    if args.candidates:
        names = [n.strip() for n in args.candidates.split(",") if n.strip()]
        unknown = [n for n in names if n not in known and ":" not in n]
        if unknown:
            raise UsageError(f"--candidates: unknown {', '.join(map(repr, unknown))}; known: {', '.join(sorted(known))}")
    else:
        names = list(known)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        bundle = _bundle_dir(args.out, started, target["backend"])
    except OSError as exc:
        raise UsageError(f"--out {args.out} is not writable ({exc.strerror or exc}); choose another folder") from None
    print(f"nightly bundle: {bundle} ({target['backend']}, {target['device_model']}; {rows:,} rows per check, seed {args.seed})")

    common = ["--rows", str(rows), "--seed", str(args.seed), "--quiet"] + (["--device", args.device] if args.device else [])
    candidates = {}
    for name in names:
        folder = bundle / "candidates" / _safe(name)
        candidates[name] = _run_check(name, ["--candidate", name, "--out", str(folder), *common], folder, bundle)

    pairs = {}
    for pair in PAIRS:
        skip = _pair_record(pair, target["backend"], known)
        if skip is None and args.candidates and not {pair.candidate, pair.against} <= set(names):
            skip = "not among --candidates"
        if skip is None and (candidates.get(pair.candidate) or {}).get("status") == "unavailable":
            skip = f"{pair.candidate} is unavailable here: {candidates[pair.candidate].get('reason')}"
        if skip is None and (candidates.get(pair.against) or {}).get("status") == "unavailable":
            skip = f"{pair.against} is unavailable here: {candidates[pair.against].get('reason')}"
        base = {"candidate": pair.candidate, "against": pair.against, "exact": pair.exact, "why": pair.why}
        if skip:
            pairs[pair.label] = {**base, "status": "skipped", "reason": skip}
            continue
        folder = bundle / "pairs" / f"{_safe(pair.candidate)}--vs--{_safe(pair.against)}"
        device = args.device or ("cuda" if gpu else "cpu")
        argv = ["--candidate", pair.candidate, "--against", pair.against, "--out", str(folder), *common]
        if not args.device:
            argv += ["--device", device]
        if pair.exact:
            argv.append("--exact")
        record = _run_check(pair.label, argv, folder, bundle)
        if record.get("status") == "unavailable":
            record = {**record, "status": "skipped"}
        pairs[pair.label] = {**base, **record}

    ran = [n for n, r in candidates.items() if r.get("status") in ("pass", "fail") or (r.get("summary") or {}).get("rows_checked")]
    probe = _run_probe(ran, args.device, args.seed, bundle) if args.probe else {"status": "skipped", "reason": "--no-probe"}
    bench = _run_bench(ran, args.device, args.seed, bundle, args.bench, gpu)

    from .junit import entries_for_bundle, write_junit

    envelope = {
        "schema_version": NIGHTLY_SCHEMA_VERSION,
        "kind": "router-contracts-nightly",
        "name": bundle.name,
        "suite": {"name": PACKAGE, "version": _suite_version(), "git_commit": git_commit()},
        "started": _iso(started),
        "finished": None,
        "duration_s": None,
        "command": argv_text,
        "options": {"rows": rows, "seed": args.seed, "device": args.device, "candidates": args.candidates},
        "execution_target": target,
        "totals": {},
        "candidates": candidates,
        "pairs": pairs,
        "probe": probe,
        "bench": bench,
        "junit": "junit.xml",
        "comparison": None,
        "upload": None,
    }
    statuses = [r.get("status") for r in (*candidates.values(), *pairs.values())]
    envelope["totals"] = {s: statuses.count(s) for s in ("pass", "fail", "error", "unavailable", "skipped")}
    write_json(bundle / "nightly.json", envelope)  # the diff and JUnit read it; rewritten below
    entries, tools = entries_for_bundle(bundle)
    write_junit(bundle / "junit.xml", entries, tools)

    if args.compare_previous:
        envelope["comparison"] = _compare(bundle, target, args.upload, args.latency_threshold)
    destination = None
    if args.upload:
        from .upload import dated_destination

        destination = dated_destination(args.upload, bundle.name)
        envelope["upload"] = {"destination": destination}
    finished = _now()
    envelope["finished"] = _iso(finished)
    envelope["duration_s"] = round(time.perf_counter() - clock, 1)
    write_json(bundle / "nightly.json", envelope)

    print(f"\nnightly: {bundle}  ({', '.join(f'{k} {v}' for k, v in envelope['totals'].items() if v)}); junit: {bundle / 'junit.xml'}")
    if args.upload:
        from .upload import UploadError, upload_bundle

        try:
            upload_bundle(bundle, args.upload)
        except UploadError as exc:
            print(f"error: upload failed: {exc}", file=sys.stderr)
            return EXIT_UPLOAD
    regressed = (envelope["comparison"] or {}).get("status") == "regression"
    failed = any(s in ("fail", "error") for s in statuses)
    if args.fail_on == "regression" and regressed or args.fail_on == "failure" and (regressed or failed):
        return EXIT_FAIL
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    return run_command("contracts.nightly", argv, build_parser, _run)


if __name__ == "__main__":
    raise SystemExit(main())
