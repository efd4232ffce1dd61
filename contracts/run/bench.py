"""Latency per launch of router candidates against batch size M (``python -m contracts bench``).

Examples::

    python -m contracts bench --candidate oracle,torch-native
    python -m contracts bench --candidate radix4,torch-native,serial,block-argmax,aiter-model --device cuda --out DIR

How a figure is taken (``method`` in bench.json says the same):

- GPU (``--device cuda``): each candidate's route is captured ``--launches``
  times (default 20) in one CUDA graph, after 3 eager warm-up calls on a side
  stream; the graph is replayed ``--warmup`` times untimed, then ``--replays``
  times (default 25) between CUDA events. One sample = replay time /
  launches. A candidate whose route cannot be captured (it synchronizes,
  copies from the host, ...) is timed eagerly instead: ``--launches`` calls
  between two events per sample. Its points say ``timer: cuda-eager`` and why.
- CPU: wall-clock (``time.perf_counter``) per call. One sample is a loop of
  ``n`` calls divided by ``n``, ``n`` chosen once so a sample lasts >= 2 ms;
  ``--repeats`` samples (default 10) after 2 warm-up calls. Labelled
  "cpu wall-clock" in the JSON, the table and the plot.

Figures are the median over samples; the spread is min / p25 / p75 / p90 /
max over the same samples. Every candidate gets the same input tensors for a
given M (seeded ``--seed``; logits ``randn * 2`` in ``--dtype``, bias
``randn * 0.05`` in ``--bias-dtype``). Inputs are not rotated by default (one
buffer, which stays in cache as in a decode step); ``--rotate R`` cycles
through R distinct buffers instead.

An engine candidate (one with a bench path, ``Candidate.prepare_launch``) is
timed as its engine serves: what the engine does once at load (the bias
widened, outputs allocated, the kernel loaded) is done before the timer
starts, and the timed call makes only the launches the engine makes per
forward (docs/engines.md says which, per engine). On CUDA every point also
records ``launched``: how many kernels (and copies) one timed call launches,
read from torch.profiler's kernel list over a graph replay of one call, in a
pass after every timing (profiling slows the kernels launched after it). The
launch floor is timed first, before any candidate, and again at each M just
before that M's candidates: on the H200 an empty kernel timed after other
kernels have run took 0.83-0.85 us against 0.66-0.68 at the start of a run, so
a point is also read above the floor of its own M.

Each candidate is resolved with the registry, gated with ``available(device)``
(an unavailable candidate is listed with its reason) and, per M, with
``covered(...)`` (an uncovered M is recorded as skipped, not timed).

A point is timed only for an answer: before timing, the call that will be
timed is made once per input buffer (twice at least), and as often after
the timing, and
each answer must be what a check accepts (``bench_point.answer_problem``: a (weights,
ids) pair of contiguous [M, k] tensors, fp32 and int32 on the inputs'
device, or a dense (probs, routing_map) answer, ``contracts.compare.dense``;
an engine's launch returns its engine's dtypes, so only the pair and the
shape are required of it). A candidate that raises, answers something else or
calls ``sys.exit`` / ``os._exit`` during any of its calls is an ``error``
point with the reason; the run goes on. ``bench.json`` lists every error
point (``errors``) and says ``status: error``; ``python -m contracts bench``
then exits 1. While it runs, ``checkpoint`` (the command's: ``bench.json``)
receives the report so far before each candidate's code runs, with
``status: incomplete`` and ``in_progress`` naming the candidate and M: a
candidate that ends the process past the fence (libc ``_exit``, a crash)
leaves a ``bench.json`` that says where, and the command's supervisor exits 1.

``run_bench`` returns the report; ``write_bench`` writes ``bench.json`` and
``bench.png`` (latency vs M, log-log, crossovers of each candidate with the
first one marked).

The options are ``contracts.run.bench_options``; one candidate's point at one M is
``contracts.run.bench_point``; the crossovers, curves, table and plot are
``contracts.run.bench_results``.
"""

from __future__ import annotations

import datetime as dt
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from kernels.timing import HOLD_CYCLES, time_cuda

from ..candidates import Candidate
from ..reports._atomic import write_json
from ..reports.environment import environment
from .bench_options import DTYPES, BenchOptions, races_under_its_own
from .bench_point import CPU_SAMPLE_SECONDS, CandidateFailed, bench_point, count_kernels, fenced, harness_fault, harness_point, make_inputs
from .bench_results import crossovers, curve, write_plot

__all__ = ["BENCH_SCHEMA_VERSION", "count_launched", "launch_floor", "pdl_note", "run_bench", "with_pdl_columns", "write_bench"]

BENCH_SCHEMA_VERSION = 1
CPU_LABEL = "cpu wall-clock"
GRAPH_LABEL = "CUDA graph replay"


def launch_floor(args: BenchOptions, device: str) -> float | None:
    """On CUDA, the median us per launch of a kernel that does nothing (``torch.cuda._sleep(0)``), timed as the
    candidates are: the host's floor, which no candidate can go under. Two hosts' tables differ by at least
    the difference of their floors. None off CUDA (the CPU timer has no launch)."""
    if not device.startswith("cuda"):
        return None
    with torch.cuda.device(device):
        timing = time_cuda(lambda: torch.cuda._sleep(0), args.launches, args.replays, args.warmup)
    return statistics.median(timing.samples_us)


def count_launched(launchers: list) -> None:
    """Record in each timed point what one call launched (``count_kernels``). Run after all timings: profiling
    attaches CUPTI to the context, and kernels timed after that were seen to take up to 0.8 us longer on the H200."""
    for point, fn in launchers:
        point["launched"] = count_kernels(fn, graph=point.get("timer") == "cuda-graph")


def _method(args: BenchOptions, device: str) -> dict:
    bias_dtype = args.dtype if args.bias_dtype == "same" else args.bias_dtype
    inputs = (
        "not rotated: the same logits buffer for every launch (it stays in cache, as in a decode step)"
        if args.rotate == 1
        else f"rotated: {args.rotate} distinct logits buffers, cycled launch by launch"
    )
    common = {
        "contract": args.contract or "each candidate's own", "groups": [args.num_expert_group, args.topk_group],
        "dtype": args.dtype, "bias_dtype": bias_dtype if args.bias else None, "experts": args.experts, "topk": args.topk,
        "renormalize": args.renormalize, "routed_scaling_factor": args.routed_scaling_factor, "seed": args.seed,
        "rotate": args.rotate, "inputs": inputs + "; the same tensors for every candidate (logits randn*2, bias randn*0.05); one bias for "
                  "every M, and a batch's rows are the first M rows of every larger batch's (make_inputs)",
        "statistic": "median over samples; spread min/p25/p75/p90/max over the same samples",
        "path": "an engine candidate is timed through its bench path (path 'engine launch'): prepared once, untimed, "
                "as the engine prepares at load (bias dtype, layouts, outputs), then only the launches the engine makes "
                "per forward (docs/engines.md); others through route (path 'route')",
    }  # fmt: skip
    if device.startswith("cuda"):
        return {
            "timer": GRAPH_LABEL,
            "description": f"{args.launches} launches captured in one CUDA graph (after 3 eager warm-up calls), "
            f"{args.warmup} untimed replays, then {args.replays} replays between CUDA events, each behind an untimed "
            f"spin kernel of {HOLD_CYCLES} cycles so that the host's submission is not timed; sample = replay time / "
            f"{args.launches}. A route that cannot be captured is timed eagerly ({args.launches} calls between events "
            "per sample) and its points say timer cuda-eager.",
            "launches_per_graph": args.launches, "replays": args.replays, "warmup_replays": args.warmup,
            "launched": "per point, the kernels (and copies/memsets) one timed call launches, read from torch.profiler's "
                        "kernel list over one replay of a graph capturing one call", **common,
        }  # fmt: skip
    return {
        "timer": CPU_LABEL,
        "description": f"{CPU_LABEL}: time.perf_counter around a loop of n calls (n chosen so a sample lasts >= "
        f"{CPU_SAMPLE_SECONDS * 1e3:g} ms), sample = elapsed / n; 2 warm-up calls; {args.repeats} samples.",
        "repeats": args.repeats, "torch_threads": torch.get_num_threads(), **common,
    }  # fmt: skip


# ---------------------------------------------------------------- the run


def with_pdl_columns(candidates: list[Candidate], device: str) -> list[Candidate]:
    """``candidates``, each followed on CUDA by its PDL variant (``Candidate.pdl_variant``) unless already listed."""
    if not device.startswith("cuda"):
        return list(candidates)
    from ..candidates import get_candidate

    names = {c.name for c in candidates}
    out = []
    for cand in candidates:
        out.append(cand)
        if cand.pdl_variant and cand.pdl_variant not in names:
            out.append(get_candidate(cand.pdl_variant))
            names.add(cand.pdl_variant)
    return out


def pdl_note(candidates: list[Candidate], device: str) -> str | None:
    """Which columns are PDL launches, and that the others are timed without PDL (they have no PDL launch)."""
    if not device.startswith("cuda"):
        return None
    variants = {c.pdl_variant for c in candidates if c.pdl_variant}
    pdl = [c.name for c in candidates if c.name in variants]
    plain = [c.name for c in candidates if c.name not in variants and not c.pdl_variant]
    if not pdl and not variants:
        return "no candidate here has a PDL launch: every column is timed without programmatic dependent launch"
    text = f"PDL columns (programmatic dependent launch, next to the same kernel without it): {', '.join(pdl) or 'none available'}"
    return text + (f"; timed without PDL, having no PDL launch: {', '.join(plain)}" if plain else "")


@dataclass
class _Report:
    """The report as the run fills it: ``bench.json``'s content at any moment (``snapshot``), for the checkpoints and
    the end."""

    args: BenchOptions
    device: str
    command: str
    candidates: list[Candidate]
    environment: dict
    entries: list[dict] = field(default_factory=list)
    floor: float | None = None
    floors_by_m: dict[str, float] = field(default_factory=dict)  # and again before each M's candidates, in the state they run in
    faults: list[dict] = field(default_factory=list)  # the harness's own errors outside any one point (the curves, the crossovers)

    def snapshot(self, status: str, in_progress: dict | None = None) -> dict:
        entries, args, device, candidates = self.entries, self.args, self.device, self.candidates
        errors = [{"candidate": e["name"], "m": None, "reason": e["reason"]} for e in entries if e["status"] == "error"]
        errors += [{"candidate": e["name"], "m": p["m"], "reason": p["reason"], **({"kind": p["kind"]} if "kind" in p else {})}
                   for e in entries for p in e["results"] if p["status"] == "error"]  # fmt: skip
        errors += self.faults
        return {
            "schema_version": BENCH_SCHEMA_VERSION, "kind": "bench", "command": self.command,
            "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "status": "error" if errors and status == "ok" else status, "errors": errors,
            **({"in_progress": in_progress} if in_progress else {}),
            "device": device, "environment": self.environment,
            "method": {**_method(args, device), "pdl": pdl_note(candidates, device), "launch_floor_us": self.floor,
                       "launch_floor_by_m_us": self.floors_by_m or None},
            "m": list(args.m), "baseline": candidates[0].name if candidates else None, "candidates": entries,
            "crossovers": [], "curves": [],
        }  # fmt: skip


def run_bench(candidates: list[Candidate], options: BenchOptions, *, device: str, command: str = "", log=None,
              checkpoint: Callable[[dict], None] | None = None) -> dict:  # fmt: skip
    """Time every available candidate at every M (on CUDA, with its PDL variant beside it); the report (``bench.json``'s
    content), whose ``status`` is ``error`` when any point is (``errors`` lists them), else ``ok``. ``checkpoint``
    gets the report so far (``status: incomplete``, ``in_progress``) before each candidate's code runs."""
    log = log or (lambda text: print(text, file=sys.stderr))
    args = options
    candidates = with_pdl_columns(candidates, device)
    dtype = DTYPES[args.dtype]
    bias_dtype = dtype if args.bias_dtype == "same" else DTYPES[args.bias_dtype]
    report = _Report(args, device, command, candidates, environment(device))

    def running(cand: Candidate, doing: str, M: int | None = None) -> None:
        if checkpoint is not None:
            where = {"candidate": cand.name, "doing": doing, **({"m": M} if M is not None else {})}
            checkpoint(report.snapshot("incomplete", where))

    for cand in candidates:
        _gate(cand, report, running)
    usable = [(c, e) for c, e in zip(candidates, report.entries) if e["status"] == "ok"]
    report.floor = launch_floor(args, device)  # first: nothing run before it can slow it
    launchers: list | None = [] if device.startswith("cuda") else None
    for M in args.m:
        _points_at(M, usable, report, dtype=dtype, bias_dtype=bias_dtype, launchers=launchers, running=running, log=log)
    if launchers:
        count_launched(launchers)  # after every timing (see count_launched)
        launchers.clear()
    curves, found = _fitted(report)
    done = report.snapshot("ok")
    done["curves"], done["crossovers"] = curves, found
    return done


def _gate(cand: Candidate, report: _Report, running) -> None:
    """``cand``'s entry, added to the report before its gate runs: ``ok``, ``unavailable`` or (a gate that raised or
    exited) ``error``."""
    args, device = report.args, report.device
    entry = {"name": cand.name, "contract": args.contract or cand.contract, "status": "ok", "reason": None, "results": []}
    report.entries.append(entry)
    running(cand, "available()")
    try:
        ok, why = fenced(lambda: cand.available(device), "cpu")
    except CandidateFailed as exc:  # a gate that raises or exits is the candidate's error, not the run's
        ok, why = False, f"available() {exc}"
        entry["error"] = why
    if ok and args.contract and not cand.serves(args.contract):
        if races_under_its_own(cand, args.contract):
            # a kernel an engine serves this model's shape with, under the routing its own contract names (sglang's
            # Triton and FlashInfer's NoAuxTc for Kimi K2 follow aiter): the race users read, marked as such
            entry["contract"] = cand.contract
            entry["note"] = (f"follows contract {cand.contract}, not {args.contract}: timed on {args.contract}'s shape and call "
                             f"options under its own routing (contract {cand.contract})")  # fmt: skip
        else:  # another scoring, bias or grouping: not the same work, not a race
            ok, why = False, f"{cand.name} follows contract {cand.contract}, not {args.contract}, whose scoring, bias or groups differ"
    if not ok:
        entry.update(status="error" if "error" in entry else "unavailable", reason=why)


def _points_at(M: int, usable: list, report: _Report, *, dtype, bias_dtype, launchers: list | None, running, log) -> None:
    """Every usable candidate's point at ``M``, on the same inputs, after the launch floor of ``M`` is timed."""
    args, device = report.args, report.device
    try:
        inputs = make_inputs(M, experts=args.experts, dtype=dtype, bias_dtype=bias_dtype, device=device, seed=args.seed, rotate=args.rotate)
        if not args.bias:
            inputs = (inputs[0], None)
        if report.floor is not None and usable:
            report.floors_by_m[str(M)] = round(launch_floor(args, device), 4)
    except Exception as exc:  # noqa: BLE001 -- the harness's own fault at this M: every point there is its error
        for cand, entry in usable:
            entry["results"].append(harness_point(harness_fault(exc, f"making the inputs at M={M}", candidate=cand.name, M=M)))
        return
    for cand, entry in usable:
        running(cand, "bench point", M)
        try:
            route = cand.route_under(entry["contract"]) if args.contract and cand.serves(entry["contract"]) else cand.route
            point = bench_point(cand, route, M, inputs, args, device, launchers, contract=entry["contract"])
        except Exception as exc:  # noqa: BLE001 -- bench_point fences the candidate's code; what is left is the harness's
            point = harness_point(harness_fault(exc, f"the bench point of {cand.name} at M={M}", candidate=cand.name, M=M))
        entry["results"].append(point)
        shown = f"{point['median_us']:.2f} us" if point["status"] == "timed" else point["status"]
        log(f"  {cand.name:>16} [contract {entry['contract']}] M={M:<6} {shown}")
    del inputs


def _fitted(report: _Report) -> tuple[list[dict], list[dict]]:
    """The curves and the crossovers with the first candidate; a fault of the harness in either is listed, the timings stand."""
    entries = report.entries
    curves, found = [], []
    try:
        curves = [c for c in (curve(e, report.floor, report.floors_by_m) for e in entries if e["status"] == "ok") if c is not None]
    except Exception as exc:  # noqa: BLE001 -- the timings stand; the fitted curves are the harness's to get wrong
        report.faults.append(harness_fault(exc, "fitting the curves"))
    base = entries[0] if entries else None
    if base is not None and base["status"] == "ok":
        try:
            found = [x for other in entries[1:] if other["status"] == "ok" for x in crossovers(base, other)]
        except Exception as exc:  # noqa: BLE001 -- as the curves
            report.faults.append(harness_fault(exc, "finding the crossovers"))
    return curves, found

def write_bench(out: Path, report: dict) -> Path:
    """``bench.json`` and ``bench.png`` under ``out``; a plot the harness fails to draw is an error bench.json lists."""
    try:
        write_plot(Path(out) / "bench.png", report)
    except Exception as exc:  # noqa: BLE001 -- the timings are written whatever the plot does
        report["errors"].append(harness_fault(exc, "drawing bench.png"))
        report["status"] = "error"
    write_json(Path(out) / "bench.json", report)
    return Path(out)
