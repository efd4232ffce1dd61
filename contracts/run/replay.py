"""Replay lines: the command that reruns one case (and shows one row) exactly.

A replay line names each candidate by what ``get_candidate`` resolves: its
registered name, or the ``package.module:attr`` it was loaded from. A
``Candidate`` object's display name is not enough: the registry does not
know it. When that module was imported from a directory that is neither an
installed location nor the current directory (``PYTHONPATH=src``, a
``sys.path`` entry added at run time), the line starts with
``PYTHONPATH=<dir>`` so that it replays when pasted anywhere.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
from dataclasses import dataclass

from ..cases import CaseSpec

__all__ = ["RowReplay", "candidate_lookup", "command_line", "module_root", "replay_command", "replay_one_row", "replay_pythonpath", "replay_row"]


def candidate_lookup(candidate) -> str:
    """What ``get_candidate`` takes to find ``candidate``: its registered name, else its ``module:attr`` origin, else its name."""
    from ..candidates.registry import all_candidates, is_spec

    try:
        registered = all_candidates().get(candidate.name) is candidate
    except Exception:  # noqa: BLE001 -- a broken entry point: fall back to what the candidate says of itself
        registered = False
    if registered:
        return candidate.name
    if is_spec(candidate.origin):
        return candidate.origin
    return candidate.name


def _installed_dirs() -> set[str]:
    import site
    import sysconfig

    dirs = set(site.getsitepackages()) | {site.getusersitepackages()}
    dirs |= {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return {os.path.realpath(d) for d in dirs}


def module_root(lookup: str) -> str | None:
    """The ``sys.path`` directory the module of a ``module:attr`` lookup comes from, when a replay needs it on PYTHONPATH.

    None for a registered name, a module found by an installed finder (site
    directories, an editable install) and a module in the current directory.
    The module itself is not imported (only its top-level package is looked up).
    """
    if ":" not in lookup:
        return None
    top = lookup.split(":", 1)[0].split(".", 1)[0]
    module = sys.modules.get(top)
    spec = getattr(module, "__spec__", None) if module is not None else None
    if spec is None:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        locations = list(spec.submodule_search_locations)
        if not locations:
            return None
        root = os.path.dirname(os.path.realpath(locations[0]))
    elif spec.origin and spec.has_location:
        root = os.path.dirname(os.path.realpath(spec.origin))
    else:
        return None  # built into the interpreter
    cwd = os.path.realpath(os.getcwd())
    on_path = {os.path.realpath(p or cwd) for p in sys.path}
    if root not in on_path or root == cwd or root in _installed_dirs():
        return None
    return root


def replay_pythonpath(*lookups: str | None) -> str | None:
    """The PYTHONPATH a replay of these candidates needs (``os.pathsep``-joined), or None."""
    roots = [root for root in (module_root(lookup) for lookup in lookups if lookup) if root]
    return os.pathsep.join(dict.fromkeys(roots)) or None


def replay_command(
    lookup: str,
    contract: str,
    device: str,
    spec: CaseSpec,
    row: int | None,
    against: str | None,
    exact: bool,
    repeat: int = 1,
    *,
    pythonpath: str | None = None,
) -> str:
    """The replay line of case ``spec`` (and ``row``): ``lookup`` and ``against`` as ``get_candidate`` takes them."""
    parts = ["python", "-m", "contracts.check", "--candidate", lookup, "--contract", contract, "--device", device]
    if against:
        parts += ["--against", against]
    if exact:
        parts.append("--exact")
    if (spec.experts, spec.topk) != (896, 16):
        parts += ["--experts", str(spec.experts), "--topk", str(spec.topk)]
    if repeat > 1:
        parts += ["--repeat", str(repeat)]
    comment = ""
    if getattr(spec, "source", ""):  # captured logits: the file, its digest, and (in a comment) the token the row is
        from ..cases.captured import replay_args

        extra, comment = replay_args(spec, row)
        parts += extra
    parts += ["--replay", spec.replay_id]
    if row is not None:
        parts += ["--row", str(row)]
    return command_line(parts, pythonpath, comment)


def command_line(parts: list[str], pythonpath: str | None = None, comment: str = "") -> str:
    """The one builder of every printed replay line (check, search): the words quoted (and a trailing comment, e.g. a
    captured row's token), led by the PYTHONPATH the run needed (``replay_pythonpath``) so that the line replays
    when pasted anywhere."""
    line = shlex.join(parts) + comment
    return f"PYTHONPATH={shlex.quote(pythonpath)} {line}" if pythonpath else line


@dataclass
class RowReplay:
    """One row of a case routed again: what ``check --replay ID --row N`` prints."""

    detail: object  # a RowDetail: expected and actual side by side, the clause and verdict
    failed: bool  # an unexpected mismatch (not a near tie or a declared deviation)
    candidate: str = ""  # the candidate's name, the contract's and the case's id, as the replay took them
    contract: str = ""
    case: str = ""


def replay_row(candidate, contract: str, device: str, spec: CaseSpec, row: int) -> RowReplay:
    """Route the case of ``spec`` once as the check did (one call of all its rows: a kernel may depend on the batch size),
    then compare only ``row`` with the oracle: no other row is checked and no bundle is written.

    The call runs in this process (a replay is the step after the check found the row); an exception of the candidate
    is returned as a validity row saying what it raised."""
    import oracle

    from ..candidates.calling import CaseRunner
    from ..cases.build import build_case
    from ..compare.dense import take_rows
    from ..compare.expected import expected_for
    from ..compare.verdicts import compare_case
    from ..reports.schema import RowDetail

    c = oracle.get_contract(contract)
    case = build_case(spec, device)
    if not 0 <= row < spec.rows:
        raise ValueError(f"--row {row} is outside the case {spec.replay_id} (rows 0..{spec.rows - 1})")
    call = CaseRunner(candidate.route_under(contract)).run(case)
    if call.answer is None:  # fatal, raised or no answer: the row's verdict is what the call gave
        message = call.result.message
        return RowReplay(RowDetail(row=row, clause="validity", verdict="mismatch", reason=message, family=spec.family, case=spec.replay_id), True)
    one = [row]
    import torch

    pick = torch.tensor(one, device=case.scores.device)
    sub_spec = spec.__class__(**{**spec.__dict__, "rows": 1})
    sub = case.sliced(sub_spec, pick)
    actual = take_rows(call.answer, pick)  # a dense answer's faults kept with its row
    exp = expected_for(sub, c)
    outcome = compare_case(sub, exp, actual, c, deviations=candidate.deviations(contract))
    counts = outcome.verdict_counts
    base = dict(row=row, family=spec.family, case_seed=spec.case_seed, case=spec.replay_id, renormalize=case.renormalize,
                routed_scaling_factor=case.routed_scaling_factor, output_order=c.output_order)  # fmt: skip
    if outcome.rows_detail:
        d = outcome.rows_detail[0]
        fields = {k: v for k, v in d.items() if k in RowDetail.__dataclass_fields__ and k not in base}
        detail = RowDetail(**base, **fields)
    else:
        verdict = "exact" if counts.get("exact") else "within_tolerance"
        detail = RowDetail(**base, clause="", verdict=verdict, reason="matches the oracle",
                           expected_ids=exp.ids[0].tolist(), actual_ids=actual[1][0].tolist(),
                           expected_weights=exp.weights[0].tolist(), actual_weights=actual[0][0].tolist())  # fmt: skip
    return RowReplay(detail, bool(counts.get("mismatch")))


def replay_one_row(name: str, *, contract: str | None, device: str | None, replay: str, row: int, experts: int | None = None,
                   topk: int | None = None) -> RowReplay:  # fmt: skip
    """``check --replay ID --row N``: candidate ``name`` (a registered name or ``module:attr``) on the generated case
    ``replay`` under ``contract`` (default: the candidate's), shaped as the check shaped it (the contract's groups, bias
    and admitted call options: without them a case of a contract that always renormalizes drew renormalize=False), on
    ``device`` (default: where the candidate runs); only ``row`` compared (``replay_row``). ``CandidateLoadError``,
    ``OptionError`` or ``ValueError`` with one line for what cannot be replayed."""
    import dataclasses

    import oracle

    from ..candidates.registry import device_for, get_candidate
    from .planning import RunPlan

    cand = get_candidate(name)
    contract = contract or cand.contract
    c = oracle.get_contract(contract)
    # the check's own replayed case (RunPlan's replay branch): the same shaping, the same refusals
    (spec,), _ = RunPlan(None, 0, 0, experts, topk, None, replay).shaped(c).specs(None)
    done = replay_row(cand, contract, device or device_for(cand, None), spec, row)
    return dataclasses.replace(done, candidate=cand.name, contract=c.name, case=spec.replay_id)

