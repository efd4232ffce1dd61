"""The nightly: check everything this host can run, in one dated bundle (``python -m contracts nightly``).

What runs, each through the library (never another command's ``main``):

1. a check of every registered candidate (``candidates`` picks some), each
   in ``candidates/<name>/``; one unavailable here is recorded with its reason.
2. checks ``--against`` for the pairs that make sense on this host
   (``pairs/<a>--vs--<b>/``): radix4 vs aiter on ROCm, serial vs block-argmax
   with ``--exact`` on NVIDIA, aiter vs aiter-model wherever aiter runs. A
   pair that does not apply is recorded as skipped, with why.
3. the probe (the tie order each candidate follows) in ``probe/<name>/``,
   and the bench (latency per launch) in ``bench/``. The bench runs by
   default only on a GPU host: CPU wall-clock figures on a shared machine
   are too noisy for a night-to-night diff (``bench=True`` forces it).
4. ``junit.xml``, and with ``compare_previous`` the regression diff against
   the newest earlier bundle of the same execution target (``diff.md``,
   ``diff.json``), looked up at the upload URL, or beside the bundle when
   there is no URL.
5. ``nightly.json``, the versioned envelope, written last; then, with an
   upload URL, the bundle is copied to ``URL/YYYY/MM/DD/<name>/`` and verified.
   Before that, earlier uploads that were interrupted (objects at the URL but
   no ``nightly.json``) are resumed when their bundle is still under ``out``,
   and listed in ``nightly.json``'s ``upload.incomplete`` otherwise.

The bundle is ``out/nightly-<UTC time>-<backend>``; the backend (cpu,
cuda, rocm) keeps the bundles of a CI matrix apart. Rows per check: 250,000
on a GPU host, 50,000 on a CPU-only one. A SIGINT/SIGTERM stops the check
in progress after its current case (its bundle keeps what ran, status
``interrupted``), skips what was not started, and still writes the envelope,
JUnit and totals, so the stop is visible everywhere.

``contract`` (``nightly --contract NAME``, as ``check --contract``: a
built-in name or a contract file) checks, pairs, probes and benches every
candidate under that contract; without it each candidate is checked under
its own, and a ``module:attr`` router, which claims none, under aiter (the
line of its check says so). Every line the nightly prints names the
contract.

``nightly_gate`` is the exit decision: with ``fail_on="regression"`` a
regression found by the diff fails the night, and so does a night with
nothing to compare against (no ``compare_previous``, no earlier bundle, or
one that could not be read) on any check that did not pass (fail, error,
not covered, interrupted) or any bench point that is an error: with nothing
to regress from, the night's own verdicts are the gate.

Under torchrun (``world``), every rank runs each check on its shard and
rank 0 writes each check's bundle with all ranks' counts; the probe, the
bench, JUnit, the diff, the envelope and the upload are rank 0's alone.
"""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.metadata
import platform
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..candidates import all_candidates, get_candidate
from ..reports._atomic import write_json, write_text
from ..reports.diff import status_regressed
from ..reports.environment import environment, git_commit
from ..reports.json_records import to_json
from ..reports.schema import NightlyEnvelope
from ..reports.text import clean
from .checks import bundle_dirname, run_checks
from .world import ONE_PROCESS
from .options import OptionError

__all__ = ["CPU_ROWS", "GPU_ROWS", "NIGHTLY_SCHEMA_VERSION", "PAIRS", "NightlyRun", "Pair", "execution_target", "nightly_gate", "run_nightly"]

NIGHTLY_SCHEMA_VERSION = 1
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
# Our kernels first in the bench, so the table's ratios read against radix4.
BENCH_ORDER = ("radix4", "block-argmax", "serial", "aiter", "torch-native", "aiter-model")


@dataclass
class NightlyRun:
    bundle: Path
    envelope: NightlyEnvelope
    regressed: bool
    failed: bool
    interrupted: str | None
    upload_error: str | None = None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


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


def _tool(module: str, attr: str):
    """``module.attr`` if the module is in this checkout, else None (the envelope then says so)."""
    try:
        return getattr(importlib.import_module(module), attr, None)
    except ImportError:
        return None


def _contract_words(contract: str | None, name: str) -> str:
    """The contract a check of ``name`` runs under, in words for its console line."""
    if contract:
        return f"contract {contract}"
    known = all_candidates().get(name)
    if known is not None:
        return f"contract {known.contract}"
    return "contract aiter (assumed: a module:attr router claims none; nightly --contract NAME for another)"


def _check_record(label: str, folder: Path, bundle: Path, command: str, run: Callable, contract_words: str) -> dict:
    """One check of the nightly, and one line saying how it ended (printed after it: the check itself prints nothing
    here), naming the contract it was checked under (the summary's, when there is one)."""
    record = _run_check_record(folder, bundle, command, run)
    summary = record.get("summary") or {}
    rows = summary.get("rows_checked")
    if summary.get("contract") and summary["contract"] not in contract_words:
        contract_words = f"contract {summary['contract']}"
    raised = summary.get("raised_rows") or 0
    counted = (f", {rows:,} rows" + (f" ({rows - raised:,} answered: the calls of the rest raised)" if raised else "")) if rows is not None else ""
    print(f"check {label} [{contract_words}]: {record['status']}{counted}"
          + (f" ({record['reason']})" if record.get("reason") else ""), flush=True)  # fmt: skip
    if summary.get("top_reason") and record["status"] in ("fail", "error"):  # the reason on the console, not only in report.md
        print(f"  why: {clean(summary['top_reason'])}", flush=True)
    return record


def _run_check_record(folder: Path, bundle: Path, command: str, run: Callable) -> dict:
    record = {"bundle": folder.relative_to(bundle).as_posix(), "command": command}
    try:
        checked = run()
    except OptionError as exc:
        return {**record, "status": "error", "reason": str(exc)}
    except Exception as exc:  # a crash of the harness for one check must not lose the others
        return {**record, "status": "error", "reason": f"the check raised {type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=5)[-4000:]}  # fmt: skip
    if not checked.results:
        return {**record, "status": "interrupted", "reason": f"not started: the nightly was interrupted ({checked.interrupted or 'signal'})"}
    summary = checked.results[0].summary
    record["status"] = summary.status.value
    if summary.reason:
        record["reason"] = summary.reason
    record["summary"] = {k: v for k, v in to_json(summary).items() if k != "environment"}
    return record


def _pair_skip(pair: Pair, backend: str, known: dict, names: list[str], chosen: bool, candidates: dict) -> str | None:
    """Why the pair is skipped here, or None to run it."""
    missing = [n for n in (pair.candidate, pair.against) if n not in known]
    if missing:
        return f"candidate {', '.join(map(repr, missing))} is not registered here"
    if pair.backends and backend not in pair.backends:
        return f"only on {'/'.join(pair.backends)} hosts (this host: {backend})"
    if chosen and not {pair.candidate, pair.against} <= set(names):
        return "not among --candidate"
    for name in (pair.candidate, pair.against):
        if (candidates.get(name) or {}).get("status") == "unavailable":
            return f"{name} is unavailable here: {candidates[name].get('reason')}"
    return None


def _probes(names: list[str], device: str | None, seed: int, bundle: Path, stop, contract: str | None = None) -> dict:
    run_probe = _tool("contracts.run.probe", "run_probe")
    if run_probe is None:
        return {"status": "not available", "reason": "probe not available (contracts.probe is not in this checkout)"}
    from .checks import device_for

    runs = {}
    for name in names:
        if stop():
            runs[name] = {"status": "skipped", "reason": f"the nightly was interrupted ({stop()})"}
            continue
        folder = bundle / "probe" / bundle_dirname(name)
        print(f"\n== probe {name} [{_contract_words(contract, name)}] ==", flush=True)
        run = {"command": f"python -m contracts probe --candidate {name} --out {folder} --seed {seed}" + (f" --device {device}" if device else "")
               + (f" --contract {contract}" if contract else "")}  # fmt: skip
        try:
            candidate = get_candidate(name)
            done = run_probe(candidate, out=folder, device=device_for(candidate, device), seed=seed, command=run["command"], contract=contract)
        except Exception as exc:  # noqa: BLE001 -- one probe must not lose the others
            runs[name] = {**run, "status": "error", "reason": f"the probe raised {type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc(limit=5)[-4000:]}  # fmt: skip
            continue
        doc = done.doc
        run.update(path=done.path.relative_to(bundle).as_posix(), status=doc.get("status"), matches=doc.get("matches"),
                   consistent=doc.get("consistent"), error=doc.get("error"))  # fmt: skip
        if done.status == "unavailable":
            run["reason"] = done.reason
        runs[name] = run
    return {"status": "ok", "runs": runs}


def _bench(names: list[str], device: str | None, seed: int, bundle: Path, wanted: bool | None, gpu: bool, contract: str | None = None) -> dict:
    if wanted is None and not gpu:
        return {"status": "skipped", "reason": "no GPU: CPU wall-clock latencies on a shared host are too noisy to diff night to night (--bench runs it anyway)"}
    if wanted is False:
        return {"status": "skipped", "reason": "--no-bench"}
    run_bench = _tool("contracts.run.bench", "run_bench")
    if run_bench is None:
        return {"status": "not available", "reason": "bench not available (contracts.bench is not in this checkout)"}
    from .bench import write_bench
    from .bench_options import BenchOptions, options_for_contract

    if contract and contract.endswith(".toml"):
        return {"status": "skipped", "reason": f"bench takes a built-in contract's name, not a contract file ({contract})"}

    if gpu:
        # The oracle is a reference, not a router to time: on a GPU it cannot be
        # graph-captured and would only put every ratio against a slow baseline.
        names = sorted((n for n in names if n != "oracle"), key=lambda n: BENCH_ORDER.index(n) if n in BENCH_ORDER else len(BENCH_ORDER))
    if not names:
        return {"status": "skipped", "reason": "no candidate ran here"}
    folder = bundle / "bench"
    record = {"command": f"python -m contracts bench --candidate {','.join(names)} --out {folder} --seed {seed}" + (f" --device {device}" if device else "")
              + (f" --contract {contract}" if contract else "")}  # fmt: skip
    print(f"\n== bench [{f'contract {contract}' if contract else 'each candidate under its own contract'}] ==", flush=True)
    try:
        import torch

        options = options_for_contract(contract, seed=seed) if contract else BenchOptions(seed=seed)
        folder.mkdir(parents=True, exist_ok=True)
        report = run_bench([get_candidate(n) for n in names], options, device=device or ("cuda" if torch.cuda.is_available() else "cpu"),
                           command=record["command"], checkpoint=lambda so_far: write_json(folder / "bench.json", so_far))  # fmt: skip
        write_bench(folder, report)
    except Exception as exc:  # noqa: BLE001
        return {**record, "status": "error", "reason": f"the bench raised {type(exc).__name__}: {exc}", "traceback": traceback.format_exc(limit=5)[-4000:]}
    timed = any(p["status"] == "timed" for c in report["candidates"] for p in c["results"])
    record.update(status="ok" if timed and not report["errors"] else "error", path="bench/bench.json", errors=report["errors"])
    if report["errors"]:
        record["reason"] = f"{len(report['errors'])} bench point(s) are errors: " + "; ".join(
            f"{e['candidate']} M={e['m']}: {e['reason']}" for e in report["errors"][:3])  # fmt: skip
        print(f"bench [{f'contract {contract}' if contract else 'own contracts'}]: error: {record['reason']}", flush=True)
    elif not timed:
        record["reason"] = "no candidate could be timed on this host"
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
    from ..reports.bundle import BundleError, read_json

    if upload:
        from ..reports.upload import list_bundles, read_remote_json

        for remote in reversed(list_bundles(upload)):
            if remote.name >= bundle.name:
                continue
            try:
                doc = read_remote_json(remote.url + "/nightly.json")
            except (OSError, ValueError):
                continue
            if _same_target(doc.get("execution_target"), target):
                return remote.url, upload
        return None, upload
    for path in sorted(bundle.parent.glob("nightly-*/nightly.json"), reverse=True):
        if path.parent.name >= bundle.name:
            continue
        try:
            doc = read_json(path)
        except BundleError:
            continue
        if isinstance(doc, dict) and _same_target(doc.get("execution_target"), target):
            return str(path.parent), str(bundle.parent)
    return None, str(bundle.parent)


def _compare(bundle: Path, target: dict, upload: str | None, threshold: float, contract: str | None = None) -> dict:
    """The diff against the newest earlier bundle of this execution target (``reports.diff``: checks paired by what
    they checked; nothing paired is a regression)."""
    from ..reports.diff import diff_bundles, load_bundle

    under = f"contract {contract}" if contract else "each candidate's own contract"
    try:
        previous, where = _previous_bundle(bundle, target, upload)
    except Exception as exc:
        print(f"\ncompare-previous [{under}]: could not list earlier bundles: {type(exc).__name__}: {exc}")
        return {"previous": None, "status": "error", "reason": f"could not list earlier bundles: {type(exc).__name__}: {exc}"}
    if previous is None:
        print(f"\ncompare-previous [{under}]: no earlier bundle for this execution target under {where}")
        return {"previous": None, "status": "no previous", "reason": f"no earlier bundle for this execution target under {where}"}
    try:
        result = diff_bundles(load_bundle(previous), load_bundle(bundle), latency_threshold=threshold)
    except ValueError as exc:
        print(f"\ncompare-previous [{under}]: could not read a bundle: {exc}")
        return {"previous": previous, "status": "error", "reason": f"could not read a bundle: {exc}"}
    text = result.render()
    print(f"\ncompare-previous [{under}]: {previous}: {result.paired} check(s) paired" + (", NOTHING PAIRS" if result.nothing_pairs else ""))
    print(text, end="")
    write_json(bundle / "diff.json", result.to_dict())
    write_text(bundle / "diff.md", "# Regression diff against the previous nightly\n\n```\n" + text + "```\n")
    return {"previous": previous, "status": "regression" if result.regressed else "no regression", "regressions": result.regressions,
            "changes": len(result.changes), "paired": result.paired, "nothing_pairs": result.nothing_pairs, "report": "diff.md"}  # fmt: skip


def _earlier_uploads(url: str, bundle: Path, stop) -> dict:
    """Interrupted uploads under ``url``: resumed when their bundle is still beside this one, listed otherwise."""
    from ..reports.upload import UploadError, list_incomplete_uploads, upload_bundle

    try:
        incomplete = list_incomplete_uploads(url)
    except Exception as exc:  # noqa: BLE001 -- listing is advice; it must not cost the night's upload
        return {"incomplete_error": f"could not list incomplete uploads: {type(exc).__name__}: {exc}"}
    resumed, left = [], []
    for remote in incomplete:
        local = bundle.parent / remote.name
        if not stop() and remote.name != bundle.name and (local / "nightly.json").exists():
            print(f"\nresuming the interrupted upload of {local} to {remote.url}", flush=True)
            try:
                upload_bundle(local, url)
                resumed.append(remote.url)
                continue
            except UploadError as exc:
                print(f"  resuming failed: {exc}", flush=True)
        left.append(remote.url)
    if left:
        print(f"\nincomplete uploads under {url} (interrupted; no nightly.json there):", *(f"  {u}" for u in left), sep="\n", flush=True)
    return {"resumed": resumed, "incomplete": left}


def _names(candidates: list[str] | None, known: dict) -> list[str]:
    if not candidates:
        return list(known)
    unknown = [n for n in candidates if n not in known and ":" not in n]
    if unknown:
        raise OptionError(f"--candidate: unknown {', '.join(map(repr, unknown))}; known: {', '.join(sorted(known))}")
    return list(candidates)


def run_nightly(
    *,
    out: Path = Path("reports"),
    upload: str | None = None,
    rows: int | None = None,
    seed: int = 0,
    device: str | None = None,
    candidates: list[str] | None = None,
    compare_previous: bool = False,
    latency_threshold: float = 0.10,
    probe: bool = True,
    bench: bool | None = None,
    command: str = "",
    stop: Callable[[], object] | None = None,
    world=ONE_PROCESS,
    logits: Path | None = None,
    logits_bias: Path | None = None,
    contract: str | None = None,
    progress: bool = True,
) -> NightlyRun:
    """Run the nightly (see the module docstring) and write its bundle under ``out``. ``logits`` (``logits_bias``):
    every check runs on the rows of a captured logits file instead of the families (``check --logits``); ``progress``:
    the checks' progress bar or lines (each check's one closing line is printed either way)."""
    import torch

    stop = stop or (lambda: None)
    started, clock = _now(), time.perf_counter()
    gpu = torch.cuda.is_available() and device != "cpu"
    target = execution_target("cuda" if gpu else "cpu")
    rows = rows or (GPU_ROWS if gpu else CPU_ROWS)
    known = all_candidates()
    names = _names(candidates, known)
    if world.writer:
        try:
            out.mkdir(parents=True, exist_ok=True)
            bundle = _bundle_dir(out, started, target["backend"])
        except OSError as exc:
            raise OptionError(f"--out {out} is not writable ({exc.strerror or exc}); choose another directory") from None
        print(f"nightly bundle: {bundle} ({target['backend']}, {target['device_model']}; {rows:,} rows per check, seed {seed}; "
              f"{f'contract {contract}' if contract else 'each candidate under its own contract'})")  # fmt: skip
    else:
        bundle = out / f"rank-{world.rank}"  # never made: only names the checks' folders, which rank 0 writes
    common = dict(rows=rows, seed=seed, device=device, progress=progress and world.writer, stop=stop, world=world, logits=logits,
                  logits_bias=logits_bias, contract=contract)  # fmt: skip
    checked = _candidate_checks(names, bundle, common)
    pairs = _pair_checks(bundle, common, backend=target["backend"], known=known, names=names, chosen=bool(candidates), checked=checked, gpu=gpu)
    if not world.writer:
        envelope = NightlyEnvelope(name=bundle.name, candidates=checked, pairs=pairs)
        return NightlyRun(bundle, envelope, regressed=False, failed=False, interrupted=str(stop()) if stop() else None)
    ran = [n for n, r in checked.items() if r.get("status") in ("pass", "fail") or (r.get("summary") or {}).get("rows_checked")]
    probes = _probes(ran, device, seed, bundle, stop, contract) if probe else {"status": "skipped", "reason": "--no-probe"}
    benched = _bench(ran, device, seed, bundle, bench, gpu, contract) if not stop() else {"status": "skipped", "reason": f"the nightly was interrupted ({stop()})"}

    envelope = NightlyEnvelope(
        name=bundle.name, started=_iso(started), command=command, schema_version=NIGHTLY_SCHEMA_VERSION,
        suite={"name": PACKAGE, "version": _suite_version(), "git_commit": git_commit()},
        options={"rows": rows, "seed": seed, "device": device, "candidates": ",".join(candidates) if candidates else None, "contract": contract,
                 **({"world_size": world.world_size} if world.world_size > 1 else {})},
        execution_target=target, candidates=checked, pairs=pairs, probe=probes, bench=benched,
    )  # fmt: skip
    return _finish(envelope, bundle, clock, stop, upload=upload, compare_previous=compare_previous, latency_threshold=latency_threshold,
                   contract=contract)  # fmt: skip


def _reran(common: dict) -> str:
    """The options every check of the nightly shares that its command lines must repeat (the file, the contract)."""
    logits, logits_bias, contract = common["logits"], common["logits_bias"], common["contract"]
    return (f" --logits {logits}" if logits else "") + (f" --bias {logits_bias}" if logits_bias else "") + (f" --contract {contract}" if contract else "")


def _candidate_checks(names: list[str], bundle: Path, common: dict) -> dict[str, dict]:
    """Each candidate's check, a bundle under ``candidates/``: its record by name."""
    rows, seed, device, contract = common["rows"], common["seed"], common["device"], common["contract"]
    checked = {}
    for name in names:
        folder = bundle / "candidates" / bundle_dirname(name)
        line = f"python -m contracts check --candidate {name} --rows {rows} --seed {seed} --out {folder}" + (f" --device {device}" if device else "") + _reran(common)
        checked[name] = _check_record(name, folder, bundle, line, lambda name=name, folder=folder, line=line: run_checks([name], out=folder, command=line, **common),
                                      _contract_words(contract, name))  # fmt: skip
    return checked


def _pair_checks(bundle: Path, common: dict, *, backend: str, known: dict, names: list[str], chosen: bool, checked: dict,
                 gpu: bool) -> dict[str, dict]:  # fmt: skip
    """Each of ``PAIRS`` checked against each other (``--against``), a bundle under ``pairs/``, or skipped with why."""
    rows, seed, device, contract = common["rows"], common["seed"], common["device"], common["contract"]
    pairs = {}
    for pair in PAIRS:
        base = {"candidate": pair.candidate, "against": pair.against, "exact": pair.exact, "why": pair.why}
        skip = _pair_skip(pair, backend, known, names, chosen, checked)
        if skip:
            pairs[pair.label] = {**base, "status": "skipped", "reason": skip}
            continue
        folder = bundle / "pairs" / f"{bundle_dirname(pair.candidate)}--vs--{bundle_dirname(pair.against)}"
        pair_device = device or ("cuda" if gpu else "cpu")
        line = (f"python -m contracts check --candidate {pair.candidate} --against {pair.against} --rows {rows} --seed {seed} "
                f"--device {pair_device} --out {folder}" + (" --exact" if pair.exact else "") + _reran(common))  # fmt: skip
        record = _check_record(pair.label, folder, bundle, line, lambda pair=pair, folder=folder, line=line: run_checks(
            [pair.candidate], against=pair.against, exact=pair.exact, out=folder, command=line, **{**common, "device": pair_device}),
            _contract_words(contract, pair.candidate))  # fmt: skip
        if record.get("status") == "unavailable":
            record = {**record, "status": "skipped"}
        pairs[pair.label] = {**base, **record}
    return pairs


def _finish(envelope: NightlyEnvelope, bundle: Path, clock: float, stop, *, upload, compare_previous, latency_threshold,
            contract: str | None = None) -> NightlyRun:  # fmt: skip
    """Totals, JUnit, the diff, the envelope (last), the upload."""
    from ..reports.junit import entries_for_bundle, write_junit

    statuses = [r.get("status") for r in (*envelope.candidates.values(), *envelope.pairs.values())]
    envelope.totals = {s: statuses.count(s) for s in ("pass", "fail", "error", "interrupted", "not_covered", "unavailable", "skipped")}
    envelope.interrupted = str(stop()) if stop() else None
    write_json(bundle / "nightly.json", to_json(envelope))  # the diff and JUnit read it; rewritten below
    entries, tools = entries_for_bundle(bundle)
    write_junit(bundle / "junit.xml", entries, tools)
    if compare_previous:
        envelope.comparison = _compare(bundle, envelope.execution_target, upload, latency_threshold, contract)
    if upload:
        from ..reports.upload import dated_destination

        envelope.upload = {"destination": dated_destination(upload, bundle.name), **_earlier_uploads(upload, bundle, stop)}
    envelope.finished = _iso(_now())
    envelope.duration_s = round(time.perf_counter() - clock, 1)
    write_json(bundle / "nightly.json", to_json(envelope))
    upload_error = None
    if upload:
        from ..reports.upload import UploadError, upload_bundle

        try:
            upload_bundle(bundle, upload)
        except UploadError as exc:
            upload_error = str(exc)
    regressed = (envelope.comparison or {}).get("status") == "regression"
    # no rows checked is no pass; a bench point that is an error is a broken router, not a figure
    failed = bool(_not_passed(envelope))
    return NightlyRun(bundle, envelope, regressed, failed, envelope.interrupted, upload_error)


def _not_passed(envelope: NightlyEnvelope) -> list[str]:
    """The checks (and bench points, probes) of a night that did not pass, as ``label status`` words: a check whose
    status is worse than pass (``reports.diff.STATUS_RANK``) other than one that could not run here (unavailable,
    skipped), every bench point that is an error, and every probe that errored."""
    said = [f"{label} {r.get('status')}" for label, r in (*envelope.candidates.items(), *envelope.pairs.items())
            if status_regressed("pass", r.get("status")) and r.get("status") not in ("unavailable", "skipped")]  # fmt: skip
    said += [f"bench {e['candidate']} M={e['m']} error" for e in envelope.bench.get("errors") or ()]
    said += [f"probe {name} error" for name, run in (envelope.probe.get("runs") or {}).items() if run.get("status") == "error"]
    return said


def nightly_gate(done: NightlyRun, fail_on: str) -> tuple[bool, str | None]:
    """Whether the night fails under ``fail_on`` (regression, failure, never), and the one line that says why.

    ``regression``: a regression found by the diff; and, when there is nothing to compare against (no comparison,
    no earlier bundle, or one that could not be read), any check that did not pass or bench point that errored."""
    if fail_on == "never":
        return False, None
    contract = done.envelope.options.get("contract")
    under = f"contract {contract}" if contract else "each candidate's own contract"
    if done.regressed:
        regressions = (done.envelope.comparison or {}).get("regressions") or []
        return True, f"error: {len(regressions)} regression(s) against the previous night [{under}] (diff.md lists them)"
    not_passed = _not_passed(done.envelope)
    if fail_on == "failure" and done.failed:
        return True, f"error: {len(not_passed)} check(s) did not pass [{under}]: {', '.join(not_passed[:6])}"
    comparison = done.envelope.comparison or {}
    if comparison.get("status") not in ("regression", "no regression") and not_passed:
        why = comparison.get("reason") or "--compare-previous was not given"
        return True, (f"error: nothing to compare against ({why}), so the night's own verdicts gate it [{under}]: "
                      f"{len(not_passed)} did not pass: {', '.join(not_passed[:6])}{' ...' if len(not_passed) > 6 else ''}")  # fmt: skip
    return False, None
