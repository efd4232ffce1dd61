"""Where kernels switch launch shape: the batch sizes the kernel packages (and a candidate's own modules) publish as
data (``BATCH_SWITCH_POINTS``, ``MODEL_BATCH_SWITCH_POINTS``, ``switch_points_for``). Each is the first batch of a
launch class; the pinned cases run in every class (``contracts.cases.pins``)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

__all__ = ["MAX_CANDIDATE_POINTS", "candidate_points", "launch_class_points", "launch_points", "switch_points"]

# The kernel packages that may publish ``BATCH_SWITCH_POINTS`` (the first M of each new launch shape).
_KERNEL_PACKAGES = ("kernels.radix4", "kernels.serial", "kernels.adapters.aiter", "kernels.engines.sglang_radix",
                    "kernels.engines.sglang_triton", "kernels.engines.flashinfer_noaux", "kernels.engines.vllm_torch")  # fmt: skip



@dataclass(frozen=True)
class _Published:
    """What one kernel package publishes about its launch shapes."""

    general: tuple[int, ...]  # points at every shape
    by_shape: dict  # (experts, topk) -> points
    points_for: object = None  # switch_points_for(contract, experts, topk), where the package has one


@functools.lru_cache(maxsize=1)
def _published() -> tuple[_Published, ...]:
    """The switch points of each kernel package that imports here (``BATCH_SWITCH_POINTS``,
    ``MODEL_BATCH_SWITCH_POINTS``: a list, or a dict per ``(experts, topk)``; ``switch_points_for``)."""
    import importlib

    packages = []
    for name in _KERNEL_PACKAGES:
        try:
            module = importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- an engine not installed here publishes nothing; the powers of two still run
            continue
        packages.append(_read(module))
    return tuple(packages)


def _read(module) -> _Published:
    general: set[int] = set()
    by_shape: dict[tuple[int, int], set[int]] = {}
    for attribute in ("BATCH_SWITCH_POINTS", "MODEL_BATCH_SWITCH_POINTS"):  # the second: per contract family
        published = getattr(module, attribute, ()) or ()
        if isinstance(published, dict):  # per (experts, topk) shape, as kernels.radix4 publishes them
            for shape, value in published.items():
                if isinstance(shape, tuple) and len(shape) == 2:
                    by_shape.setdefault(shape, set()).update(_whole(value if isinstance(value, (tuple, list)) else (value,)))
        elif isinstance(published, (tuple, list, set, frozenset)):
            general.update(_whole(published))
    points_for = getattr(module, "switch_points_for", None)
    return _Published(tuple(sorted(general)), {k: tuple(sorted(v)) for k, v in by_shape.items()}, points_for if callable(points_for) else None)


def _points_of(package: _Published, experts: int, topk: int, contract: str | None) -> set[int]:
    points = set(package.general)
    shape_points = package.by_shape.get((experts, topk), ())
    if contract is None or package.points_for is None:
        return points | set(shape_points)
    try:
        return points | _whole(package.points_for(contract, experts, topk))
    except Exception:  # noqa: BLE001 -- a package that cannot say for this contract: all it publishes for the shape
        return points | set(shape_points)


MAX_CANDIDATE_POINTS = 16  # a kernel with more launch shapes than this is not one the plan can pin whole


def candidate_points(origins, experts: int, topk: int, contract: str | None = None) -> tuple[int, ...]:
    """The switch points the candidates' own modules publish for this shape and contract (``origins``: each
    ``Candidate.origin``, a candidate's and its ``--against``'s), as the kernel packages do: ``BATCH_SWITCH_POINTS``,
    ``MODEL_BATCH_SWITCH_POINTS``, ``switch_points_for``. A user's kernel names its launch shapes so, and the plan
    pins its classes too. Read only from modules already imported (where the candidate was loaded: the worker when
    isolated); the known kernel packages are read anyway. At most ``MAX_CANDIDATE_POINTS`` a module, the smallest:
    each adds a pinned case of every pair, layout and option."""
    import sys

    points: set[int] = set()
    for origin in origins:
        name = str(origin or "").split(":")[0]
        module = sys.modules.get(name)
        if module is None or name in _KERNEL_PACKAGES:
            continue
        try:
            points |= set(sorted(_points_of(_read(module), experts, topk, contract))[:MAX_CANDIDATE_POINTS])
        except Exception:  # noqa: BLE001 -- a module whose attributes cannot be read publishes nothing
            continue
    return tuple(sorted(points))


def _whole(points) -> set[int]:
    return {p for p in points if isinstance(p, int) and not isinstance(p, bool) and p >= 1}


def switch_points() -> tuple[int, ...]:
    """The batch sizes at which a known kernel switches launch shape, at any shape, read as data from the kernel
    packages: the batch-size sweep's boundaries."""
    points: set[int] = set()
    for package in _published():
        points.update(package.general, *package.by_shape.values())
    return tuple(sorted(points))


def launch_points(experts: int, topk: int, contract: str | None = None) -> tuple[int, ...]:
    """The batch sizes at which a known kernel switches launch shape at ``(experts, topk)``: under ``contract``
    those a package's ``switch_points_for`` names, else every point the package publishes for the shape. Each
    is the first batch of a launch class; the pinned dtype and layout cases run in every class."""
    points: set[int] = set()
    for package in _published():
        points |= _points_of(package, experts, topk, contract)
    return tuple(sorted(points))


def launch_class_points(points, experts, topk, contract, extra_points) -> tuple[int, ...]:
    """The switch points that bound the launch classes of a check: ``points`` where given, else those of the kernels at
    ``(experts, topk)`` under ``contract`` (none without a shape); and the candidate's own ``extra_points``."""
    if points is None:
        points = launch_points(experts, topk, contract) if experts is not None and topk is not None else ()
    return tuple(points) + tuple(extra_points)
