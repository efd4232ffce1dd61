"""One candidate at one batch size M: its gate, its bench path, its answers checked before and after, its timing.

Every call of the candidate's code is fenced (``fenced``): an exception, ``sys.exit`` or ``os._exit`` during it is
the candidate's failure (``CandidateFailed``), recorded as an ``error`` point with the reason, and the run goes on.
How a figure is taken, and why, is ``contracts.run.bench``'s docstring.
"""

from __future__ import annotations

import math
import statistics
import time
import traceback
from types import SimpleNamespace

import pandas as pd
import torch

from kernels.timing import Timing, time_cuda

from ..candidates import Candidate
from ..candidates.fenced_call import Fence  # os._exit during a candidate's call raises CandidateExit instead
from ..compare.dense import read_answer
from ..compare.verdicts import validity_failure
from ..reports.schema import HARNESS_ERROR
from .bench_options import BenchOptions

__all__ = ["INPUT_BLOCK_ROWS", "CandidateFailed", "answer_problem", "bench_point", "count_kernels", "fenced", "first_line", "harness_fault",
           "harness_point", "launcher", "make_inputs", "noisy", "time_cpu"]  # fmt: skip

CPU_SAMPLE_SECONDS = 2e-3
CPU_MAX_CALLS_PER_SAMPLE = 1000


def first_line(exc: BaseException) -> str:
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


def _spread(samples: list[float]) -> dict:
    s = pd.Series(samples, dtype="float64")
    return {
        "min": round(float(s.min()), 4),
        "p25": round(float(s.quantile(0.25)), 4),
        "p75": round(float(s.quantile(0.75)), 4),
        "p90": round(float(s.quantile(0.90)), 4),
        "max": round(float(s.max()), 4),
    }


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
        return {"kernels": None, "counted_by": f"not counted: {first_line(exc)}"}
    if not seen:
        return {"kernels": None, "counted_by": "not counted: the profiler saw no device activity"}
    copies = [e.name for e in seen if e.name.startswith(("Memcpy", "Memset"))]
    kernels = [e.name for e in seen if not e.name.startswith(("Memcpy", "Memset"))]
    return {"kernels": len(kernels), "copies": len(copies), "names": sorted({n[:80] for n in kernels}), "counted_by": how}


class CandidateFailed(Exception):
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


def fenced(fn, device: str):
    """``fn()`` as the candidate's code: an exception, ``sys.exit`` or ``os._exit`` (the fence) becomes
    ``CandidateFailed``; a KeyboardInterrupt passes only when a real SIGINT came (the user's stop)."""
    with Fence() as fence:
        try:
            value = fn()
            if device.startswith("cuda"):
                torch.cuda.synchronize()  # asynchronous errors surface inside the fence
            return value
        except KeyboardInterrupt as exc:
            if fence.sigint:
                raise
            raise CandidateFailed(f"raised {first_line(exc)} (no SIGINT came: the candidate's own)", _tail()) from None
        except BaseException as exc:  # noqa: BLE001 -- SystemExit / CandidateExit from a candidate is its failure
            raise CandidateFailed(f"raised {first_line(exc)}", _tail()) from None


def _tail() -> str:
    return traceback.format_exc(limit=3)[-600:]


def _check_answers(fn, calls: int, *, when: str, M: int, args: BenchOptions, scores: torch.Tensor, engine: bool, device: str) -> None:
    """``calls`` calls of the timed function, each answer checked (``answer_problem``); ``CandidateFailed`` if not."""
    who = "the engine launch" if engine else "route"
    for _ in range(calls):
        try:
            value = fenced(fn, device)
        except CandidateFailed as exc:
            raise CandidateFailed(f"{when}: {who} {exc}", exc.tb) from None
        problem = answer_problem(value, rows=M, topk=args.topk, scores=scores, engine=engine)
        if problem:
            raise CandidateFailed(f"{when}: {who} answered what no router may: {problem}")


def harness_fault(exc: Exception, doing: str, *, candidate: str | None = None, M: int | None = None) -> dict:
    """An exception of the harness's own code (not the candidate's) as an entry of ``errors``: kind ``harness_error``,
    where, the traceback. One point's fault must not end the bench (issue 55): it is listed and the run goes on."""
    return {"candidate": candidate, "m": M, "kind": HARNESS_ERROR, "traceback": traceback.format_exc()[-8000:],
            "reason": f"harness error in {doing}: {first_line(exc)} (a fault of the harness, not of the candidate)"}  # fmt: skip


def harness_point(fault: dict) -> dict:
    return {**_error_point({"m": fault["m"]}, fault["reason"], fault["traceback"]), "kind": HARNESS_ERROR}


def _error_point(entry: dict, reason: str, tb: str | None = None) -> dict:
    return {**entry, "status": "error", "reason": reason, **({"traceback": tb} if tb else {}), "median_us": None, "spread": None, "samples": []}


def bench_point(candidate: Candidate, route, M: int, inputs, args: BenchOptions, device: str, launchers: list | None = None,
                contract: str | None = None) -> dict:  # fmt: skip
    """One candidate at one M: skipped, an error, or timed. With ``launchers``, a timed point's call is appended as
    ``(point, call)``, for ``count_launched`` to profile after every timing is taken. Every call of the candidate's
    code is fenced (``fenced``); the timed call's answers are checked before and after the timing. ``contract``: the
    one ``route`` follows (default --contract's, else the candidate's own)."""
    contract = contract or args.contract or candidate.contract
    scores, bias = inputs
    entry: dict = {"m": M}
    shape = dict(rows=M, experts=args.experts, topk=args.topk, dtype=scores[0].dtype,
                 bias_dtype=scores[0].dtype if bias is None else bias.dtype, logits_strides=tuple(scores[0].stride()),
                 **({} if bias is None else {"bias_stride": bias.stride(0)}), **args.group_args)  # as a check asks a gate
    try:  # under the contract the route follows
        covered = fenced(lambda: candidate.covers(**shape, renormalize=args.renormalize, contract=contract), "cpu")
    except CandidateFailed as exc:  # a gate must not take the run down
        return _error_point(entry, f"covered() {exc}", exc.tb)
    else:
        why = f"not covered: {candidate.name} does not serve rows={M}, experts={args.experts}, topk={args.topk}, " \
              f"dtype={args.dtype}, bias {'none' if bias is None else _dtype_word(bias.dtype)}" + (
              f", groups {args.num_expert_group} keep {args.topk_group}" if args.group_args else "")  # fmt: skip
    if not covered:
        return {**entry, "status": "skipped", "reason": why, "median_us": None, "spread": None, "samples": []}
    try:
        fn, path = fenced(lambda: launcher(candidate, route, scores, bias, args.topk, args), "cpu")
    except CandidateFailed as exc:  # preparing is the candidate's code too: a finding, not a crash
        return _error_point(entry, f"bench path preparation {exc}", exc.tb)
    engine = path == "engine launch"
    check = dict(M=M, args=args, scores=scores[0], engine=engine, device=device)
    try:
        calls = max(2, len(scores))  # every input buffer, and two calls at least: an answer that alternates is seen
        _check_answers(fn, calls, when="before timing", **check)

        def timed():
            return time_cuda(fn, args.launches, args.replays, args.warmup) if device.startswith("cuda") else time_cpu(fn, args.repeats)

        try:
            timing = fenced(timed, device)
        except CandidateFailed as exc:
            raise CandidateFailed(f"while timed: {'the engine launch' if engine else 'route'} {exc}", exc.tb) from None
        _check_answers(fn, calls, when="after timing", **check)  # an answer that changes once warm is no answer
    except CandidateFailed as exc:  # the candidate's failure is a finding, not a crash of the run
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


def noisy(point: dict) -> bool:
    """A point whose samples spread wider than their median (min to max): on a busy host its median says little."""
    spread = point.get("spread") or {}
    if point.get("status") != "timed" or "max" not in spread or "min" not in spread:
        return False
    return spread["max"] - spread["min"] > point["median_us"]
