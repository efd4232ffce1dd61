"""The plan: which cases a check runs, as replayable specs.

A case is fully determined by ``(family, case_seed, rows, experts, topk)``
and whether it is a bulk case: that is its replay id
(``family:seed:rows``, or ``family:seed:rows:bulk``), and
``contracts.cases.build.build_case`` rebuilds it bit for bit.

``iter_plan`` spreads a row budget over the families by share,
deterministically in the seed. Each family first runs its **coverage
cases**: two passes over its case sizes (batch sizes matter to kernels:
they pick launch shapes; ``batch_sizes`` runs its edge sizes, then sizes
drawn from 1..1025). The rest of its budget, if any, runs as **bulk cases**
of ``bulk_rows`` rows (65,536 on a GPU, 16,384 on a CPU), generated on the
device the candidate runs on: volume at the speed of the oracle. A
candidate that serves smaller batches answers a bulk case in calls of its
largest batch (``bulk_rows_for``; ``contracts.candidates.calling.in_slices``),
so generation, the oracle and the comparison still run 65,536 rows at a time. ``shard`` takes every N-th spec of the plan (``--shard I/N``,
and the ranks of a torchrun).

**Coverage by construction.** Given a ``max_batch``, every family also runs
its **pinned cases**, at every ``--rows`` and on top of its budget: the
``batch_sizes`` family an empty batch (0 rows: its answer must be two empty
``[0, k]`` tensors; a raise or another answer is an error of the candidate)
and one case of every batch-size class from 1 to
``max_batch`` (the first size past each power of two, ``max_batch`` itself,
and each side of every launch-shape boundary the kernel packages publish as
``BATCH_SWITCH_POINTS``), and ``ROW_TILE`` (16) consecutive sizes from the
first batch of every launch class (``tail_sizes``: every remainder of a row
tile of up to 16 rows, in every launch shape); ``random_bf16`` and ``random_fp32`` cases of each
bias dtype (bf16, fp16, fp32), and ``random_fp32`` the same with fp16 logits,
so that all nine (logits, bias) dtype pairs are made, ``random_bf16`` a bias
of each dtype that starts one element into its buffer (not aligned for vector
loads), and both families contiguous logits one element into theirs (and a bias,
logits ``ALIGNED_OFFSET`` = 256 elements in: aligned, but not where their storage starts),
logits of column stride 2 (every other column of a wider buffer) and
transposed logits (row stride 1, from 2 rows), ``random_bf16`` a bias of stride 2;
``strided`` cases at storage offset 0; every other family one case of its own
rows in every launch class (below), and those whose rows do not rest on their
bias (``ZERO_BIAS_FAMILIES``) one more with an all-zero bias; ``random_fp32`` (fp32 and
fp16 logits) and ``random_bf16`` call in every call context but the default
(``CALL_CONTEXTS``: grad on, off or inference mode, the bias a plain tensor or
an ``nn.Parameter``, frozen or trainable, the logits requiring grad, autocast:
every conjunction; a bf16 default dtype and autocast to fp16 in each grad mode and in a training step; deterministic
algorithms in each grad mode). Each of those dtype, layout and context pins
runs in **every launch class** of the checked shape: at 1 and 2 rows (one
row is often a class of its own, the decode step), at 64, and at the first
batch of each launch shape the kernels use there under the contract
(``launch_points``; radix4 at 896/16 under aiter: 7 and 1,585), so
a loader written per launch shape meets every pair and layout. A pinned case
names what it pins in its replay id (``strided:SEED:64:offset-0``,
``random_fp32:SEED:1585:logits-fp16:bias-bf16``, ``random_bf16:SEED:7:transposed``).

**Max batch in one call, in every family that can afford it.** A bulk case
reaches the candidate in calls of its largest batch (``call_sizes``), so its
rows are not a call's: ``check --plan`` lists the calls' sizes, from the run's
own iterator. ``random_bf16`` and ``random_fp32`` run one case of
``max_batch`` rows at every ``--rows`` (``MAX_BATCH_FAMILIES``; out of their
budget where it holds one, ``absorbs_max_batch``), ``batch_sizes``' sweep ends
at it, every other family runs one out of its budget where the budget holds
it (no row more: the CPU main job stays 593,024 rows under aiter), and a run
of none of these gets one in its first family (``max_batch_host``). The
contract's own ``routed_scaling_factor`` is pinned in ``batch_sizes`` with
every admitted ``renormalize`` where it admits any factor and the drawn ones
leave it out (DeepSeek-V4's 1.5, LongCat-Flash's 6): ``contracts.cases.exercised``
names every regime of every field the plan must reach.
"""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass
from typing import Iterable, Iterator

from .families import FAMILIES

__all__ = ["ALIGNED_OFFSET", "CALL_CONTEXTS", "CPU_MAX_BATCH", "GPU_MAX_BATCH", "MAX_BATCH_ENV", "BulkTail", "CaseSpec", "PlanCount", "QUICK_ROWS", "QuickLook", "absorbs_max_batch", "admitted_fields", "bulk_rows_for", "call_size", "call_sizes", "max_batch_host", "default_max_batch", "env_max_batch",
           "SCALING_FACTORS", "UNUSUAL_SCALING_FACTORS", "candidate_points", "count_plan", "iter_plan", "iter_plan_parts", "launch_class_sizes", "launch_points", "pinned_rows", "pinned_specs", "plan", "plan_bulk_rows", "planned_rows", "quick_boundaries", "quick_positions", "shard", "shard_rows", "sweep_sizes", "switch_points", "tail_sizes"]


@dataclass(frozen=True)
class CaseSpec:
    family: str
    case_seed: int
    rows: int
    experts: int
    topk: int
    n_group: int = 1  # expert groups of a grouped contract (DeepSeek: 8 groups, 4 kept); 1 = none
    topk_group: int = 1
    bulk: bool = False  # drawn on the candidate's device by the family's vectorized maker
    bias: bool = True  # the contract has a correction bias (else the candidate gets ``bias=None``)
    bias_dtype: str | None = None  # pinned: "bf16", "fp16" or "fp32" (None: drawn from the seed, fp32 or the logits' dtype)
    logits_dtype: str | None = None  # pinned: "fp16" (None: the family's, bf16 or fp32)
    offset: int | None = None  # pinned storage offset of a strided family's rows (None: drawn, 1..63)
    bias_offset: int = 0  # pinned: the bias starts this many elements into its buffer (1: not aligned for vector loads)
    logits_offset: int = 0  # pinned: contiguous logits (row stride E) that start this many elements into their buffer
    column_stride: int = 1  # pinned: the logits are every N-th column of a wider buffer, from its second (stride(1) == N)
    transposed: bool = False  # pinned: the logits are the transpose of a contiguous [E, M] buffer (strides (1, M))
    bias_stride: int = 1  # pinned: the bias is every N-th element of a wider buffer (stride(0) == N)
    renormalize: bool | None = None  # pinned call option (None: drawn, 3 in 4 renormalize); one the contract admits
    # pinned autograd context of the call (None: grad enabled, as a plain script calls): "on", "off" (torch.no_grad)
    # or "inference" (torch.inference_mode, as a serving engine's forward runs)
    grad_mode: str | None = None
    # pinned: the bias is handed over as an nn.Parameter, "frozen" (requires_grad=False, as vLLM and SGLang load it)
    # or "trainable" (requires_grad=True, as a transformers model holds it); None: a plain tensor
    bias_parameter: str | None = None
    # pinned: the logits require grad, a view of a leaf as a training step's gate output is (grad mode "on" only: a
    # tensor made under no_grad or inference mode never requires grad)
    logits_grad: bool = False
    # pinned: the call runs under torch.autocast(device, bfloat16) ("bf16") or float16 ("fp16"), as mixed precision runs
    # a model
    autocast: str | None = None
    # pinned: the call runs under torch.use_deterministic_algorithms(True) (warn_only: an op without a deterministic
    # form warns rather than raises; torch.empty then fills with NaN), as a reproducible run sets it
    deterministic: bool = False
    # pinned: the call runs under torch.set_default_dtype(bfloat16) ("bf16"), as some training frameworks set it: a
    # tensor a router makes without a dtype is bf16 there
    default_dtype: str | None = None
    zero_bias: bool = False  # pinned: every bias element is +0.0 (a freshly initialised e_score_correction_bias)
    scaling: float | None = None  # pinned routed_scaling_factor (None: drawn from SCALING_FACTORS)

    # The call options the contract admits (``oracle.Contract.admitted_options``): build_case draws only these.
    renormalize_options: tuple[bool, ...] = (True, False)
    scaling_options: tuple[float, ...] | None = None  # None: any (the usual factors are drawn)
    source: str = ""  # captured logits: the file and layer the rows come from (``contracts.cases.captured``); "" = a family's maker
    expert_scale: bool = False  # the contract has a per-expert weight scale (Gemma 4): build_case draws one per case

    @property
    def tags(self) -> tuple[str, ...]:
        """What the spec pins, as replay-id parts: ``bulk``, ``logits-fp16``, ``bias-bf16``, ``offset-0``,
        ``bias_offset-1``, ``logits_offset-1``, ``column_stride-2``, ``transposed``, ``bias_stride-2``,
        ``renormalize-off``, ``scaling-2.5``, ``grad-inference``, ``bias_parameter-frozen``, ``logits_grad``, ``autocast``
        (bf16), ``autocast-fp16``, ``default_dtype-bf16``, ``deterministic``, ``zero_bias``."""
        return (("bulk",) if self.bulk else ()) + ((f"logits-{self.logits_dtype}",) if self.logits_dtype else ()) + (
            (f"bias-{self.bias_dtype}",) if self.bias_dtype else ()) + (
            (f"offset-{self.offset}",) if self.offset is not None else ()) + (
            (f"bias_offset-{self.bias_offset}",) if self.bias_offset else ()) + (
            (f"logits_offset-{self.logits_offset}",) if self.logits_offset else ()) + (
            (f"column_stride-{self.column_stride}",) if self.column_stride != 1 else ()) + (
            ("transposed",) if self.transposed else ()) + (
            (f"bias_stride-{self.bias_stride}",) if self.bias_stride != 1 else ()) + (
            (f"renormalize-{'on' if self.renormalize else 'off'}",) if self.renormalize is not None else ()) + (
            (f"scaling-{self.scaling:g}",) if self.scaling is not None else ()) + (
            (f"grad-{self.grad_mode}",) if self.grad_mode is not None else ()) + (
            (f"bias_parameter-{self.bias_parameter}",) if self.bias_parameter is not None else ()) + (
            ("logits_grad",) if self.logits_grad else ()) + (
            (("autocast",) if self.autocast == "bf16" else (f"autocast-{self.autocast}",)) if self.autocast else ()) + (
            (f"default_dtype-{self.default_dtype}",) if self.default_dtype else ()) + (
            ("deterministic",) if self.deterministic else ()) + (("zero_bias",) if self.zero_bias else ())  # fmt: skip

    @property
    def in_context(self) -> bool:
        """Whether the case pins a call context (``CALL_CONTEXTS``) rather than the default, or (captured logits) call
        options other than the model's: either way it repeats rows of the file's walk."""
        return (self.grad_mode is not None or self.bias_parameter is not None or self.logits_grad or self.autocast is not None
                or self.default_dtype is not None or self.deterministic
                or bool(self.source) and (self.renormalize is not None or self.scaling is not None))

    @property
    def replay_id(self) -> str:
        return ":".join([self.family, str(self.case_seed), str(self.rows), *self.tags])


def admitted_fields(admitted: dict | None) -> dict:
    """The ``CaseSpec`` fields for a contract's ``admitted_options()`` (``{}`` when it admits every option)."""
    if not admitted:
        return {}
    out = {}
    if tuple(admitted["renormalize"]) != (True, False):
        out["renormalize_options"] = tuple(admitted["renormalize"])
    if admitted["routed_scaling_factor"] is not None:
        out["scaling_options"] = tuple(admitted["routed_scaling_factor"])
    if admitted.get("expert_scale"):
        out["expert_scale"] = True
    return out


def _seed(*parts) -> int:
    digest = hashlib.sha256(":".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def _budgets(families: list[str], total_rows: int) -> dict[str, int]:
    """Rows per family, by share, summing to exactly ``total_rows`` (largest remainders
    get the rounding rows); every family gets at least one row."""
    whole = sum(FAMILIES[name].share for name in families)
    exact = {name: total_rows * FAMILIES[name].share / whole for name in families}
    budgets = {name: int(v) for name, v in exact.items()}
    by_remainder = sorted(families, key=lambda name: exact[name] - budgets[name], reverse=True)
    for name in by_remainder[: total_rows - sum(budgets.values())]:
        budgets[name] += 1
    return {name: max(1, rows) for name, rows in budgets.items()}


def planned_rows(families: list[str], total_rows: int, *, max_batch: int | None = None, bias: bool = True,
                 experts: int | None = None, topk: int | None = None, contract: str | None = None, admitted: dict | None = None,
                 extra_points: tuple[int, ...] = (), quick: bool = False) -> int:  # fmt: skip
    """Rows ``iter_plan`` yields in all (each family's budget, at least 1, and its pinned cases)."""
    shape = dict(bias=bias, experts=experts, topk=topk, contract=contract, admitted=admitted, extra_points=extra_points, quick=quick)
    budgets = _budgets(families, total_rows)
    host = None if quick else max_batch_host(families, budgets, max_batch, None, experts, topk, contract, extra_points)
    pinned = sum(pinned_rows(name, max_batch, budget=budgets[name], host=name == host, **shape) for name in families)
    return sum(budgets.values()) + pinned


def pinned_rows(name: str, max_batch: int | None, *, bias: bool = True, experts: int | None = None, topk: int | None = None,
                contract: str | None = None, admitted: dict | None = None, extra_points: tuple[int, ...] = (),
                budget: int | None = None, host: bool = False, quick: bool = False) -> int:  # fmt: skip
    """Rows of family ``name``'s pinned cases (``pinned_specs``), on top of its budget. ``budget``: the family's rows
    (None: too few to hold its max-batch case, as at a small ``--rows``); ``host``: the run's max-batch case is its;
    ``quick``: the quick look's thin sample of them (``quick_positions``)."""
    absorbed = not quick and budget is not None and absorbs_max_batch(name, budget, max_batch, None, experts, topk, contract, extra_points)
    pins = pinned_specs(name, max_batch, bias=bias, experts=experts, topk=topk, contract=contract, admitted=admitted,
                        extra_points=extra_points, max_batch_case=not quick and (host or (name in MAX_BATCH_FAMILIES and not absorbed)))  # fmt: skip
    kept = quick_positions(name, pins, max_batch, _class_points(None, experts, topk, contract, extra_points)) if quick else range(len(pins))
    return sum(pins[position][0] for position in kept)


# --quick: a first look in seconds on a CPU. Every family still runs (its first cases, QUICK_ROWS over all families,
# no bulk cases) and every pinned dtype pair, layout, call context and call option still runs, each once, at one launch
# class (the classes taken in turn, so that every class meets some), not in every class; the batch-size sweep keeps the
# empty batch and each side of every launch-class boundary only (no powers of two, no tile tails, no max-batch case).
# The cases it keeps are the full plan's own (same seeds, same replay ids): a quick FAIL's replay line is a full run's.
QUICK_ROWS = 4_096


def quick_positions(name: str, pins: list[tuple[int, dict]], max_batch: int | None, class_points: tuple[int, ...]) -> list[int]:
    """The positions in family ``name``'s full pinned list (``pinned_specs``, no max-batch case) that a quick look
    keeps: each distinct pin (a dtype pair, layout, context or option) at one of its launch classes, in turn from the
    family's place in the table; ``batch_sizes``' plain sizes only at the boundaries (1, 2, each side of a switch
    point in ``class_points``) and the empty batch."""
    if max_batch is None:
        return []
    boundaries = quick_boundaries(max_batch, class_points)
    groups: dict[tuple, list[tuple[int, int]]] = {}  # a pin's fields -> its (position, rows), one per launch class
    for position, (rows, fields) in enumerate(pins):
        groups.setdefault(tuple(sorted(fields.items())), []).append((position, rows))
    turn = list(FAMILIES).index(name) if name in FAMILIES else 0
    kept = []
    for k, (key, members) in enumerate(groups.items()):
        if name == "batch_sizes" and not key:  # the sweep and the tails: the boundaries only
            kept += [position for position, rows in members if rows == 0 or rows in boundaries]
        else:
            kept.append(members[(k + turn) % len(members)][0])
    return sorted(kept)


def quick_boundaries(max_batch: int, class_points: tuple[int, ...]) -> tuple[int, ...]:
    """The batch sizes a quick look's sweep keeps: 1, 2 and each side of every switch point of the checked shape."""
    return tuple(sorted(n for n in {1, 2, *(m for p in class_points if p > 1 for m in (p - 1, p))} if n <= max_batch))


@dataclass(frozen=True)
class QuickLook:
    """What a quick look (``--quick``) ran of the full plan, and what it left out, in words for the console and the
    report (``left_out``): a quick PASS is not a full check."""

    cases: int
    rows: int
    full_cases: int
    full_rows: int
    full_rows_option: int  # the --rows of the full plan compared with (the default)
    max_batch: int
    classes: tuple[int, ...]  # one batch of every launch class: where the full plan runs every pin
    boundaries: tuple[int, ...]  # the sweep sizes the quick look keeps

    def left_out(self) -> list[str]:
        sizes = ", ".join(f"{n:,}" for n in self.boundaries)
        classes = ", ".join(f"{n:,}" for n in self.classes)
        return [
            f"a quick look: {self.cases:,} cases, {self.rows:,} rows of the full plan's {self.full_cases:,} cases, "
            f"{self.full_rows:,} rows (--rows {self.full_rows_option:,}); a quick PASS is not a full check: run without --quick for one",
            f"left out by --quick: the bulk rows ({QUICK_ROWS:,} rows over the families, not --rows {self.full_rows_option:,}); "
            f"every pinned dtype pair, layout, call context and call option ran at one launch class, not at each of {classes}; "
            f"the batch-size sweep kept the empty batch and {sizes} (no powers of two, no tile tails, no max-batch case of {self.max_batch:,} rows)",
        ]  # fmt: skip


GPU_MAX_BATCH = 65_536  # the largest batch the plan makes on a GPU by default (--max-batch)
CPU_MAX_BATCH = 16_385  # on a CPU: one case above 16,384 (what a CPU's bulk cases stop at)
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


def launch_class_sizes(max_batch: int, points: tuple[int, ...] = ()) -> tuple[int, ...]:
    """One batch size of every launch class up to ``max_batch``, the smallest: 1 and 2 (one row is a class of
    its own in many kernels, the decode step, unpublished), each switch point (the first batch of its class), and
    ``PINNED_ROWS`` (rows enough for a dtype's data; capped at ``max_batch``)."""
    return tuple(sorted(n for n in {1, 2, min(PINNED_ROWS, max_batch), *points} if n <= max_batch))


# The default of --max-batch for every run of this environment, where set. The test suite sets it (tests/conftest.py:
# most tests are about something other than batch coverage, and the CPU sweep to 16,385 is ~48,000 rows per check);
# the tests of the sweep itself unset it. A run under it says so (``check --plan``, the summary's ``max_batch``).
MAX_BATCH_ENV = "ROUTER_CONTRACTS_MAX_BATCH"


def env_max_batch() -> int | None:
    """``$ROUTER_CONTRACTS_MAX_BATCH`` as a batch size (None where unset or empty); ValueError, one line, otherwise."""
    text = os.environ.get(MAX_BATCH_ENV, "").strip()
    if not text:
        return None
    try:
        value = int(text.replace(",", "").replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{MAX_BATCH_ENV}={text!r} is not a batch size; set a whole number >= 1 (or unset it for the default)")
    return value


def default_max_batch(device: str, points: tuple[int, ...] = ()) -> int:
    """``--max-batch`` when none is given: ``$ROUTER_CONTRACTS_MAX_BATCH`` where set; else 65,536 on a GPU, and on
    a CPU 16,385 (one case above 16,384), or past the largest switch point of a known kernel when that is larger."""
    from_env = env_max_batch()
    if from_env is not None:
        return from_env
    top = GPU_MAX_BATCH if device.startswith("cuda") else CPU_MAX_BATCH
    return max([top, *(p + 1 for p in points)])


# The most rows one block of a kernel takes (radix4's warp launch: RADIX4_TOKENS_PER_BLOCK, 1..16): a batch's last
# block holds M mod ROW_TILE rows, and a kernel's tail handling can be wrong for some of those counts only.
ROW_TILE = 16


def tail_sizes(max_batch: int, points: tuple[int, ...] = ()) -> tuple[int, ...]:
    """``ROW_TILE`` consecutive batch sizes from the first of every launch class past one row (2, each switch point),
    within the class and ``max_batch``: every remainder of M modulo every tile of up to ``ROW_TILE`` rows, in every
    launch shape. The sweep's sizes (2^n + 1, each side of a point) leave a tile's tail at one or two counts."""
    _check_batch(max_batch, points)
    starts = sorted({2, *(p for p in points if p >= 2)})
    sizes: set[int] = set()
    for start, end in zip(starts, [*starts[1:], max_batch + 1]):
        sizes.update(range(start, min(start + ROW_TILE, end, max_batch + 1)))
    return tuple(sorted(sizes))


def _check_batch(max_batch, points) -> None:
    """ValueError, one line naming the argument and the fix, for a ``max_batch`` or ``points`` that are not batch sizes."""
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 0:
        raise ValueError(f"max_batch={max_batch!r} is not a batch size; pass a whole number >= 0 (e.g. max_batch=16385)")
    if not isinstance(points, (tuple, list, set, frozenset)) or any(isinstance(p, bool) or not isinstance(p, int) for p in points):
        raise ValueError(f"points={points!r} is not a tuple of batch sizes; pass whole numbers, e.g. points=(7, 1585)")


def sweep_sizes(max_batch: int, points: tuple[int, ...] = ()) -> tuple[int, ...]:
    """One batch size of every class from 1 to ``max_batch``: 1, the first size past each power of two
    (2, 3, 5, 9, ... 1025, 2049, ...), ``max_batch`` itself, and both sides of every switch point."""
    _check_batch(max_batch, points)
    sizes = {1, max_batch}
    power = 1
    while power < max_batch:
        sizes.add(power + 1)
        power *= 2
    for point in points:
        sizes.update({point - 1, point})
    return tuple(sorted(n for n in sizes if 1 <= n <= max_batch))


# The routed scaling factors a case draws from (contracts.cases.build draws one per case): 1.0 and two that are not.
# oracle.SCALING_FACTORS's values, written out: importing oracle here would import torch before a command has checked
# its arguments (tests/test_first_hour.py); tests/test_admitted_options.py keeps the two equal.
SCALING_FACTORS = (1.0, 2.5, 2.827)
# Pinned with every renormalize option in every launch class, never drawn (drawing them would change every drawn
# case's bits): a factor below 1 and one above every drawn factor (16, a released model's). A kernel that takes
# max(factor, 1) or keeps the factor in a narrow range is right on the drawn three and wrong on a model's own.
UNUSUAL_SCALING_FACTORS = (0.375, 16.0)

PINNED_ROWS = 64  # the rows of a pinned dtype or layout case
# The families whose data already runs in every launch class: random_bf16 and random_fp32 in their dtype and layout
# pins, batch_sizes in its sweep and option pins. Every other family gets one plain case of each class.
FAMILY_DATA_PINNED_ELSEWHERE = frozenset({"random_bf16", "random_fp32", "batch_sizes"})
# The families whose rows mean the same with any bias (the others' bias is what they test: -inf masks, subnormal or
# signed-zero biases, a bias that decides a zero sum): each also runs with an all-zero bias in every launch class.
ZERO_BIAS_FAMILIES = frozenset({"random_bf16", "bf16_near_ties", "all_equal", "tie_pool_straddle", "tie_pool_above", "nan_sparse",
                                "nan_dense", "inf_logits", "saturated", "strided"})
# The dtypes a pinned case gives the bias: with the families' logits (bf16, fp32) and pinned fp16 logits, every
# (logits, bias) pair of the three float dtypes the contracts read is made (kernels load each pair differently).
BIAS_DTYPES = ("bf16", "fp16", "fp32")
# The layouts whose column stride is not 1, pinned in random_bf16 and random_fp32 (bf16 and fp32 logits): every
# other column of a [M, 2E] buffer, and the transpose of an [E, M] buffer (row stride 1 < E). A router that reads the
# storage as if it were contiguous, or takes the row stride alone, is wrong there only. And (random_bf16, with a
# bias) a bias of stride 2: one that indexes the bias's storage at stride 1.
LOGITS_STRIDES: tuple[dict, ...] = ({"column_stride": 2}, {"transposed": True})
BIAS_STRIDES: tuple[dict, ...] = ({"bias_stride": 2},)
# Where pinned contiguous logits and biases start in their buffers: one element in (not aligned for vector loads), and
# ALIGNED_OFFSET elements in (512 bytes or more: as aligned as an allocation, but not its start, as a row slice of a
# larger batch is). A kernel that takes the storage's pointer for an aligned tensor's (vector path) reads the
# second from the wrong place, and only the second.
ALIGNED_OFFSET = 256
START_OFFSETS = (1, ALIGNED_OFFSET)
GRAD_MODES = ("on", "off", "inference")
BIAS_PARAMETERS = ("frozen", "trainable")
# The contexts a call is pinned in: every grad mode, with the bias as a plain tensor or either kind of nn.Parameter,
# the logits requiring grad or not (grad on only) and the call under autocast or not, but the default (grad on, plain
# tensors, no autocast: every other case). A kernel wrapper whose path depends on torch.is_grad_enabled(), inference
# mode, an input's requires_grad (a custom op's autograd kernel, a fallback for tensors that require grad) or
# torch.is_autocast_enabled() is checked in each, and in each conjunction of them; the autocast dtype, the default
# dtype and deterministic algorithms in each grad mode. The first eight (grad mode x bias)
# keep their place, so the seeds of the cases that pinned them before stay what they were. Without a bias: the
# contexts with a plain bias.
def _call_contexts() -> tuple[dict, ...]:
    combos = [(m, p, False, False) for m in GRAD_MODES for p in (None, *BIAS_PARAMETERS)]
    combos += [(m, p, g, a) for m in GRAD_MODES for p in (None, *BIAS_PARAMETERS) for g in ((False, True) if m == "on" else (False,))
               for a in (None, "bf16") if g or a]  # fmt: skip
    fields = ("grad_mode", "bias_parameter", "logits_grad", "autocast")
    contexts = [{k: v for k, v in zip(fields, combo) if v or k == "bias_parameter"} for combo in combos if combo != ("on", None, False, False)]
    # A bf16 default dtype in each grad mode, and in a training step's context (a trainable bias, logits requiring
    # grad): what a router makes without a dtype is bf16 then, whatever the rest of the context is.
    contexts += [{"grad_mode": m, "bias_parameter": None, "default_dtype": "bf16"} for m in GRAD_MODES]
    contexts += [{"grad_mode": "on", "bias_parameter": "trainable", "logits_grad": True, "default_dtype": "bf16"}]
    # Autocast to fp16 (a path chosen by torch.get_autocast_dtype) in each grad mode and in a training step; and
    # deterministic algorithms (torch.are_deterministic_algorithms_enabled) in each grad mode. Appended, so the
    # contexts above keep their seeds.
    contexts += [{"grad_mode": m, "bias_parameter": None, "autocast": "fp16"} for m in GRAD_MODES]
    contexts += [{"grad_mode": "on", "bias_parameter": "trainable", "logits_grad": True, "autocast": "fp16"}]
    contexts += [{"grad_mode": m, "bias_parameter": None, "deterministic": True} for m in GRAD_MODES]
    return tuple(contexts)


CALL_CONTEXTS: tuple[dict, ...] = _call_contexts()
# The contexts random_fp32 pinned before the logits' grad and autocast were (their cases keep their seeds).
_FIRST_CONTEXTS = 3 * 3 - 1


def _own_scaling(contract: str | None, admitted: dict | None) -> float | None:
    """The contract's own ``routed_scaling_factor`` (``admitted["default_scaling"]`` where given, else the built-in
    contract's of that name); None where unknown."""
    if admitted and admitted.get("default_scaling") is not None:
        return float(admitted["default_scaling"])
    if not contract:
        return None
    try:
        import oracle

        return float(oracle.BUILTIN_CONTRACTS[contract].routed_scaling_factor) if contract in oracle.BUILTIN_CONTRACTS else None
    except Exception:  # noqa: BLE001 -- a plan without oracle's contracts pins the usual factors only
        return None


# The families whose pinned cases reach --max-batch at every --rows (batch_sizes: its sweep): a case of max_batch rows in
# one call, with their dtypes' data. Every other family reaches it inside its budget where the budget holds it
# (``absorbs_max_batch``: its first max_batch bulk rows come as one case of max_batch rows, no row more), and a run
# with none of these families and no such budget gives its first family one (``max_batch_host``). A case of
# max_batch rows for every family at every --rows would add ~146,000 rows (25 %) to the CPU main job.
MAX_BATCH_FAMILIES = frozenset({"random_bf16", "random_fp32"})


def _class_points(points, experts, topk, contract, extra_points) -> tuple[int, ...]:
    if points is None:
        points = launch_points(experts, topk, contract) if experts is not None and topk is not None else ()
    return tuple(points) + tuple(extra_points)


def _max_batch_missing(name: str, max_batch: int | None, class_points: tuple[int, ...]) -> bool:
    """Whether family ``name``'s pinned cases leave ``max_batch`` out (batch_sizes' sweep ends at it; a max_batch of a
    launch class's size is one of every family's classes)."""
    return max_batch is not None and name != "batch_sizes" and max_batch not in launch_class_sizes(max_batch, class_points)


def absorbs_max_batch(name: str, budget: int, max_batch: int | None, points=None, experts=None, topk=None, contract=None,
                      extra_points: tuple[int, ...] = ()) -> bool:  # fmt: skip
    """Whether family ``name``'s budget holds its coverage cases and a case of ``max_batch`` rows: then that case is
    run in place of ``max_batch`` of its bulk rows (no row more)."""
    return _max_batch_missing(name, max_batch, _class_points(points, experts, topk, contract, extra_points)) and (
        budget - _coverage_rows(name) >= max_batch)


def max_batch_host(families: list[str], budgets: dict[str, int], max_batch: int | None, points=None, experts=None, topk=None,
                   contract=None, extra_points: tuple[int, ...] = ()) -> str | None:  # fmt: skip
    """The family that carries one pinned case of ``max_batch`` rows because no family of the run reaches it otherwise
    (none of ``batch_sizes`` and ``MAX_BATCH_FAMILIES``, no budget that holds one); None when one does."""
    if max_batch is None or not families or any(f == "batch_sizes" or f in MAX_BATCH_FAMILIES for f in families):
        return None
    class_points = _class_points(points, experts, topk, contract, extra_points)
    if not _max_batch_missing(families[0], max_batch, class_points):
        return None
    if any(absorbs_max_batch(f, budgets[f], max_batch, class_points) for f in families):
        return None
    return families[0]


def pinned_specs(name: str, max_batch: int | None, *, bias: bool = True, points: tuple[int, ...] | None = None,
                 experts: int | None = None, topk: int | None = None, contract: str | None = None,
                 admitted: dict | None = None, extra_points: tuple[int, ...] = (), max_batch_case: bool = False) -> list[tuple[int, dict]]:  # fmt: skip
    """The pinned cases of family ``name`` as ``(rows, fields)`` (see the module docstring); none without
    ``max_batch``. The dtype and layout cases, and ``batch_sizes``' cases of each pair of call options the contract
    admits (``admitted``: its ``admitted_options()``; None admits all), run at one batch of every launch class
    (``launch_class_sizes``) of the kernels at ``(experts, topk)`` under ``contract`` (``launch_points``);
    ``points``, where given, are the switch points of both the sweep and the classes; ``extra_points`` (the
    candidate's own, ``candidate_points``) are added to both."""
    if max_batch is None:
        return []
    sweep_points = (switch_points() if points is None else points) + tuple(extra_points)
    if points is None:
        points = launch_points(experts, topk, contract) if experts is not None and topk is not None else ()
    points = tuple(points) + tuple(extra_points)  # the candidate's own (candidate_points)
    if name == "batch_sizes":  # the empty batch first (an idle rank routes 0 tokens), then one of every size class,
        # then every pair of call options the contract admits in every launch class (kernels are built per option)
        renorms = tuple(admitted["renormalize"]) if admitted else (True, False)
        factors = admitted["routed_scaling_factor"] if admitted else None
        scalings = SCALING_FACTORS + UNUSUAL_SCALING_FACTORS if factors is None else tuple(s for s in SCALING_FACTORS if s in factors)
        options = [{"renormalize": r, "scaling": s} for r in renorms for s in scalings] if len(renorms) * len(scalings) > 1 else []
        sweep = sweep_sizes(max_batch, sweep_points)
        tails = [n for n in tail_sizes(max_batch, points) if n not in sweep]
        classes = launch_class_sizes(max_batch, points)
        # the model's own routed_scaling_factor (DeepSeek-V4's 1.5, LongCat-Flash's 6) where the contract admits any
        # and the drawn and unusual factors leave it out: a router wrong only at its own model's factor fails here.
        # Last, so that the cases above keep their seeds (contracts.cases.exercised names the regime).
        own = _own_scaling(contract, admitted)
        own_options = [{"renormalize": r, "scaling": own} for r in renorms] if factors is None and own is not None and own not in scalings else []
        return [(0, {})] + [(n, {}) for n in sweep] + [(rows, o) for rows in classes for o in options] + [
            (n, {}) for n in tails] + [(rows, o) for rows in classes for o in own_options]
    fields: list[dict] = []
    if name in ("random_bf16", "random_fp32") and bias:
        fields = [{"bias_dtype": dtype} for dtype in BIAS_DTYPES]
        if name == "random_bf16":  # aligned contiguous logits, a bias of each dtype one element into its buffer (a
            # kernel that tests the logits' alignment for vector loads but not the bias's reads the bias misaligned)
            # and ALIGNED_OFFSET elements in (one that takes the storage's pointer on its vector path)
            fields += [{"bias_dtype": dtype, "bias_offset": offset} for offset in START_OFFSETS for dtype in BIAS_DTYPES]
        if name == "random_fp32":  # fp16 logits (randn * 2: no overflow), with each bias dtype
            fields += [{"logits_dtype": "fp16", "bias_dtype": dtype} for dtype in BIAS_DTYPES]
        # contiguous logits (row stride E) one element into their buffer: a kernel that picks vector loads by
        # is_contiguous() alone reads them misaligned (the strided family's rows are never contiguous); and
        # ALIGNED_OFFSET elements in, aligned: a kernel that reads the storage's start on its vector path is wrong there
        fields += [{"logits_offset": o} for o in START_OFFSETS] + (
            [{"logits_dtype": "fp16", "logits_offset": o} for o in START_OFFSETS] if name == "random_fp32" else [])
        fields += [*LOGITS_STRIDES, *(BIAS_STRIDES if name == "random_bf16" else ())]
        fields += [*CALL_CONTEXTS[:_FIRST_CONTEXTS]] if name == "random_fp32" else []
    elif name in ("random_bf16", "random_fp32"):  # no bias: the logits' dtype and layout alone
        fields = [{"logits_offset": o} for o in START_OFFSETS] + ([{"logits_dtype": "fp16"}, *({"logits_dtype": "fp16", "logits_offset": o} for o in START_OFFSETS)]
                                                                  if name == "random_fp32" else []) + [*LOGITS_STRIDES]
        fields += [c for c in CALL_CONTEXTS[:_FIRST_CONTEXTS] if c["bias_parameter"] is None] if name == "random_fp32" else []
    elif FAMILIES[name].strided:
        fields = [{"offset": 0}]
    classes = launch_class_sizes(max_batch, points)
    # every pinned dtype pair and layout in every launch class: a kernel's loads are written per launch shape (a
    # transposed one-row batch is contiguous: none)
    pins = [(rows, f) for f in fields for rows in classes if rows > 1 or not f.get("transposed")]
    if name not in FAMILY_DATA_PINNED_ELSEWHERE:  # the family's own rows (ties, NaN, infinities, ...) in every launch
        # class too: its sizes reach a class only by chance and only with budget (nan_sparse's 1, 64, 1,024 never
        # meet a block launch of 2..6 rows or a dense one), and a launch shape's tie or NaN handling is its own code
        pins += [(rows, {}) for rows in classes]
    if bias and name in ZERO_BIAS_FAMILIES:  # and with an all-zero bias (a freshly initialised e_score_correction_bias):
        # a kernel may take a bias-free path for it, with its own NaN, infinity and tie handling
        pins += [(rows, {"zero_bias": True}) for rows in classes]
    if name in ("random_bf16", "random_fp32"):  # every call context with every logits dtype (bf16 here, fp32 and fp16
        # there), in every launch class: a path a context selects (an engine's fused inference op, a training
        # fallback) has dtype and launch handling of its own. Last, so that the cases above keep their seeds.
        contexts = [c for c in CALL_CONTEXTS if bias or c["bias_parameter"] is None]
        if name == "random_bf16":  # autocast to fp16 with fp32 and fp16 logits only: a model under it makes no bf16
            # logits (its gate's output is fp16), and bf16 fed to an op autocast casts to fp16 loses range on the way
            contexts = [c for c in contexts if c.get("autocast") != "fp16"]
        later = contexts
        if name == "random_fp32":  # its first contexts with fp32 logits are pinned above; and each with fp16 logits
            done = len([c for c in CALL_CONTEXTS[:_FIRST_CONTEXTS] if bias or c["bias_parameter"] is None])
            later = contexts[done:] + [{**c, "logits_dtype": "fp16"} for c in contexts]
        pins += [(rows, f) for f in later for rows in classes]
    if max_batch_case and max_batch not in classes:  # one call of max_batch rows (MAX_BATCH_FAMILIES, max_batch_host);
        # last, so that the cases above keep their seeds
        pins += [(max_batch, {})]
    return pins


COVERAGE_PASSES = 2
DEFAULT_BULK_ROWS = 65_536  # on a GPU; a bulk case's [M, E] work tensors are about 0.25 GB each there
CPU_BULK_ROWS = 16_384  # on a CPU: keeps a check's memory well under 2 GiB


def bulk_rows_for(covered, *, experts: int, topk: int, device: str, max_rows: int | None = None) -> int:
    """The rows of one candidate call in a bulk case: the largest of 65,536 / 16,384 / 4,096 / 1,024 (CPU: from
    16,384) that ``covered`` accepts for bf16 or fp32 logits, capped by a declared ``max_rows``; else 1,024.
    A bulk case of more rows (``plan_bulk_rows``) reaches the candidate in calls of this size."""
    import torch

    top = DEFAULT_BULK_ROWS if device.startswith("cuda") else CPU_BULK_ROWS
    if max_rows:
        top = min(top, max_rows)
    sizes = [top] + [n for n in (16_384, 4_096, 1_024) if n < top]
    for rows in sizes:
        for dtype in (torch.bfloat16, torch.float32):
            try:
                if covered(rows=rows, experts=experts, topk=topk, dtype=dtype, bias_dtype=dtype):
                    return rows
            except Exception:  # noqa: BLE001 -- a gate that raises shows when the cases run
                return rows
    return min(sizes[-1], top)


def plan_bulk_rows(device: str) -> int:
    """The rows of one bulk case on ``device``: what the harness generates, routes and compares at a time."""
    return DEFAULT_BULK_ROWS if device.startswith("cuda") else CPU_BULK_ROWS


def call_size(spec: CaseSpec, call_rows: int | None) -> int:
    """The rows of the candidate's largest call on ``spec``: a bulk case comes in calls of at most ``call_rows``."""
    return min(spec.rows, call_rows) if spec.bulk and call_rows else spec.rows


def call_sizes(spec: CaseSpec, call_rows: int | None) -> list[int]:
    """The rows of each call the candidate gets on ``spec``, in order: a bulk case of more than ``call_rows`` rows comes
    in calls of ``call_rows`` and a last one of the rest (``contracts.candidates.calling.CaseRunner``), any other case
    in one call. ``check --plan`` lists these, not the cases' rows."""
    if spec.bulk and call_rows and spec.rows > call_rows:
        return [min(call_rows, spec.rows - start) for start in range(0, spec.rows, call_rows)]
    return [spec.rows]


def _coverage_rows(name: str) -> int:
    # Two passes over the sizes; for a family with drawn sizes, its sizes once and as many rows again drawn.
    return COVERAGE_PASSES * sum(FAMILIES[name].sizes)


@dataclass(frozen=True)
class BulkTail:
    """A family's bulk cases as a count, not one by one: ``count`` cases like ``first`` (its family, shape and fields),
    case indices ``first_index`` on, each of ``first.rows`` rows but the last, of ``last_rows``. At ``--rows 1e12`` a
    family has ~10^7 of them: ``check --plan`` and a shard's row sum count them arithmetically."""

    first: CaseSpec
    first_index: int
    count: int
    last_rows: int
    seed: int  # the run's seed: the cases' seeds derive from it and their index

    @property
    def rows(self) -> int:
        return (self.count - 1) * self.first.rows + self.last_rows

    def spec(self, k: int) -> CaseSpec:
        """The ``k``-th (0-based) of the cases, as ``iter_plan`` yields it."""
        import dataclasses

        rows = self.last_rows if k == self.count - 1 else self.first.rows
        return dataclasses.replace(self.first, case_seed=_seed(self.seed, self.first.family, self.first_index + k), rows=rows)

    def specs(self) -> Iterator[CaseSpec]:
        return (self.spec(k) for k in range(self.count))

    def representatives(self) -> list[CaseSpec]:
        """The first case and the last (of another size where the rows do not divide evenly): every call size, dtype
        pair and layout of the tail (its cases differ in seed only)."""
        return [self.first] + ([self.spec(self.count - 1)] if self.count > 1 else [])

    def calls(self, call_rows: int | None) -> int:
        """The candidate's calls on the tail's cases (``call_sizes`` of each, summed)."""
        return (self.count - 1) * len(call_sizes(self.first, call_rows)) + len(call_sizes(self.spec(self.count - 1), call_rows))


@dataclass(frozen=True)
class PlanCount:
    """What a plan holds, counted without enumerating its bulk cases: for ``check --plan`` and the line a check
    prints before it runs. ``representatives``: every pinned and coverage case, and each bulk tail's first and last
    (what ``contracts.cases.coverage.coverage_of`` needs: a tail's other cases differ in seed only)."""

    cases: int
    rows: int
    calls: int
    bulk_rows: int  # the rows of the bulk cases (the rest: coverage and pinned cases)
    representatives: tuple[CaseSpec, ...]


def count_plan(parts: Iterable["CaseSpec | BulkTail"], call_rows: int | None = None) -> PlanCount:
    """Count ``iter_plan_parts``' output: cases, rows and calls (``call_rows``: the candidate's largest call)."""
    cases = rows = calls = bulk = 0
    kept: list[CaseSpec] = []
    for part in parts:
        if isinstance(part, BulkTail):
            cases, rows, calls, bulk = cases + part.count, rows + part.rows, calls + part.calls(call_rows), bulk + part.rows
            kept += part.representatives()
        else:
            cases, rows, calls = cases + 1, rows + part.rows, calls + len(call_sizes(part, call_rows))
            bulk += part.rows if part.bulk else 0
            kept.append(part)
    return PlanCount(cases, rows, calls, bulk, tuple(kept))


def shard_rows(parts: Iterable["CaseSpec | BulkTail"], index: int, count: int) -> int:
    """The rows of ``shard(iter_plan(...), index, count)``, the tails counted arithmetically: the shard takes the
    cases at positions ``index - 1`` mod ``count``."""
    total, position = 0, 0
    for part in parts:
        if not isinstance(part, BulkTail):
            total += part.rows if position % count == index - 1 else 0
            position += 1
            continue
        first = (index - 1 - position) % count  # the tail's first case in the shard
        taken = len(range(first, part.count, count))
        if taken:  # each of first.rows, but the tail's last case where the shard takes it
            last_taken = (part.count - 1 - first) % count == 0
            total += taken * part.first.rows - (part.first.rows - part.last_rows if last_taken else 0)
        position += part.count
    return total


def iter_plan(families: list[str], total_rows: int, seed: int, experts: int, topk: int, **options) -> Iterator[CaseSpec]:
    """Spread ``total_rows`` over ``families`` by share, one spec at a time; deterministic in ``seed``.

    Coverage cases first (see the module docstring), then bulk cases of
    ``bulk_rows`` (``None``: no bulk cases, the sizes cycle as in earlier
    releases). An iterator, so a billion rows run in constant memory.
    ``admitted``: the contract's ``admitted_options()``; cases draw only those call options.
    ``max_batch``: also run each family's pinned cases (``pinned_specs``),
    at every ``total_rows``; ``points``: the switch points (default: read
    from the kernel packages); ``contract``: the contract checked, whose
    kernels' launch classes the pinned dtype and layout cases run in;
    ``extra_points``: the candidate's own switch points (``candidate_points``).
    """
    for part in iter_plan_parts(families, total_rows, seed, experts, topk, **options):
        if isinstance(part, BulkTail):
            yield from part.specs()
        else:
            yield part


def iter_plan_parts(families: list[str], total_rows: int, seed: int, experts: int, topk: int, *, bulk_rows: int | None = DEFAULT_BULK_ROWS,
                    n_group: int = 1, topk_group: int = 1, bias: bool = True, admitted: dict | None = None, max_batch: int | None = None,
                    points: tuple[int, ...] | None = None, contract: str | None = None,
                    extra_points: tuple[int, ...] = (), quick: bool = False) -> Iterator["CaseSpec | BulkTail"]:  # fmt: skip
    """``iter_plan``'s cases, but each family's bulk cases as one ``BulkTail`` (a count): the plan of ``--rows 1e12``
    in the time of ``--rows 1``. ``quick``: a quick look's thin pinned sample (``quick_positions``; pass
    ``total_rows=QUICK_ROWS``), no max-batch case."""
    import torch  # here, not at import: the plan's names and specs load no torch

    shape = dict(experts=experts, topk=topk, n_group=n_group, topk_group=topk_group)
    extra = {} if bias else {"bias": False}
    extra.update(admitted_fields(admitted))
    budgets = _budgets(families, total_rows)
    host = None if quick else max_batch_host(families, budgets, max_batch, points, experts, topk, contract, extra_points)
    class_points = _class_points(points, experts, topk, contract, extra_points)
    for name, budget in budgets.items():
        family = FAMILIES[name]
        sizes = family.sizes
        absorbed = not quick and absorbs_max_batch(name, budget, max_batch, points, experts, topk, contract, extra_points)
        limit = budget - max_batch if absorbed else budget  # the rows of its coverage and bulk cases
        coverage = limit if bulk_rows is None else min(limit, _coverage_rows(name))
        gen = None
        index, used = 0, 0
        while used < coverage:
            if index < len(sizes):
                rows = sizes[index]
            elif family.drawn_sizes is not None:
                if gen is None:
                    gen = torch.Generator().manual_seed(_seed(seed, name, "sizes"))
                low, high = family.drawn_sizes
                rows = int(torch.randint(low, high + 1, (1,), generator=gen))
            else:
                rows = sizes[index % len(sizes)]
            rows = min(rows, coverage - used) if used else rows
            yield CaseSpec(name, _seed(seed, name, index), rows, **shape, **extra)
            used += rows
            index += 1
        pinned_cases = pinned_specs(name, max_batch, bias=bias, points=points, experts=experts, topk=topk, contract=contract,
                                    admitted=admitted, extra_points=extra_points,
                                    max_batch_case=not quick and (name == host or (name in MAX_BATCH_FAMILIES and not absorbed)))  # fmt: skip
        # a quick look keeps some of them, at their own positions: the same seeds, so the same replay ids
        kept = quick_positions(name, pinned_cases, max_batch, class_points) if quick else range(len(pinned_cases))
        for position in kept:
            rows, pinned = pinned_cases[position]
            yield CaseSpec(name, _seed(seed, name, "pinned", position), rows, **shape, **extra, **pinned)
        if absorbed:  # one call of max_batch rows, out of the family's budget
            yield CaseSpec(name, _seed(seed, name, "max_batch"), max_batch, **shape, **extra)
        if used < limit:  # the rest in bulk cases of bulk_rows rows, the last of what is left: a count, not a loop
            count = -(-(limit - used) // bulk_rows)
            first = CaseSpec(name, _seed(seed, name, index), min(bulk_rows, limit - used), **shape, bulk=True, **extra)
            yield BulkTail(first, index, count, limit - used - (count - 1) * bulk_rows, seed)


def plan(families: list[str], total_rows: int, seed: int, experts: int, topk: int, **options) -> list[CaseSpec]:
    """``iter_plan`` as a list."""
    return list(iter_plan(families, total_rows, seed, experts, topk, **options))


def shard(specs: Iterable[CaseSpec], index: int, count: int) -> Iterator[CaseSpec]:
    """The ``index``-th (1-based) of ``count`` interleaved slices of ``specs``."""
    return (s for position, s in enumerate(specs) if position % count == index - 1)
