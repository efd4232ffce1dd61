"""Device time per launch of a zero-argument call, taken from replays of a CUDA graph.

One timer for every figure the project publishes (``contracts bench``, ``kernels.radix4.shape_sweep``), so
two tables differ only by what they time, never by how. It lives in ``kernels/`` because a kernel's own
tools use it and ``kernels/`` never imports the harness.

``time_cuda(fn, launches, replays, warmup)``:

1. ``warmup_calls`` eager calls (default 3) on a side stream, as torch's CUDA-graph notes ask: lazy loads
   and the caching allocator settle before the capture, so none of that is captured.
2. ``launches`` calls captured in one CUDA graph: a replay then costs what the launches cost on the device,
   without the Python and driver overhead of calling ``fn`` from the host.
3. ``warmup`` untimed replays, then ``replays`` replays each between two CUDA events. One sample (us) = the
   replay's elapsed time / ``launches``. Ahead of each sample's start event the stream runs a spin kernel of
   ``HOLD_CYCLES`` (``torch.cuda._sleep``, about 100 us): the host submits the replay while the device spins,
   so the start event fires with the replay already queued. Without it the device reaches the start event at
   once, idles until the host has submitted the replay (microseconds that vary from call to call and host to
   host) and the sample counts that idle time, spread over the replay's launches.

Where capture fails (``fn`` synchronizes, copies from the host, ...) and ``eager_fallback`` is set, ``fn`` is
timed eagerly instead: ``warmup`` untimed rounds of ``launches`` calls, then ``replays`` samples of ``launches``
calls between two events. The result says ``cuda-eager`` and why, so a reader never takes host overhead
for kernel time. Without ``eager_fallback`` the capture's error is raised.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Timing", "time_cuda"]


@dataclass
class Timing:
    """A timer's samples: ``timer`` is "cuda-graph", "cuda-eager" or "cpu-wall-clock"; ``note`` says why a
    figure was not taken the usual way (empty when it was)."""

    timer: str
    samples_us: list[float]
    calls_per_sample: int
    note: str = ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}".rstrip(": ")


# The spin ahead of each sample's start event (module docstring): about 100 us at the H200's 1.98 GHz, several
# times what a host takes to submit a replay of a graph of tens of launches.
HOLD_CYCLES = 200_000


def _event_samples(run, replays: int, launches: int) -> list[float]:
    """``replays`` samples of ``run()`` between two CUDA events, in us per launch, each behind a spin kernel."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(replays):
        torch.cuda._sleep(HOLD_CYCLES)  # untimed: it ends before the start event
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) * 1000.0 / launches)
    return samples


def _eager_round(fn, launches: int):
    def run():
        for _ in range(launches):
            fn()

    return run


def time_cuda(fn, launches: int, replays: int, warmup: int, *, warmup_calls: int = 3, eager_fallback: bool = True) -> Timing:
    """Graph replay; eager events if the call cannot be captured (see the module docstring)."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup_calls):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            for _ in range(launches):
                fn()
    except Exception as exc:  # not capturable: time it eagerly, and say so
        del graph
        if not eager_fallback:
            raise
        try:
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 -- a failed capture may leave an error to clear
            pass
        reason = f"graph capture failed ({_first_line(exc)}); timed eagerly"
        eager = _eager_round(fn, launches)
        for _ in range(warmup):
            eager()
        torch.cuda.synchronize()
        return Timing("cuda-eager", _event_samples(eager, replays, launches), launches, reason)
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    samples = _event_samples(graph.replay, replays, launches)
    del graph
    return Timing("cuda-graph", samples, launches)
