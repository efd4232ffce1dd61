"""The candidate registry: what can be checked, under which contract, where.

A candidate is a router under test. It has a name, the contract it claims,
the devices it runs on, gates, and the deviations from its contract that it
declares (reported as expected, never failing a run).

Gates, in the order the runner asks them:
- ``supported_hardware(device)`` -> (ok, why): can this host run it at all?
- ``build(device)``: compile or load; raises on failure (tests want it red).
- ``available(device)`` -> (ok, why): never raises; the two above, swallowed.
- ``covered(rows=, experts=, topk=, dtype=, bias_dtype=)`` -> bool: the shapes
  it serves; rows outside are skipped and counted, not checked. A gate that
  also takes ``renormalize``, ``num_expert_group``, ``topk_group``,
  ``logits_strides`` (the logits' ``stride()``, (row, column) in elements) or
  ``bias_stride`` (the bias's ``stride(0)``; not given without a bias) or
  ``autocast`` (``"bf16"`` or ``"fp16"``: the call runs under
  ``torch.autocast``; not given otherwise) (by name, or ``**kwargs``) is told
  them too (``Candidate.covers``); one that does not take the strides is asked
  about every layout as if it served it, so its router is checked on them all.

Candidates come from three places: built-ins (``contracts.candidates.builtin``,
registered when the package is imported, before anything else can claim
their names), a ``package.module:attr`` spec on the command line (``attr``
is a routing callable or a ``Candidate``; the module is imported from
``sys.path``), and the ``router_contracts`` entry-point group of installed
packages (loaded at the first lookup). A *resolver* (``add_resolver``) makes
candidates from names of a pattern on demand (``radix4@M<1024``: radix4 in
batches of fewer than 1024 rows, ``contracts.candidates.batched``); a name
it makes is registered when first asked for, in every process that asks.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import inspect
import re
import traceback
from dataclasses import dataclass, field
from typing import Callable

__all__ = [
    "BOUNDED_CLAUSES_NAMED",
    "device_for",
    "Candidate",
    "CandidateLoadError",
    "DuplicateCandidateError",
    "UnknownCandidateError",
    "add_resolver",
    "all_candidates",
    "get_candidate",
    "is_spec",
    "load_spec",
    "register",
]

ENTRY_POINT_GROUP = "router_contracts"

# The clauses a declaration bounds, by name (contracts.compare.tolerance.BOUNDED_CLAUSES, which needs torch; a test
# holds the two equal): the registry loads without torch.
BOUNDED_CLAUSES_NAMED = ("weight_accuracy", "selection", "group_selection", "group_mask")


class CandidateLoadError(ValueError):
    """A ``module:attr`` spec could not be turned into a candidate."""


class UnknownCandidateError(CandidateLoadError):
    """No candidate of that name."""


class DuplicateCandidateError(ValueError):
    """Two candidates claim one name."""


def _always(**_shape) -> bool:
    return True


def _any_hardware(device: str) -> tuple[bool, str]:
    return True, "runs on any device torch supports"


def _nothing_to_build(device: str) -> None:
    return None


@dataclass
class Candidate:
    """A router under test. ``route(scores, bias, topk, renormalize, routed_scaling_factor) -> (weights, ids)``.

    For a grouped contract the harness adds ``num_expert_group=G, topk_group=TG`` as keyword
    arguments; for a contract without a correction bias, ``bias`` is None.
    """

    name: str
    route: Callable
    contract: str = "aiter"
    devices: tuple[str, ...] = ("cpu", "cuda")
    description: str = ""
    supported_hardware: Callable[[str], tuple[bool, str]] = _any_hardware
    build: Callable[[str], object] = _nothing_to_build
    covered: Callable[..., bool] = _always
    # contract name -> {clause: why}; deviations this candidate is known to have.
    expected_deviations: dict[str, dict[str, str]] = field(default_factory=dict)
    # contract name -> {clause: bound}: how far its declared catch-all clauses reach (contracts.compare.tolerance:
    # ``weight_accuracy``, the relative error of a weight; ``selection``, the relative distance past the contract's
    # cutoff of an expert chosen or left out; ``group_selection`` and ``group_mask``, the relative distance between the
    # groups kept and the best left out). Default 2^-16, an fp32 computation in another order; a router that ranks or
    # weighs in bf16 names about 2^-7. Beyond the bound a row is a mismatch whatever it declares.
    declared_bounds: dict[str, dict[str, float]] = field(default_factory=dict)
    third_party: bool = False
    # The module that holds the routing code, so an isolated worker can import it afresh.
    origin: str = ""
    # For candidates that can follow either contract (the oracle itself):
    # contract name -> the route to use when that contract is checked.
    route_for_contract: Callable[[str], Callable] | None = None
    # The largest batch (rows per call) it serves, when its ``covered`` gate cannot tell: caps the bulk cases.
    max_rows: int | None = None
    # What ``covered`` serves, in words: the reason shown for every row it skips.
    coverage: str = ""
    # The registered candidate that is this kernel launched with programmatic dependent launch (CUDA sm_90+):
    # ``bench`` times it beside this one, as its PDL column.
    pdl_variant: str = ""
    # The contracts it serves ("*": any; empty: only ``contract``). ``--candidate all --contract X`` checks those that serve X.
    contracts: tuple[str, ...] = ()
    # False: ``--candidate all`` checks it only when ``--contract`` names a contract it serves (the models' own
    # routers, hf-*: eighteen more full checks would swamp the main job on a host with transformers installed)
    in_all: bool = True
    # The ``covered`` gate takes ``contract=`` (the routing contract of the check, as given): a candidate that follows
    # several contracts (route_for_contract) and serves other shapes under each. Other gates are never passed it.
    gate_takes_contract: bool = False
    # ``bench``'s path: ``prepare_launch(scores, bias, topk, renormalize, routed_scaling_factor) -> launch``, where
    # ``launch()`` makes exactly the launches its engine makes per forward and the call did, once and untimed, what
    # the engine does at load (bias dtype, layouts, outputs, workspaces). None: ``bench`` times ``route``.
    prepare_launch: Callable[..., Callable[[], object]] | None = None

    def __post_init__(self):
        # validity (ids in range, no repeat but the allowed fallback, the outputs' kind) is no router's freedom
        for contract, clauses in (self.expected_deviations or {}).items():
            if "validity" in (clauses or {}):
                raise ValueError(f"candidate {self.name!r}: expected_deviations[{contract!r}] declares 'validity', which cannot be "
                                 "declared; fix the router's outputs (ids in [0, E), no repeats, fp32/int32 [M, topk]) instead")
        for contract, bounds in (self.declared_bounds or {}).items():
            for clause, bound in (bounds or {}).items():
                if clause not in BOUNDED_CLAUSES_NAMED:
                    raise ValueError(f"candidate {self.name!r}: declared_bounds[{contract!r}] names {clause!r}; only "
                                     f"{', '.join(BOUNDED_CLAUSES_NAMED)} carry a bound")  # fmt: skip
                if isinstance(bound, bool) or not (isinstance(bound, (int, float)) and 0 <= bound < 1):
                    raise ValueError(f"candidate {self.name!r}: declared_bounds[{contract!r}][{clause!r}] = {bound!r} must be a relative "
                                     "error in [0, 1), e.g. 2**-7 for a router that ranks or weighs in bf16")  # fmt: skip

    def covers(self, *, contract: str | None = None, **shape) -> bool:
        """``covered`` asked about one call: rows, experts, topk, dtype and bias_dtype always; the call's other
        options (renormalize, num_expert_group, topk_group) and layouts (logits_strides, bias_stride) only if the gate
        takes them, so older gates keep working (and serve every layout: their routers are checked on all of them);
        ``contract`` (the contract being checked) only to a gate that says it takes it (``gate_takes_contract``)."""
        gate = self.covered
        if contract is not None and self.gate_takes_contract:
            shape = {**shape, "contract": contract}
        asked = _gate_arguments(gate, shape)
        refused = _refused_by(gate)
        if refused:
            asked = {k: v for k, v in asked.items() if k not in refused}
        while True:
            try:
                return bool(gate(**asked))
            except TypeError as exc:  # a wrapper (``**kwargs``) around a gate that takes fewer options: drop the one it
                name = _unexpected_keyword(exc)  # names and ask again (found once per gate)
                if name is None or name not in asked or name in _GATE_BASICS:
                    raise
                asked.pop(name)
                _refuses(gate, name)

    def serves(self, contract: str) -> bool:
        return "*" in self.contracts or contract == self.contract or contract in self.contracts

    def route_under(self, contract: str) -> Callable:
        return self.route_for_contract(contract) if self.route_for_contract else self.route

    def deviations(self, contract: str) -> dict[str, str]:
        """{clause: why} it declares under ``contract``; a declared clause of ``BOUNDED_CLAUSES_NAMED`` carries its bound
        (``contracts.compare.tolerance.Bounded``)."""
        from ..compare.tolerance import DECLARED_BOUND, Bounded  # here: the registry loads without torch

        declared = dict(self.expected_deviations.get(contract, {}))
        bounds = self.declared_bounds.get(contract, {})
        for clause in BOUNDED_CLAUSES_NAMED:
            if clause in declared:
                declared[clause] = Bounded(declared[clause], bounds.get(clause, DECLARED_BOUND))
        return declared

    def available(self, device: str) -> tuple[bool, str]:
        """Never raises. ``(True, detail)`` or ``(False, the reason in one line)``."""
        kind = device.split(":")[0]
        if kind not in self.devices:
            return False, f"{self.name} runs on {'/'.join(self.devices)}, not on {kind}"
        try:
            ok, why = self.supported_hardware(device)
        except Exception as exc:  # a gate must never take the harness down
            return False, f"supported_hardware() raised {type(exc).__name__}: {exc}"
        if not ok:
            return False, why
        try:
            self.build(device)
        except Exception as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return False, f"build failed: {type(exc).__name__}: {first}"
        return True, why


_GATE_BASICS = ("rows", "experts", "topk", "dtype", "bias_dtype")
_REFUSED_OPTIONS: dict = {}  # gate -> the call's other options (or layouts) it was found to refuse by a TypeError
_UNEXPECTED = re.compile(r"unexpected keyword argument '(\w+)'")


def _unexpected_keyword(exc: TypeError) -> str | None:
    match = _UNEXPECTED.search(str(exc))
    return match[1] if match else None


def _refused_by(gate) -> frozenset[str]:
    try:
        return _REFUSED_OPTIONS.get(gate, frozenset())
    except TypeError:  # an unhashable callable: found out again on each call
        return frozenset()


def _refuses(gate, name: str) -> None:
    try:
        _REFUSED_OPTIONS[gate] = _refused_by(gate) | {name}
    except TypeError:
        pass


@functools.lru_cache(maxsize=256)
def _gate_takes(gate) -> frozenset[str] | None:
    """The keyword names ``gate`` takes (None: any, it has ``**kwargs`` or no readable signature)."""
    try:
        params = inspect.signature(gate).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params)


def _gate_arguments(gate, shape: dict) -> dict:
    try:
        takes = _gate_takes(gate)
    except TypeError:  # an unhashable callable: ask it with the basics only
        takes = frozenset(_GATE_BASICS)
    return shape if takes is None else {k: v for k, v in shape.items() if k in _GATE_BASICS or k in takes}


_REGISTRY: dict[str, Candidate] = {}
_ENTRY_POINTS_LOADED = False
_RESOLVERS: list[Callable[[str], "Candidate | None"]] = []


def add_resolver(resolver: Callable[[str], "Candidate | None"]) -> None:
    """``resolver(name)`` -> a Candidate for a name of its pattern, else None; asked before ``module:attr`` specs."""
    if resolver not in _RESOLVERS:
        _RESOLVERS.append(resolver)


def register(candidate: Candidate) -> Candidate:
    if candidate.name in _REGISTRY and _REGISTRY[candidate.name] is not candidate:
        holder = _REGISTRY[candidate.name]
        by = holder.origin + (" (a built-in)" if not holder.third_party else "")
        raise DuplicateCandidateError(f"candidate name {candidate.name!r} is already registered by {by or 'another package'}; choose another name")
    _REGISTRY[candidate.name] = candidate
    return candidate


def _load_entry_points() -> None:
    global _ENTRY_POINTS_LOADED
    if _ENTRY_POINTS_LOADED:
        return
    _ENTRY_POINTS_LOADED = True
    for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
        register(_as_candidate(ep.load(), ep.name, origin=ep.value))


def all_candidates() -> dict[str, Candidate]:
    _load_entry_points()
    return dict(_REGISTRY)


_SPEC = re.compile(r"^[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*:[A-Za-z_][\w]*(\.[A-Za-z_][\w]*)*$")


def is_spec(text: str) -> bool:
    """Whether ``text`` has the ``package.module:attr`` form that ``load_spec`` takes."""
    return bool(_SPEC.match(text or ""))


def _as_candidate(obj, name: str, origin: str) -> Candidate:
    if isinstance(obj, Candidate):
        if not obj.origin:
            obj.origin = origin
        obj.third_party = True
        return obj
    if callable(obj):
        return Candidate(
            name=name,
            route=obj,
            description=f"user callable {origin}",
            third_party=True,
            origin=origin,
        )
    raise CandidateLoadError(f"{origin} is a {type(obj).__name__}; it must be a routing callable or a contracts.Candidate")


def load_spec(spec: str) -> Candidate:
    """``package.module:attr`` -> Candidate (imported from ``sys.path``)."""
    if not is_spec(spec):
        raise CandidateLoadError(
            f"--candidate {spec!r} is neither a known name nor 'package.module:attr' "
            "(e.g. mypkg.router:route); check the spelling"
        )
    module_name, attr = spec.split(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        tail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        raise CandidateLoadError(f"could not import {module_name!r} for --candidate {spec}: {tail}") from exc
    obj = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise CandidateLoadError(f"module {module_name!r} has no attribute {attr!r} (from --candidate {spec})")
        obj = getattr(obj, part)
    return _as_candidate(obj, name=spec, origin=spec)


def get_candidate(name: str) -> Candidate:
    """A registered name, or a ``module:attr`` spec."""
    known = all_candidates()
    if name in known:
        return known[name]
    for resolver in _RESOLVERS:
        made = resolver(name)
        if made is not None:
            return register(made)
    if ":" in name:
        return load_spec(name)
    raise UnknownCandidateError(
        f"unknown candidate {name!r}; known: {', '.join(sorted(known))} (or give package.module:attr)"
    )


def device_for(candidate: Candidate | None, requested: str | None) -> str:
    """The device to run ``candidate`` on: the one asked for, else cuda when it runs there and a GPU is present.
    None: a candidate not loaded (``--plan`` of ``all``), taken to run on both."""
    import torch

    if requested:
        return requested
    devices = candidate.devices if candidate is not None else ("cpu", "cuda")
    if "cuda" in devices and torch.cuda.is_available():
        return "cuda"
    return "cpu" if "cpu" in devices else devices[0]
