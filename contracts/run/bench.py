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
each answer must be what a check accepts (``answer_problem``: a (weights,
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
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pandas as pd
import torch

from kernels.timing import HOLD_CYCLES, Timing, time_cuda

from ..candidates import Candidate
from ..candidates.fenced_call import Fence as _Fence  # os._exit during a candidate's call raises CandidateExit instead
from ..compare.dense import read_answer
from ..compare.verdicts import validity_failure
from ..reports._atomic import write_atomic, write_json
from ..reports.environment import environment
from ..reports.schema import HARNESS_ERROR

__all__ = ["BENCH_SCHEMA_VERSION", "DEFAULT_M", "BenchOptions", "answer_problem", "count_kernels", "crossovers", "launcher", "launches_by_candidate",
           "options_for_contract", "results_table", "run_bench", "write_bench"]  # fmt: skip

BENCH_SCHEMA_VERSION = 1
DEFAULT_M = (1, 8, 64, 256, 1024, 1536, 4096)
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}
CPU_LABEL = "cpu wall-clock"
GRAPH_LABEL = "CUDA graph replay"
CPU_SAMPLE_SECONDS = 2e-3
CPU_MAX_CALLS_PER_SAMPLE = 1000
RENORMALIZE, ROUTED_SCALING_FACTOR = True, 2.5


@dataclass(frozen=True)
class BenchOptions:
    """How to time: the batch sizes, the inputs, and the timer's sample counts (see the module docstring)."""

    m: tuple[int, ...] = DEFAULT_M
    dtype: str = "bf16"
    bias_dtype: str = "same"
    experts: int = 896
    topk: int = 16
    replays: int = 25
    launches: int = 20
    warmup: int = 3
    repeats: int = 10
    rotate: int = 1
    seed: int = 0
    # The routing contract every candidate is timed under (None: each its own): a candidate that follows several
    # (radix4) routes it, one that does not serve it is listed unavailable. ``options_for_contract`` fills the rest.
    contract: str | None = None
    num_expert_group: int = 1  # a grouped contract's groups, passed to every route, gate and bench path
    topk_group: int = 1
    bias: bool = True  # False: the contract has no correction bias; every candidate gets bias=None
    renormalize: bool = RENORMALIZE
    routed_scaling_factor: float = ROUTED_SCALING_FACTOR

    @property
    def group_args(self) -> dict:
        """``num_expert_group`` / ``topk_group`` for a grouped contract, else nothing (as a check calls)."""
        return dict(num_expert_group=self.num_expert_group, topk_group=self.topk_group) if self.num_expert_group > 1 else {}


def options_for_contract(contract: str, **options) -> BenchOptions:
    """``BenchOptions`` that time every candidate under built-in contract ``contract``: its shape where ``options``
    give none, its groups, whether it has a bias, and call options it admits (renormalize and a scaling of 2.5 where
    it admits them). ValueError (one line) for a name that is not a built-in contract, or one whose calls take a
    per-expert scale (not benched)."""
    import oracle

    try:
        c = oracle.get_contract(contract)
    except Exception as exc:  # noqa: BLE001 -- the oracle's message names the choices
        raise ValueError(str(exc).splitlines()[0]) from None
    admitted = c.admitted_options()
    if admitted.get("expert_scale"):
        raise ValueError(f"contract {contract!r} calls its router with a per-expert weight scale, which bench does not draw; "
                         "time it under a contract without one (e.g. aiter)")  # fmt: skip
    renorm = admitted["renormalize"]
    factors = admitted["routed_scaling_factor"]
    options.setdefault("experts", c.experts)
    options.setdefault("topk", c.topk)
    groups = dict(num_expert_group=c.n_group, topk_group=c.topk_group) if c.is_grouped else {}
    return BenchOptions(contract=c.name, bias=c.has_bias, renormalize=RENORMALIZE if RENORMALIZE in renorm else renorm[0],
                        routed_scaling_factor=ROUTED_SCALING_FACTOR if factors is None or ROUTED_SCALING_FACTOR in factors else factors[0],
                        **groups, **options)  # fmt: skip


# ---------------------------------------------------------------- timers


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


def time_cpu(fn, repeats: int) -> Timing:
    fn()
    fn()
    start = time.perf_counter()
    fn()
    once = time.perf_counter() - start
    calls = max(1, min(CPU_MAX_CALLS_PER_SAMPLE, math.ceil(CPU_SAMPLE_SECONDS / max(once, 1e-9))))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) * 1e6 / calls)
    return Timing("cpu-wall-clock", samples, calls)


def launch_floor(args: BenchOptions, device: str) -> float | None:
    """On CUDA, the median us per launch of a kernel that does nothing (``torch.cuda._sleep(0)``), timed as the
    candidates are: the host's floor, which no candidate can go under. Two hosts' tables differ by at least
    the difference of their floors. None off CUDA (the CPU timer has no launch)."""
    if not device.startswith("cuda"):
        return None
    with torch.cuda.device(device):
        timing = time_cuda(lambda: torch.cuda._sleep(0), args.launches, args.replays, args.warmup)
    return statistics.median(timing.samples_us)


def _spread(samples: list[float]) -> dict:
    s = pd.Series(samples, dtype="float64")
    return {
        "min": round(float(s.min()), 4),
        "p25": round(float(s.quantile(0.25)), 4),
        "p75": round(float(s.quantile(0.75)), 4),
        "p90": round(float(s.quantile(0.90)), 4),
        "max": round(float(s.max()), 4),
    }


# ---------------------------------------------------------------- inputs and the run


INPUT_BLOCK_ROWS = 64  # the logits are drawn in blocks of rows, each from a seed of its own (make_inputs)


def make_inputs(M: int, *, experts: int, dtype, bias_dtype, device: str, seed: int, rotate: int):
    """``rotate`` distinct logits buffers [M, E] and one bias [E], the same for every candidate.

    One bias for every M, and the M rows of a buffer are the first M rows of that buffer at any larger M (blocks of
    INPUT_BLOCK_ROWS rows, each drawn from its own seed): a batch takes as long as its slowest token, and a few random
    rows take a kernel's slow path, so with other rows at every M a curve over M would rise and fall with where
    those rows fell. A larger batch holds every row of a smaller one."""
    bias = torch.randn(experts, generator=torch.Generator(device="cpu").manual_seed(seed * 1_000_003)) * 0.05
    blocks = -(-M // INPUT_BLOCK_ROWS)

    def rows(buffer: int) -> torch.Tensor:
        parts = [torch.randn(INPUT_BLOCK_ROWS, experts, generator=torch.Generator(device="cpu").manual_seed(
            (seed * 1_000_003 + 1 + buffer) * 100_003 + b)) for b in range(blocks)]  # fmt: skip
        return torch.cat(parts)[:M] * 2

    scores = [rows(k).to(dtype).to(device) for k in range(rotate)]
    return scores, bias.to(bias_dtype).to(device)


def _cycle(calls: list):
    if len(calls) == 1:
        return calls[0]
    state = {"i": 0}

    def call():
        fn = calls[state["i"] % len(calls)]
        state["i"] += 1
        return fn()

    return call


def _caller(route, scores: list, bias, topk: int, args: BenchOptions):
    call = (args.renormalize, args.routed_scaling_factor)
    return _cycle([lambda s=s: route(s, bias, topk, *call, **args.group_args) for s in scores])


def launcher(candidate: Candidate, route, scores: list, bias, topk: int, args: BenchOptions | None = None) -> tuple[object, str]:
    """The zero-argument call the timer times, and which path it is.

    A candidate with a bench path (``prepare_launch``: the engines) is prepared here, once per logits buffer and
    before any timing, as its engine prepares at load; the call is then only the launches the engine makes per
    forward ("engine launch"). Otherwise the call is ``route`` itself ("route"). A ``route`` other than the
    candidate's own (a test's wrapper) is timed as given.
    """
    args = args or BenchOptions()
    if candidate.prepare_launch is not None and route is candidate.route:
        call = (args.renormalize, args.routed_scaling_factor)
        prepared = [candidate.prepare_launch(s, bias, topk, *call, **args.group_args) for s in scores]
        return _cycle(prepared), "engine launch"
    return _caller(route, scores, bias, topk, args), "route"


def count_launched(launchers: list) -> None:
    """Record in each timed point what one call launched (``count_kernels``). Run after all timings: profiling
    attaches CUPTI to the context, and kernels timed after that were seen to take up to 0.8 us longer on the H200."""
    for point, fn in launchers:
        point["launched"] = count_kernels(fn, graph=point.get("timer") == "cuda-graph")


def count_kernels(fn, *, graph: bool) -> dict:
    """The device work one call of ``fn`` launches, read from torch.profiler's kernel list: replaying a graph that
    captured one call (``graph``), else one eager call. ``{"kernels": n, "copies": n, "names": [...], "counted_by": ...}``,
    or ``{"kernels": None, "counted_by": why}`` when the profiler saw nothing or failed."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    def events(run) -> list:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
        return [e for e in prof.events() if e.device_type == DeviceType.CUDA]

    try:
        if graph:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                fn()
            g.replay()
            torch.cuda.synchronize()
            seen, how = events(g.replay), "torch.profiler over one replay of a graph capturing one call"
            del g
        else:
            seen, how = [], ""
        if not seen:
            fn()
            torch.cuda.synchronize()
            seen = events(fn)
            how = "torch.profiler over one eager call" + (" (the graph replay showed no kernel)" if graph else "")
    except Exception as exc:  # noqa: BLE001 -- counting is a note on the figure, never a failure of the run
        return {"kernels": None, "counted_by": f"not counted: {_first_line(exc)}"}
    if not seen:
        return {"kernels": None, "counted_by": "not counted: the profiler saw no device activity"}
    copies = [e.name for e in seen if e.name.startswith(("Memcpy", "Memset"))]
    kernels = [e.name for e in seen if not e.name.startswith(("Memcpy", "Memset"))]
    return {"kernels": len(kernels), "copies": len(copies), "names": sorted({n[:80] for n in kernels}), "counted_by": how}


class _CandidateFailed(Exception):
    """A candidate's call raised, exited or answered something else: the point is an error with this reason."""

    def __init__(self, reason: str, tb: str | None = None):
        super().__init__(reason)
        self.tb = tb


def answer_problem(value, *, rows: int, topk: int, scores: torch.Tensor, engine: bool = False) -> str | None:
    """Why ``value`` is not an answer a check would take for ``rows`` rows (``compare.verdicts.validity_failure``:
    a (weights, ids) pair of [rows, topk] tensors, fp32 / int32, on the inputs' device), or None. ``engine``: the
    answer of an engine's launch, in its engine's dtypes, of which only the pair, the shape and the kinds (floating
    weights, integer ids) are asked."""
    if not engine:
        # a dense (probs, routing_map) answer as a check reads it (compare.dense): its tensors must be right as a whole
        value = read_answer(value, rows=rows, experts=scores.shape[-1], topk=topk, device=scores.device)
        if isinstance(value, str):
            return value
        problem = validity_failure(value, SimpleNamespace(spec=SimpleNamespace(rows=rows), topk=topk, scores=scores))
        if problem is None and not all(t.is_contiguous() for t in value):  # engines read the outputs by data pointer
            return f"outputs with strides {value[0].stride()} / {value[1].stride()}: not contiguous row-major [M, k] tensors"
        return problem
    if not (isinstance(value, (tuple, list)) and len(value) == 2 and all(isinstance(t, torch.Tensor) for t in value)):
        return f"returned {type(value).__name__}, not a (weights, ids) pair of tensors"
    w, ids = value
    if tuple(w.shape) != (rows, topk) or tuple(ids.shape) != (rows, topk):
        return f"shapes weights {tuple(w.shape)}, ids {tuple(ids.shape)}; expected {(rows, topk)}"
    if not w.is_floating_point() or ids.is_floating_point() or ids.is_complex() or ids.dtype == torch.bool:
        return f"dtypes weights {w.dtype}, ids {ids.dtype}; expected floating weights and integer ids"
    return None


def _fenced(fn, device: str):
    """``fn()`` as the candidate's code: an exception, ``sys.exit`` or ``os._exit`` (the fence) becomes
    ``_CandidateFailed``; a KeyboardInterrupt passes only when a real SIGINT came (the user's stop)."""
    with _Fence() as fence:
        try:
            value = fn()
            if device.startswith("cuda"):
                torch.cuda.synchronize()  # asynchronous errors surface inside the fence
            return value
        except KeyboardInterrupt as exc:
            if fence.sigint:
                raise
            raise _CandidateFailed(f"raised {_first_line(exc)} (no SIGINT came: the candidate's own)", _tail()) from None
        except BaseException as exc:  # noqa: BLE001 -- SystemExit / CandidateExit from a candidate is its failure
            raise _CandidateFailed(f"raised {_first_line(exc)}", _tail()) from None


def _tail() -> str:
    return traceback.format_exc(limit=3)[-600:]


def _check_answers(fn, calls: int, *, when: str, M: int, args: BenchOptions, scores: torch.Tensor, engine: bool, device: str) -> None:
    """``calls`` calls of the timed function, each answer checked (``answer_problem``); ``_CandidateFailed`` if not."""
    who = "the engine launch" if engine else "route"
    for _ in range(calls):
        try:
            value = _fenced(fn, device)
        except _CandidateFailed as exc:
            raise _CandidateFailed(f"{when}: {who} {exc}", exc.tb) from None
        problem = answer_problem(value, rows=M, topk=args.topk, scores=scores, engine=engine)
        if problem:
            raise _CandidateFailed(f"{when}: {who} answered what no router may: {problem}")


def harness_fault(exc: Exception, doing: str, *, candidate: str | None = None, M: int | None = None) -> dict:
    """An exception of the harness's own code (not the candidate's) as an entry of ``errors``: kind ``harness_error``,
    where, the traceback. One point's fault must not end the bench (issue 55): it is listed and the run goes on."""
    return {"candidate": candidate, "m": M, "kind": HARNESS_ERROR, "traceback": traceback.format_exc()[-8000:],
            "reason": f"harness error in {doing}: {_first_line(exc)} (a fault of the harness, not of the candidate)"}  # fmt: skip


def _harness_point(fault: dict) -> dict:
    return {**_error_point({"m": fault["m"]}, fault["reason"], fault["traceback"]), "kind": HARNESS_ERROR}


def _error_point(entry: dict, reason: str, tb: str | None = None) -> dict:
    return {**entry, "status": "error", "reason": reason, **({"traceback": tb} if tb else {}), "median_us": None, "spread": None, "samples": []}


def bench_point(candidate: Candidate, route, M: int, inputs, args: BenchOptions, device: str, launchers: list | None = None) -> dict:
    """One candidate at one M: skipped, an error, or timed. With ``launchers``, a timed point's call is appended as
    ``(point, call)``, for ``count_launched`` to profile after every timing is taken. Every call of the candidate's
    code is fenced (``_fenced``); the timed call's answers are checked before and after the timing."""
    scores, bias = inputs
    entry: dict = {"m": M}
    shape = dict(rows=M, experts=args.experts, topk=args.topk, dtype=scores[0].dtype,
                 bias_dtype=scores[0].dtype if bias is None else bias.dtype, logits_strides=tuple(scores[0].stride()),
                 **({} if bias is None else {"bias_stride": bias.stride(0)}), **args.group_args)  # as a check asks a gate
    try:  # under the contract the route follows: --contract's, else the candidate's own
        covered = _fenced(lambda: candidate.covers(**shape, renormalize=args.renormalize, contract=args.contract or candidate.contract), "cpu")
    except _CandidateFailed as exc:  # a gate must not take the run down
        return _error_point(entry, f"covered() {exc}", exc.tb)
    else:
        why = f"not covered: {candidate.name} does not serve rows={M}, experts={args.experts}, topk={args.topk}, " \
              f"dtype={args.dtype}, bias {'none' if bias is None else _dtype_word(bias.dtype)}" + (
              f", groups {args.num_expert_group} keep {args.topk_group}" if args.group_args else "")  # fmt: skip
    if not covered:
        return {**entry, "status": "skipped", "reason": why, "median_us": None, "spread": None, "samples": []}
    try:
        fn, path = _fenced(lambda: launcher(candidate, route, scores, bias, args.topk, args), "cpu")
    except _CandidateFailed as exc:  # preparing is the candidate's code too: a finding, not a crash
        return _error_point(entry, f"bench path preparation {exc}", exc.tb)
    engine = path == "engine launch"
    check = dict(M=M, args=args, scores=scores[0], engine=engine, device=device)
    try:
        calls = max(2, len(scores))  # every input buffer, and two calls at least: an answer that alternates is seen
        _check_answers(fn, calls, when="before timing", **check)

        def timed():
            return time_cuda(fn, args.launches, args.replays, args.warmup) if device.startswith("cuda") else time_cpu(fn, args.repeats)

        try:
            timing = _fenced(timed, device)
        except _CandidateFailed as exc:
            raise _CandidateFailed(f"while timed: {'the engine launch' if engine else 'route'} {exc}", exc.tb) from None
        _check_answers(fn, calls, when="after timing", **check)  # an answer that changes once warm is no answer
    except _CandidateFailed as exc:  # the candidate's failure is a finding, not a crash of the run
        return _error_point(entry, str(exc), exc.tb)
    out = {
        **entry,
        "status": "timed",
        "timer": timing.timer,
        "noisy": False,
        "median_us": round(statistics.median(timing.samples_us), 4),
        "spread": _spread(timing.samples_us),
        "samples": [round(x, 4) for x in timing.samples_us],
        "calls_per_sample": timing.calls_per_sample,
        "path": path,
    }
    if launchers is not None:
        launchers.append((out, fn))
    out["noisy"] = noisy(out)
    if timing.note:
        out["reason"] = timing.note
    return out


def _dtype_word(dtype) -> str:
    return {torch.bfloat16: "bf16", torch.float32: "fp32"}.get(dtype, str(dtype).removeprefix("torch."))


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


# ---------------------------------------------------------------- crossovers, table, plot


def noisy(point: dict) -> bool:
    """A point whose samples spread wider than their median (min to max): on a busy host its median says little."""
    spread = point.get("spread") or {}
    if point.get("status") != "timed" or "max" not in spread or "min" not in spread:
        return False
    return spread["max"] - spread["min"] > point["median_us"]


def _timed(points: list[dict], *, steady: bool = False) -> dict[int, float]:
    """Median us by M of the timed points; with ``steady``, only those whose spread allows a crossover (see ``noisy``)."""
    return {p["m"]: p["median_us"] for p in points if p.get("status") == "timed" and p.get("median_us") and not (steady and noisy(p))}


def crossovers(baseline: dict, other: dict) -> list[dict]:
    """Where ``other``'s latency curve crosses ``baseline``'s, between consecutive M both timed (log-log interpolation)."""
    a, b = _timed(baseline["results"], steady=True), _timed(other["results"], steady=True)
    ms = sorted(set(a) & set(b))
    found = []
    for m0, m1 in zip(ms, ms[1:]):
        d0, d1 = math.log(b[m0] / a[m0]), math.log(b[m1] / a[m1])
        if d0 == 0 or d0 * d1 >= 0:
            continue
        t = d0 / (d0 - d1)
        lm = math.log(m0) + t * (math.log(m1) - math.log(m0))
        lu = math.log(a[m0]) + t * (math.log(a[m1]) - math.log(a[m0]))
        faster_after = other["name"] if d1 < 0 else baseline["name"]
        found.append(
            {"baseline": baseline["name"], "candidate": other["name"], "between_m": [m0, m1],
             "m": round(math.exp(lm), 1), "latency_us": round(math.exp(lu), 3), "faster_above": faster_after}
        )  # fmt: skip
    return found


def curve(entry: dict, floor: float | None, floors_by_m: dict[str, float] | None = None) -> dict | None:
    """How one candidate's time grows with M: the largest fall of a point below the slowest point at a smaller M (in
    percent of that point: a launch shape switched too late or too early shows here), and each point above the launch
    floor (the figure a speed goal is set in): the run's first floor, and the floor timed just before that M's
    candidates where there is one. None with fewer than one timed point."""
    timed = _timed(entry["results"])
    if not timed:
        return None
    fall, at, peak_m = 0.0, None, None
    best = (None, 0.0)  # the slowest point so far: (M, us)
    for m in sorted(timed):
        us = timed[m]
        if best[0] is not None and us < best[1]:
            drop = 100.0 * (best[1] - us) / best[1]
            if drop > fall:
                fall, at, peak_m = drop, m, best[0]
        if us >= best[1]:
            best = (m, us)
    out = {"candidate": entry["name"], "largest_fall_pct": round(fall, 2), "at_m": at, "below_m": peak_m}
    if floor is not None:
        out["above_floor_us"] = {str(m): round(us - floor, 3) for m, us in sorted(timed.items())}
    if floors_by_m:
        out["above_floor_of_m_us"] = {str(m): round(us - floors_by_m[str(m)], 3) for m, us in sorted(timed.items())
                                      if str(m) in floors_by_m}  # fmt: skip
    return out


def launches_by_candidate(report: dict) -> dict[str, str]:
    """Per timed candidate, what one timed call launched: ``"1 kernel"``, ``"2 kernels + 1 copy"``, a range over M
    (``"1-2 kernels"``), or ``"not counted"``; and the path timed (``engine launch`` / ``route``)."""
    found = {}
    for c in report["candidates"]:
        points = [p for p in c["results"] if p.get("status") == "timed"]
        if c["status"] != "ok" or not points:
            continue
        kernels = sorted({p["launched"]["kernels"] for p in points if (p.get("launched") or {}).get("kernels") is not None})
        copies = sorted({p["launched"].get("copies", 0) for p in points if (p.get("launched") or {}).get("kernels") is not None})
        if not kernels:
            text = "not counted"
        else:
            k = f"{kernels[0]}" if len(kernels) == 1 else f"{kernels[0]}-{kernels[-1]}"
            text = f"{k} kernel{'' if kernels == [1] else 's'}"
            if copies and copies[-1]:
                text += f" + {copies[0] if len(copies) == 1 else f'{copies[0]}-{copies[-1]}'} copies/memsets"
        paths = sorted({p.get("path", "route") for p in points})
        found[c["name"]] = f"{text} per call ({', '.join(paths)})"
    return found


def results_table(report: dict) -> pd.DataFrame:
    """M x candidates: median us per launch, and each one's ratio to the first candidate."""
    timed = [c for c in report["candidates"] if c["status"] == "ok"]
    if not timed:
        return pd.DataFrame()
    base = timed[0]
    base_t = _timed(base["results"])
    rows = []
    for M in report["m"]:
        row = {"M": M}
        for c in timed:
            point = next(p for p in c["results"] if p["m"] == M)
            if point["status"] != "timed":
                row[c["name"]] = point["status"]
                continue
            cell = f"{point['median_us']:.2f}" + ("*" if point.get("timer") == "cuda-eager" else "") + ("~" if point.get("noisy") else "")
            if c is not base:
                cell += f" ({point['median_us'] / base_t[M]:.2f}x)" if M in base_t else " (-)"
            row[c["name"]] = cell
        rows.append(row)
    return pd.DataFrame(rows)


def write_plot(path: Path, report: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = report["method"]
    timer = m["timer"]
    notes = [
        f"({i}) {x['candidate']} crosses {x['baseline']} near M={x['m']:.0f}, {x['latency_us']:.3g} us; "
        f"{x['faster_above']} faster above"
        for i, x in enumerate(report["crossovers"], 1)
    ]
    fig = plt.figure(figsize=(9, 5.2 + 0.2 * len(notes)), dpi=110)
    ax = fig.add_axes([0.09, 0.12 + 0.035 * len(notes), 0.62, 0.72 - 0.035 * len(notes)])
    colors = {}
    for c in report["candidates"]:
        pts = [p for p in c["results"] if p["status"] == "timed"]
        if c["status"] != "ok" or not pts:
            continue
        xs, ys = [p["m"] for p in pts], [p["median_us"] for p in pts]
        lows = [p["median_us"] - p["spread"]["min"] for p in pts]
        highs = [p["spread"]["p90"] - p["median_us"] for p in pts]
        eager = any(p.get("timer") == "cuda-eager" for p in pts)
        bars = ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3,
                           label=c["name"] + (" (eager: not capturable)" if eager else ""),
                           linestyle="--" if eager else "-", markerfacecolor="none" if eager else None)  # fmt: skip
        colors[c["name"]] = bars.lines[0].get_color()
    for i, x in enumerate(report["crossovers"], 1):
        ax.plot([x["m"]], [x["latency_us"]], marker="*", markersize=15, color=colors.get(x["candidate"], "black"),
                markeredgecolor="black", zorder=5, linestyle="none")  # fmt: skip
        ax.annotate(f"({i})", (x["m"], x["latency_us"]), textcoords="offset points", xytext=(6, 6), fontsize=9, weight="bold")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("M (rows per launch)")
    ax.set_ylabel(f"us per launch ({timer})")
    ax.grid(True, which="both", alpha=0.3)
    dev = report["environment"].get("device_name") or report["device"]
    title = f"Router latency vs M: {timer}, {dev}"
    fig.suptitle(
        f"{title}\nE={m['experts']}, top-{m['topk']}, {m['dtype']} logits, {m['bias_dtype']} bias; median, bars min to p90",
        fontsize=10,
    )
    handles, labels = ax.get_legend_handles_labels()
    skipped = [f"{c['name']}: unavailable" for c in report["candidates"] if c["status"] != "ok"]
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    if skipped:
        fig.text(0.74, 0.12 + 0.035 * len(notes), "\n".join(skipped), fontsize=7, color="0.35", va="bottom", wrap=True)
    for i, note in enumerate(notes):
        fig.text(0.02, 0.02 + 0.035 * (len(notes) - 1 - i), note, fontsize=8)
    # The title also goes into the PNG's text chunk, so a file alone says how it was timed.
    write_atomic(path, lambda p: fig.savefig(p, format="png", metadata={"Title": title, "Description": m["description"]}))
    plt.close(fig)
    return path


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
    entries = []
    env = environment(device)
    floor = None
    floors_by_m: dict[str, float] = {}  # and again before each M's candidates, in the state they run in
    faults: list[dict] = []  # the harness's own errors outside any one point (the curves, the crossovers)

    def report(status: str, in_progress: dict | None = None) -> dict:
        errors = [{"candidate": e["name"], "m": None, "reason": e["reason"]} for e in entries if e["status"] == "error"]
        errors += [{"candidate": e["name"], "m": p["m"], "reason": p["reason"], **({"kind": p["kind"]} if "kind" in p else {})}
                   for e in entries for p in e["results"] if p["status"] == "error"]  # fmt: skip
        errors += faults
        return {
            "schema_version": BENCH_SCHEMA_VERSION, "kind": "bench", "command": command,
            "created_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "status": "error" if errors and status == "ok" else status, "errors": errors,
            **({"in_progress": in_progress} if in_progress else {}),
            "device": device, "environment": env,
            "method": {**_method(args, device), "pdl": pdl_note(candidates, device), "launch_floor_us": floor,
                       "launch_floor_by_m_us": floors_by_m or None},
            "m": list(args.m), "baseline": candidates[0].name if candidates else None, "candidates": entries,
            "crossovers": [], "curves": [],
        }  # fmt: skip

    def running(cand: Candidate, doing: str, M: int | None = None) -> None:
        if checkpoint is not None:
            where = {"candidate": cand.name, "doing": doing, **({"m": M} if M is not None else {})}
            checkpoint(report("incomplete", where))

    for cand in candidates:
        entry = {"name": cand.name, "contract": args.contract or cand.contract, "status": "ok", "reason": None, "results": []}
        entries.append(entry)
        running(cand, "available()")
        try:
            ok, why = _fenced(lambda: cand.available(device), "cpu")
        except _CandidateFailed as exc:  # a gate that raises or exits is the candidate's error, not the run's
            ok, why = False, f"available() {exc}"
            entry["error"] = why
        if ok and args.contract and not cand.serves(args.contract):  # racing another contract's routing is not a race
            ok, why = False, f"{cand.name} follows contract {cand.contract}, not {args.contract}"
        if not ok:
            entry.update(status="error" if "error" in entry else "unavailable", reason=why)
    usable = [(c, e) for c, e in zip(candidates, entries) if e["status"] == "ok"]
    floor = launch_floor(args, device)  # first: nothing run before it can slow it
    launchers: list | None = [] if device.startswith("cuda") else None
    for M in args.m:
        try:
            inputs = make_inputs(M, experts=args.experts, dtype=dtype, bias_dtype=bias_dtype, device=device, seed=args.seed, rotate=args.rotate)
            if not args.bias:
                inputs = (inputs[0], None)
            if floor is not None and usable:
                floors_by_m[str(M)] = round(launch_floor(args, device), 4)
        except Exception as exc:  # noqa: BLE001 -- the harness's own fault at this M: every point there is its error
            for cand, entry in usable:
                entry["results"].append(_harness_point(harness_fault(exc, f"making the inputs at M={M}", candidate=cand.name, M=M)))
            continue
        for cand, entry in usable:
            running(cand, "bench point", M)
            try:
                route = cand.route_under(args.contract) if args.contract else cand.route
                point = bench_point(cand, route, M, inputs, args, device, launchers)
            except Exception as exc:  # noqa: BLE001 -- bench_point fences the candidate's code; what is left is the harness's
                point = _harness_point(harness_fault(exc, f"the bench point of {cand.name} at M={M}", candidate=cand.name, M=M))
            entry["results"].append(point)
            shown = f"{point['median_us']:.2f} us" if point["status"] == "timed" else point["status"]
            log(f"  {cand.name:>16} [contract {entry['contract']}] M={M:<6} {shown}")
        del inputs
    if launchers:
        count_launched(launchers)  # after every timing (see count_launched)
        launchers.clear()
    curves, found = [], []
    try:
        curves = [c for c in (curve(e, floor, floors_by_m) for e in entries if e["status"] == "ok") if c is not None]
    except Exception as exc:  # noqa: BLE001 -- the timings stand; the fitted curves are the harness's to get wrong
        faults.append(harness_fault(exc, "fitting the curves"))
    base = entries[0] if entries else None
    if base is not None and base["status"] == "ok":
        try:
            found = [x for other in entries[1:] if other["status"] == "ok" for x in crossovers(base, other)]
        except Exception as exc:  # noqa: BLE001 -- as the curves
            faults.append(harness_fault(exc, "finding the crossovers"))
    done = report("ok")
    done["curves"], done["crossovers"] = curves, found
    return done


def write_bench(out: Path, report: dict) -> Path:
    """``bench.json`` and ``bench.png`` under ``out``; a plot the harness fails to draw is an error bench.json lists."""
    try:
        write_plot(Path(out) / "bench.png", report)
    except Exception as exc:  # noqa: BLE001 -- the timings are written whatever the plot does
        report["errors"].append(harness_fault(exc, "drawing bench.png"))
        report["status"] = "error"
    write_json(Path(out) / "bench.json", report)
    return Path(out)
