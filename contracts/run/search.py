"""Property-based search for contract breaks, shrunk to a minimal reproducer (``python -m contracts search``).

Hypothesis drives the candidate with ``contracts.strategies`` inputs (few
distinct values, tie pools at the cutoff, NaN and infinities, saturated
sigmoids, biases that tie after the addition); every input is compared with
the oracle through ``contracts.compare``, so near ties and the candidate's
declared deviations are not failures. Any unexpected mismatch is shrunk by
Hypothesis, one minimal input per contract clause that broke.

Examples::

    python -m contracts search --candidate radix4 --examples 2000 --device cuda
    python -m contracts search --candidate mypkg.router:route --contract serial --seed 3
    python -m contracts search --replay reports/<run>/minimal.pt --candidate radix4

The bundle (``--out``, default ``reports/<UTC time>-search-<candidate>``):

- ``minimal.pt``: ``torch.save`` of a dict ``scores, bias, topk, renormalize,
  routed_scaling_factor, contract, candidate`` (plus ``row``, ``clause``,
  ``reason``, ``example``: the strategy's description of the input; and
  ``expert_scale`` under a contract with a per-expert weight scale, ``context``
  when the call ran in a call context other than the default: grad mode, the
  bias as a Parameter, logits requiring grad, autocast, the default dtype,
  deterministic algorithms). Other
  clauses that broke get ``minimal-<clause>.pt``.
- ``search.md``: the minimal failing row side by side (expected vs actual
  ids and weights) with the one-line replay command.
- ``search.json``: what ran, what broke, the replay commands, the environment.

The Hypothesis example database (``--database``, default
``reports/.hypothesis-db``) keeps failing inputs, so the next run tries them
first and nightly runs accumulate them.

Exit codes: 0 no failure found (or, with ``--replay``, it no longer fails);
1 a failure was found (bundle written) or still reproduces; 2 usage error;
3 the candidate is unavailable here.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

import oracle

from ..candidates import Candidate
from ..candidates.fenced_call import call_once
from ..cases import CaseSpec
from ..cases import strategies as strat
from ..cases.build import Case
from ..compare import compare_case, expected_for
from ..reports._atomic import write_atomic, write_json, write_text
from ..reports.environment import environment
from .replay import candidate_lookup

__all__ = ["DEFAULT_DATABASE", "DEFAULT_EXAMPLES", "Finding", "SearchResult", "SearchSetupError", "covered_space", "load_minimal", "merge_searches",
           "rank_share", "replay", "search", "write_search_bundle"]  # fmt: skip

SCHEMA_VERSION = 1
DEFAULT_EXAMPLES = 200
DEFAULT_DATABASE = Path("reports") / ".hypothesis-db"


class SearchSetupError(ValueError):
    """The search cannot run for this candidate (bad budget, no covered shapes, nothing generated is covered)."""


@dataclass
class Finding:
    """One input that breaks the contract, and what the comparison said about it."""

    clause: str
    reason: str
    row: int
    scores: torch.Tensor  # CPU, as passed (row stride kept)
    bias: torch.Tensor
    topk: int
    renormalize: bool
    routed_scaling_factor: float
    detail: dict  # compare's row detail: expected/actual ids and weights
    example: dict | None = None  # the strategy's description, when it came from one
    expert_scale: torch.Tensor | None = None  # the call's per-expert weight scale (contracts with one), CPU
    context: dict | None = None  # the call context (``CaseSpec`` fields: grad mode, bias Parameter, ...); None: the default


class Mismatch(AssertionError):
    """Raised inside the Hypothesis test; one subclass per clause so each clause shrinks on its own."""

    def __init__(self, finding: Finding):
        super().__init__(f"{finding.clause}: {finding.reason} (row {finding.row})")
        self.finding = finding


_MISMATCH_TYPES: dict[str, type] = {}


def _mismatch_type(clause: str) -> type:
    if clause not in _MISMATCH_TYPES:
        _MISMATCH_TYPES[clause] = type(f"Mismatch_{clause}", (Mismatch,), {})
    return _MISMATCH_TYPES[clause]


@dataclass
class SearchResult:
    candidate: str
    contract: str
    device: str
    examples_run: int = 0
    findings: list[Finding] = field(default_factory=list)  # minimal inputs, one per clause
    flaky: bool = False
    hypothesis_log: list[str] = field(default_factory=list)
    shapes: list = field(default_factory=list)
    claimed_contract: str = ""  # the candidate's own; replay needs --contract only when the search used another
    lookup: str = ""  # what --candidate takes to find the candidate again (contracts.run.replay.candidate_lookup)


# -- one comparison ---------------------------------------------------------------------


def _to_device(t: torch.Tensor, device: str) -> torch.Tensor:
    """``t`` on ``device`` in its own layout (strides, storage offset): a router wrong on a layout is wrong there too."""
    if device == "cpu":
        return t
    if t.is_contiguous() and t.storage_offset() == 0:
        return t.to(device)
    # keep the strides: move the whole backing buffer, then view it again
    backing = torch.empty(0, dtype=t.dtype).set_(t.untyped_storage()).to(device)
    return backing.as_strided(tuple(t.shape), t.stride(), t.storage_offset())


def check_input(route, contract: str, deviations: dict, scores, bias, topk, renormalize, rsf, device: str,
                expert_scale: torch.Tensor | None = None, context: dict | None = None):  # fmt: skip
    """Run ``route`` and the oracle on one input; ``(outcome, first unexpected mismatch detail or None)``.
    ``expert_scale``: the call's per-expert weight scale, passed to both (contracts that have one); ``context``: the
    call context's ``CaseSpec`` fields (grad mode, the bias as a Parameter, logits requiring grad, autocast, the default dtype,
    deterministic algorithms). The call
    is the checks' (``contracts.candidates.fenced_call``): private copies of the inputs, the context, a fence against
    ``os._exit``, the answer copied from its memory at once."""
    scores_d, bias_d = _to_device(scores, device), _to_device(bias, device)
    scale_d = None if expert_scale is None else expert_scale.to(device)
    rows, experts = scores.shape
    case = Case(CaseSpec("search", 0, rows, experts, topk, **(context or {})), scores_d, bias_d, renormalize, rsf, scale_d)
    actual, exc, changed = call_once(route, case)
    raised = None
    if exc is not None:  # the candidate's failure is a finding
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        actual, raised = ("raised",), f"raised {type(exc).__name__}: {text}"
    elif isinstance(actual, str):  # not an answer as an engine reads it (not row-major, not copyable): a validity finding
        actual, raised = ("malformed",), actual
    c = oracle.get_contract(contract)
    outcome = compare_case(case, expected_for(case, c), actual, c, deviations=deviations, inputs_changed=changed)
    bad = next((d for d in outcome.rows_detail if d["verdict"] == "mismatch"), None)
    if bad is not None and raised:
        bad = {**bad, "reason": raised}
    return outcome, bad


# -- the search -------------------------------------------------------------------------


def covered_space(candidate: Candidate):
    """(shapes, dtype pairs) the candidate covers at one row, the Kimi-K3 shape first."""
    shapes, pairs = [], []
    for experts, topk in strat.SHAPES:
        ok = [p for p in strat.DTYPE_PAIRS if candidate.covered(rows=1, experts=experts, topk=topk, dtype=getattr(torch, p[0]), bias_dtype=getattr(torch, p[1]))]
        if ok:
            shapes.append((experts, topk))
            pairs.extend(p for p in ok if p not in pairs)
    return shapes, pairs


def _describe(example: strat.RoutingExample) -> dict:
    d = dataclasses.asdict(example)
    d.pop("_cache", None)
    return json.loads(json.dumps(d))  # plain lists and dicts (torch.load(weights_only=True) reads them)


def search(
    candidate: Candidate,
    *,
    contract: str | None = None,
    device: str = "cpu",
    examples: int = DEFAULT_EXAMPLES,
    seed: int = 0,
    database: Path | None = DEFAULT_DATABASE,
) -> SearchResult:
    """Search ``candidate`` for unexpected mismatches; the findings are Hypothesis's shrunk inputs."""
    from hypothesis import HealthCheck, Phase, assume, given, settings
    from hypothesis import seed as hypothesis_seed
    from hypothesis.database import DirectoryBasedExampleDatabase
    from hypothesis.errors import Flaky, Unsatisfiable
    from hypothesis.reporting import with_reporter

    if examples < 1:
        raise SearchSetupError(f"examples={examples} must be >= 1")
    contract = contract or candidate.contract
    shapes, pairs = covered_space(candidate)
    if not shapes:
        raise SearchSetupError(f"{candidate.name} covers none of the shapes {list(strat.SHAPES)} with bf16/fp32 logits")
    route = candidate.route_under(contract)
    deviations = candidate.deviations(contract)
    result = SearchResult(candidate.name, contract, device, shapes=shapes, claimed_contract=candidate.contract, lookup=candidate_lookup(candidate))
    strategy = strat.routing_examples(shapes=tuple(shapes), dtypes=tuple(pairs), contract=contract)

    # @seed alone would switch the database off; @settings above it switches it back on.
    @settings(
        max_examples=examples,
        database=DirectoryBasedExampleDatabase(str(database)) if database else None,
        derandomize=False,
        deadline=None,
        report_multiple_bugs=True,
        print_blob=False,
        phases=tuple(Phase),
        suppress_health_check=list(HealthCheck),
    )
    @hypothesis_seed(seed)
    @given(strategy)
    def contract_holds(example):
        scores, bias = example.tensors()  # first: the gate is asked about their layouts too
        assume(
            candidate.covers(
                contract=contract, rows=example.total_rows, experts=example.experts, topk=example.topk,
                dtype=getattr(torch, example.dtype), bias_dtype=getattr(torch, example.bias_dtype), renormalize=example.renormalize,
                logits_strides=tuple(scores.stride()), bias_stride=bias.stride(0),
            )
        )  # fmt: skip
        result.examples_run += 1
        scale = example.expert_scale()
        _, bad = check_input(route, contract, deviations, scores, bias, example.topk, example.renormalize,
                             example.routed_scaling_factor, device, expert_scale=scale, context=example.context)  # fmt: skip
        if bad is not None:
            finding = Finding(
                clause=bad["clause"], reason=bad["reason"], row=bad["row"], scores=scores, bias=bias, topk=example.topk,
                renormalize=example.renormalize, routed_scaling_factor=example.routed_scaling_factor, detail=bad,
                example=_describe(example), expert_scale=scale, context=example.context or None,
            )  # fmt: skip
            raise _mismatch_type(finding.clause)(finding)

    try:
        with with_reporter(result.hypothesis_log.append):
            contract_holds()
    except Unsatisfiable as exc:
        raise SearchSetupError(f"{candidate.name} covers too few of the generated inputs to search: {exc}") from None
    except BaseException as exc:  # noqa: BLE001 -- sorted below; anything else re-raised
        found = _mismatches(exc)
        if not found:
            raise
        result.flaky = isinstance(exc, Flaky) or any(isinstance(e, Flaky) for e in _flatten(exc))
        by_clause: dict[str, Finding] = {}
        for m in found:
            by_clause.setdefault(m.finding.clause, m.finding)
        order = {name: i for i, name in enumerate(oracle.get_contract(contract).clause_names)}
        result.findings = sorted(by_clause.values(), key=lambda f: order.get(f.clause, len(order)))
    return result


def rank_share(examples: int, rank: int, world_size: int) -> tuple[int, int]:
    """Under torchrun: ``(examples, seed offset)`` of one rank; the ranks' examples add up to ``examples`` (at least 1 each)."""
    return max(1, examples // world_size + (rank < examples % world_size)), rank


def merge_searches(parts) -> tuple[SearchResult, list[dict]]:
    """The ranks' searches (``contracts.run.rank_merge.Part`` values) as one result, and a record per rank.

    Examples are summed; per clause the first rank's minimal input is kept
    (each is minimal for its own search); flaky if any rank's was.
    """
    results = [p.value for p in parts if p.value is not None]
    merged = dataclasses.replace(results[0], findings=[], hypothesis_log=[])
    merged.examples_run = sum(r.examples_run for r in results)
    merged.flaky = any(r.flaky for r in results)
    by_clause: dict[str, Finding] = {}
    for p in parts:
        if p.value is None:
            continue
        merged.hypothesis_log += [f"rank {p.rank}: {line}" for line in p.value.hypothesis_log]
        for f in p.value.findings:
            by_clause.setdefault(f.clause, f)
    order = {name: i for i, name in enumerate(oracle.get_contract(merged.contract).clause_names)}
    merged.findings = sorted(by_clause.values(), key=lambda f: order.get(f.clause, len(order)))
    ranks = []
    for p in parts:
        entry = {"rank": p.rank, "host": p.host, "device": p.device}
        if p.value is not None:
            entry.update(status="fail" if p.value.findings else "pass", examples_run=p.value.examples_run)
        else:
            entry.update(status="interrupted" if p.missing == "stopped" else "error", reason=p.error.message if p.error else p.stopped)
        ranks.append(entry)
    return merged, ranks


if sys.version_info >= (3, 11):
    _ExceptionGroup = BaseExceptionGroup  # noqa: F821 -- a builtin from Python 3.11
else:  # Python 3.10: Hypothesis raises the backport's groups (exceptiongroup, one of its dependencies there)
    from exceptiongroup import BaseExceptionGroup as _ExceptionGroup


def _flatten(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, _ExceptionGroup):
        return [e for sub in exc.exceptions for e in _flatten(sub)]
    return [exc]


def _mismatches(exc: BaseException) -> list[Mismatch]:
    return [e for e in _flatten(exc) if isinstance(e, Mismatch)]


# -- the bundle -------------------------------------------------------------------------


def _finding_dict(f: Finding, candidate: str, contract: str, device: str) -> dict:
    return {
        "scores": f.scores,
        "bias": f.bias,
        "topk": f.topk,
        "renormalize": f.renormalize,
        "routed_scaling_factor": f.routed_scaling_factor,
        "contract": contract,
        "candidate": candidate,
        "device": device,
        "row": f.row,
        "clause": f.clause,
        "reason": f.reason,
        "example": f.example,
        "schema_version": SCHEMA_VERSION,
        **({} if f.expert_scale is None else {"expert_scale": f.expert_scale}),
        **({} if not f.context else {"context": dict(f.context)}),
    }


def replay_command(path: Path, candidate: str, contract: str | None = None, device: str | None = None) -> str:
    from .replay import command_line, replay_pythonpath

    parts = ["python", "-m", "contracts", "search", "--replay", str(path), "--candidate", candidate]
    if contract:
        parts += ["--contract", contract]
    if device and device != "cpu":
        parts += ["--device", device]
    return command_line(parts, replay_pythonpath(candidate))  # check's lines and these: one builder, the PYTHONPATH kept


def _fmt(v: float) -> str:
    return f"{v:.9g}"


def _row_text(label: str, values: torch.Tensor, limit: int = 40) -> str:
    default = strat.most_common_value(values)
    entries = strat.nondefault_entries(values)
    shown = ", ".join(f"{i}: {_fmt(v)}" for i, v in list(entries.items())[:limit])
    more = f", ... ({len(entries)} in all)" if len(entries) > limit else ""
    if not entries:
        return f"{label}: every entry {_fmt(default)}"
    return f"{label}: every entry {_fmt(default)} except {len(entries)}: {{{shown}{more}}}"


def _context_text(context: dict | None) -> str:
    """", called under grad-inference:autocast" for a call context (its replay tags), "" for the default one."""
    return f", called under {':'.join(CaseSpec('search', 0, 0, 1, 1, **context).tags)}" if context else ""


def side_by_side(f: Finding, contract: str) -> list[str]:
    """The failing row: its inputs in compact form, then expected vs actual, slot by slot
    (``*`` marks a different expert, ``~`` a weight outside the contract's tolerance)."""
    scores, bias = f.scores, f.bias
    rows, experts = scores.shape
    lines = [
        f"input: {rows} row(s) x {experts} experts, top-{f.topk}, {str(scores.dtype).replace('torch.', '')} logits "
        f"(strides {tuple(scores.stride())}), {str(bias.dtype).replace('torch.', '')} bias (stride {bias.stride(0)}), "
        f"renormalize={f.renormalize}, "
        f"routed_scaling_factor={f.routed_scaling_factor}{_context_text(f.context)}",
        _row_text(f"logits row {f.row}", scores[f.row]),
        _row_text("bias", bias),
        f"{f.clause}: {f.reason}",
    ]
    d = f.detail
    if "expected_ids" not in d:
        return lines
    _, ranking = oracle.ranking_values(scores[f.row : f.row + 1].contiguous(), bias, contract)
    ranking = ranking[0]
    c = oracle.get_contract(contract)
    if c.output_order == "any":
        return lines + _as_sets(d, ranking, c, experts)
    lines.append(f"{'slot':>4}  {'expected':>8} {'actual':>8}  {'exp weight':>13} {'act weight':>13}  {'rank value exp':>15} {'rank value act':>15}")
    for j, (ie, ia, we, wa) in enumerate(zip(d["expected_ids"], d["actual_ids"], d["expected_weights"], d["actual_weights"])):
        close = (we != we and wa != wa) or abs(wa - we) <= c.weight_atol + c.weight_rtol * abs(we)
        mark = "*" if ie != ia else (" " if close else "~")
        ra = _fmt(float(ranking[ia])) if 0 <= ia < experts else "-"
        lines.append(f"{j:>4}{mark} {ie:>8} {ia:>8}  {_fmt(we):>13} {_fmt(wa):>13}  {_fmt(float(ranking[ie])):>15} {ra:>15}")
    return lines


def _as_sets(d: dict, ranking, c, experts: int) -> list[str]:
    """The failing row of an order-free contract as sets (``contracts.reports.sets``): ``*`` marks a missing or extra
    expert, ``~`` a matched one whose weight is outside the tolerance."""
    from ..reports.schema import RowDetail
    from ..reports.sets import expert_sets

    row = RowDetail(row=0, clause="", verdict="mismatch", reason="", expected_ids=d["expected_ids"], actual_ids=d["actual_ids"],
                    expected_weights=d["expected_weights"], actual_weights=d["actual_weights"], output_order="any")  # fmt: skip

    def text(value, fmt=_fmt) -> str:
        return "-" if value is None else fmt(value)

    lines = ['output order "any": the experts compared as sets, weights by expert',
             f"{'expert':>7}  {'exp col':>7} {'act col':>7}  {'exp weight':>13} {'act weight':>13}  {'rank value':>15}"]  # fmt: skip
    for x in expert_sets(row):
        we, wa = x.expected_weight, x.actual_weight
        if x.kind != "matched":
            mark = "*"
        else:
            mark = " " if (we != we and wa != wa) or abs(wa - we) <= c.weight_atol + c.weight_rtol * abs(we) else "~"
        value = _fmt(float(ranking[x.expert])) if 0 <= x.expert < experts else "-"
        lines.append(f"{x.expert:>6}{mark}  {text(x.expected_column, str):>7} {text(x.actual_column, str):>7}  "
                     f"{text(we):>13} {text(wa):>13}  {value:>15}{'  ' + x.kind if x.kind != 'matched' else ''}")  # fmt: skip
    return lines


def write_search_bundle(out: Path, result: SearchResult, *, command: str, seed: int, database, duration: float,
                        ranks: list[dict] | None = None) -> dict:  # fmt: skip
    """``minimal*.pt``, ``search.json``, ``search.md``; ``ranks``: per rank of a torchrun search (a rank that sent nothing makes it ``error``)."""
    out.mkdir(parents=True, exist_ok=True)
    minimal = []
    for i, f in enumerate(result.findings):
        path = out / ("minimal.pt" if i == 0 else f"minimal-{f.clause}.pt")
        write_atomic(path, lambda p, f=f: torch.save(_finding_dict(f, result.candidate, result.contract, result.device), p))
        contract_flag = result.contract if result.contract != result.claimed_contract else None
        minimal.append(
            {
                "file": path.name,
                "clause": f.clause,
                "reason": f.reason,
                "row": f.row,
                "rows": f.scores.shape[0],
                "experts": f.scores.shape[1],
                "topk": f.topk,
                "nondefault_logits": len(strat.nondefault_entries(f.scores[f.row])),
                "nondefault_bias": len(strat.nondefault_entries(f.bias)),
                "expected_ids": f.detail.get("expected_ids"),
                "actual_ids": f.detail.get("actual_ids"),
                "replay": replay_command(path, result.lookup or result.candidate, contract_flag, result.device),
                "example": f.example,
                "lines": side_by_side(f, result.contract),
            }
        )
    status = "fail" if result.findings else "pass"
    if ranks and any(r["status"] in ("error", "interrupted") for r in ranks):
        status = "error" if any(r["status"] == "error" for r in ranks) else "interrupted"
    doc = {
        "schema_version": SCHEMA_VERSION,
        "status": status,
        "candidate": result.candidate,
        "contract": result.contract,
        "device": result.device,
        "examples_run": result.examples_run,
        "seed": seed,
        "database": str(database) if database else None,
        "shapes": [list(s) for s in result.shapes],
        "flaky": result.flaky,
        "clauses": [m["clause"] for m in minimal],
        "minimal": [{k: v for k, v in m.items() if k != "lines"} for m in minimal],
        "hypothesis": result.hypothesis_log,
        "environment": environment(result.device),
        "command": command,
        "duration_s": round(duration, 3),
    }
    if ranks is not None:
        doc.update(world_size=len(ranks), ranks=ranks)
    write_json(out / "search.json", doc)
    md = [f"# Search: {status.upper()} `{result.candidate}` under `{result.contract}` ({result.device})", ""]
    md.append(f"{result.examples_run} inputs tried (generation and shrinking), seed {seed}, database `{database}`. Command: `{command}`")
    md.append("")
    for r in ranks or []:
        if r.get("reason"):
            md += [f"**Rank {r['rank']} ({r['status']})**: {r['reason']}", ""]
    if not minimal:
        md.append("No unexpected mismatch (near ties and declared deviations are not failures).")
    if result.flaky:
        md += ["**Flaky**: a failing input did not fail again when Hypothesis re-ran it; the candidate may be nondeterministic.", ""]
    for i, m in enumerate(minimal):
        md += [f"## {'Minimal failing input' if i == 0 else 'Also broken'}: `{m['clause']}`", ""]
        md += [f"Replay: `{m['replay']}`", "", "```", *m["lines"], "```", ""]
    write_text(out / "search.md", "\n".join(md) + "\n")
    return doc


# -- replay -----------------------------------------------------------------------------


_MINIMAL_KEYS = ("scores", "bias", "topk", "renormalize", "routed_scaling_factor")


def load_minimal(path: Path) -> dict:
    """A ``minimal.pt`` as a dict; ``ValueError`` naming the file if it is not one."""
    try:
        data = torch.load(path, weights_only=True)
    except Exception as exc:  # torch raises several kinds for a file that is not a checkpoint
        raise ValueError(f"{path} could not be read as a minimal.pt ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from None
    missing = [k for k in _MINIMAL_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        raise ValueError(f"{path} is not a contracts.search minimal.pt: it lacks {', '.join(missing)}")
    return data


def _saved_context(context, path: Path) -> dict | None:
    """A minimal.pt's call context, one of ``CALL_CONTEXTS`` (None: the default); ``ValueError`` naming the file if not."""
    from ..cases.pins import CALL_CONTEXTS

    if not context:
        return None
    if dict(context) not in [dict(c) for c in CALL_CONTEXTS]:
        raise ValueError(f"{path}: its call context {context!r} is none of the contexts a search draws; re-run the search")
    return dict(context)


def replay(path: Path, candidate: Candidate, *, contract: str | None = None, device: str = "cpu") -> bool:
    """Re-run a saved minimal input; print expected vs actual; True if it still fails."""
    data = load_minimal(path)
    contract = contract or data.get("contract") or candidate.contract
    scores, bias = data["scores"], data["bias"]
    args = (data["topk"], bool(data["renormalize"]), float(data["routed_scaling_factor"]))
    scale = data.get("expert_scale")  # saved by searches under a contract with a per-expert weight scale
    context = _saved_context(data.get("context"), path)  # saved by a search that found it in a call context
    outcome, bad = check_input(candidate.route_under(contract), contract, candidate.deviations(contract), scores, bias, *args, device,
                               expert_scale=scale, context=context)  # fmt: skip
    print(f"replay {path} on {candidate.name} ({contract}, {device}): {outcome.verdict_counts}")
    if bad is None:
        print("no unexpected mismatch: the input no longer fails")
        return False
    finding = Finding(bad["clause"], bad["reason"], bad["row"], scores, bias, *args, detail=bad, expert_scale=scale, context=context)
    print("\n".join(side_by_side(finding, contract)))
    return True


