"""Recover a candidate's expert tie priority from its answers alone: the questions, the recovery and the verification.

The questions (logits; bias zero; renormalize on, routed_scaling_factor 1, or the contract's own options where it
admits no other: ``call_options``):
``ABOVE`` = 3.0 > ``TIE`` = 1.0 > ``BELOW`` = -3.0, exact in bf16 and with
sigmoids far apart, so every faithful router ranks them the same way.

Recovery (sequential rounds; only the *set* of winners is ever trusted)
    A *set question* puts the experts not yet placed (``R``) at ``TIE`` and
    the placed ones at ``BELOW``: the k winners are the k strongest of ``R``,
    as a set. The output order inside a call is not trusted, because it need
    not be the priority order (torch.topk's is arbitrary). The order *within*
    a found set ``S`` comes from *ordering questions*: for ``j = 1..|S|-1`` a
    row with ``k - j`` filler experts (outside ``S``) at ``ABOVE``, ``S`` at
    ``TIE`` and the rest at ``BELOW``; exactly ``j`` members of ``S`` win, and
    they are its ``j`` strongest. The nested winner sets ``T_1 c T_2 c ...``
    spell out the order (an expert's rank in ``S`` is how many rows it lost).
    Ordering rows need only the set, not its order, so the ordering rows of
    round ``r`` ride in the same call as the set question of round ``r + 1``;
    the last ``k`` experts are known without asking. E=896, k=16: 56 calls of
    ``2k`` rows each (padding rows hold random logits).
    If the ordering rows of one set are not nested, the experts are ranked by
    rows won anyway and the disagreement is recorded as evidence.

Verification (batched, independent of the recovery)
    Random tie pools of log-uniform size 2..E at ``TIE``, ``a`` experts
    strictly above at distinct values and the rest strictly below at
    distinct values, with ``a`` drawn so the pool straddles the cutoff; one
    all-equal row per batch size. Probe rows sit at random row positions of
    calls of several batch sizes, the other rows hold random logits. The
    winners inside the pool must be the pool's ``k - a`` strongest by the
    recovered order. A failure is evidence that the ties depend on something
    else (batch size, row position, other values, chance).

The group tie order of a grouped contract is ``contracts.run.group_probe``'s; ``contracts.run.probe`` runs a probe
and writes ``probe.json``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..candidates import Candidate

__all__ = ["ABOVE", "BELOW", "DEFAULT_BATCH_SIZES", "TIE", "Asker", "ProbeError", "ProbeResult", "call_options", "pick_dtypes", "probe", "short_ids"]

ABOVE, TIE, BELOW = 3.0, 1.0, -3.0
DEFAULT_BATCH_SIZES = (1, 2, 7, 64, 1025)
PROBE_ROWS_PER_CALL = 64  # probe rows in one verification call; the rest are other values
MIN_POOLS_PER_SIZE = 16
EVIDENCE_KEPT = 20
_DTYPE_CHOICES = (
    (torch.bfloat16, torch.bfloat16),
    (torch.float32, torch.float32),
    (torch.bfloat16, torch.float32),
    (torch.float32, torch.bfloat16),
)


class ProbeError(Exception):
    """The candidate's answers are not a tie order (it raised, or chose a demoted expert)."""


@dataclass
class ProbeResult:
    candidate: str
    device: str
    contract: str
    experts: int
    topk: int
    dtype: str
    bias_dtype: str
    recovery_calls: int
    recovery_batch_size: int
    permutation: list[int]
    verification_calls: int = 0
    verified: dict = field(default_factory=dict)  # batch size -> {pools, failures} (or {skipped: why})
    evidence: list[dict] = field(default_factory=list)
    inconsistencies: int = 0  # recovery rows not nested + verification pools that disagreed
    recovery_disagreements: int = 0
    output_order: dict = field(default_factory=dict)

    @property
    def calls(self) -> int:
        return self.recovery_calls + self.verification_calls

    @property
    def consistent(self) -> bool:
        return self.inconsistencies == 0


def call_options(contract) -> tuple[bool, float]:
    """``(renormalize, routed_scaling_factor)`` of every question: on and 1.0, unless the contract's router cannot be
    called so (gpt-oss never renormalizes, LongCat-Flash scales by 6 only): then its own."""
    import oracle

    c = oracle.get_contract(contract)
    renormalize = True if True in c.admitted_renormalize_values else c.default_renormalize
    factors = c.admitted_scaling_factors
    return renormalize, 1.0 if factors is None or 1.0 in factors else factors[0]


class Asker:
    """Asks the candidate: one call per batch, counted, answers checked for shape and range."""

    def __init__(self, route, *, experts, topk, device, dtype, bias_dtype, groups: dict | None = None, bias: bool = True,
                 options: tuple[bool, float] = (True, 1.0)):  # fmt: skip
        self.options = options
        self.route, self.experts, self.topk = route, experts, topk
        self.device, self.dtype = device, dtype
        self.bias = torch.zeros(experts, dtype=bias_dtype, device=device) if bias else None
        self.groups = groups or {}
        self.calls = 0

    def ask(self, logits: torch.Tensor) -> list[list[int]]:
        rows = logits.shape[0]
        scores = logits.to(self.dtype).to(self.device).contiguous()
        self.calls += 1
        try:
            out = self.route(scores, self.bias, self.topk, *self.options, **self.groups)
        except Exception as exc:
            raise ProbeError(f"the candidate raised {type(exc).__name__} on call {self.calls} (M={rows}): {exc}") from exc
        if not (isinstance(out, (tuple, list)) and len(out) == 2 and isinstance(out[1], torch.Tensor)):
            raise ProbeError(f"call {self.calls}: the candidate returned {type(out).__name__}, not (weights, ids)")
        ids = out[1].detach().cpu().long()
        if tuple(ids.shape) != (rows, self.topk):
            raise ProbeError(f"call {self.calls}: ids.shape={tuple(ids.shape)}, expected {(rows, self.topk)}")
        if bool(((ids < 0) | (ids >= self.experts)).any()):
            raise ProbeError(f"call {self.calls}: expert ids outside 0..{self.experts - 1}")
        return ids.tolist()


def _other_values(gen: torch.Generator, rows: int, experts: int) -> torch.Tensor:
    """Rows of random logits that surround the probe rows."""
    return torch.randn(rows, experts, generator=gen) * 2.0


def _grid(gen: torch.Generator, n: int, lo: float, hi: float, step: float = 1 / 64) -> torch.Tensor:
    """``n`` distinct values of ``lo + i * step`` in ``[lo, hi)`` (exact in bf16 for |v| < 4), in random order."""
    slots = int((hi - lo) / step)
    if n > slots:  # more experts than grid points: ties below or above do not matter, only distinctness would
        picks = torch.randint(0, slots, (n,), generator=gen)
    else:
        picks = torch.randperm(slots, generator=gen)[:n]
    return lo + picks.double() * step



# -- recovery ---------------------------------------------------------------------------


def _set_row(remaining: list[int], experts: int) -> torch.Tensor:
    row = torch.full((experts,), BELOW)
    row[remaining] = TIE
    return row


def _fillers(members: list[int], experts: int, count: int) -> list[int]:
    inside = set(members)
    return [e for e in range(experts) if e not in inside][:count]


def _ordering_rows(members: list[int], experts: int, topk: int) -> list[torch.Tensor]:
    """Row ``j - 1`` lets exactly ``j`` members of ``members`` win (``k - j`` fillers above them)."""
    rows = []
    for j in range(1, len(members)):
        row = torch.full((experts,), BELOW)
        row[_fillers(members, experts, topk - j)] = ABOVE
        row[members] = TIE
        rows.append(row)
    return rows


def _order_members(members, answers, *, experts, topk, evidence, disagreements, batch, rows) -> list[int]:
    """Order ``members`` from the winners of their ordering rows (see the module docstring)."""
    inside = set(members)
    wins = dict.fromkeys(members, 0)
    won_sets = []
    for j, answer in enumerate(answers, start=1):
        won = [e for e in answer if e in inside]
        fillers = _fillers(members, experts, topk - j)
        if len(won) != j or sorted(e for e in answer if e not in inside) != fillers:
            raise ProbeError(
                f"an ordering row (M={batch}, row {rows[j - 1]}) gave {answer}: the {topk - j} experts {fillers} "
                f"above the tie must all win, and exactly {j} of the tied experts {short_ids(sorted(members))}"
            )
        won_sets.append(set(won))
        for e in won:
            wins[e] += 1
    order = sorted(members, key=lambda e: (-wins[e], e))
    for j, won in enumerate(won_sets, start=1):
        predicted = set(order[:j])
        if won != predicted:
            disagreements[0] += 1
            if len(evidence) >= EVIDENCE_KEPT:
                continue
            evidence.append(
                {
                    "stage": "recovery",
                    "batch_size": batch,
                    "row": rows[j - 1],
                    "pool": sorted(members),
                    "pool_size": len(members),
                    "winners_from_pool": j,
                    "predicted": sorted(predicted),
                    "got": sorted(won),
                }
            )
    return order


def _recover(asker: Asker, experts: int, topk: int, batch: int, gen: torch.Generator, evidence: list[dict]):
    """``(order strongest first, set answers in output order, ordering rows that were not nested)``."""
    disagreements = [0]
    order: list[int] = []
    remaining = list(range(experts))
    pending: list[list[int]] = []  # found sets still to be ordered, strongest set first
    set_answers = []  # (winners in output order) of each set question
    while remaining or pending:
        if remaining and len(remaining) <= topk:
            pending.append(remaining)  # the last k are known without asking
            remaining = []
        rows, spans = [], []
        for members in pending:
            part = _ordering_rows(members, experts, topk)
            spans.append((len(rows), len(part)))
            rows.extend(part)
        set_index = None
        if remaining:
            set_index = len(rows)
            rows.append(_set_row(remaining, experts))
        answers = []
        if rows:  # (sets of one expert need no ordering rows)
            logits = _other_values(gen, batch, experts)
            logits[: len(rows)] = torch.stack(rows)
            answers = asker.ask(logits)
        for members, (start, n) in zip(pending, spans):
            rows_asked = list(range(start, start + n))
            order.extend(
                _order_members(members, answers[start : start + n], experts=experts, topk=topk, evidence=evidence, disagreements=disagreements, batch=batch, rows=rows_asked)
            )
        pending = []
        if set_index is not None:
            answer = answers[set_index]
            inside = set(remaining)
            if len(set(answer)) != topk or any(e not in inside for e in answer):
                demoted = [e for e in answer if e not in inside]
                raise ProbeError(
                    f"a set question chose demoted experts {demoted} (logit {BELOW}) over tied ones (logit {TIE}); "
                    "this candidate does not select the top-k values, so it has no tie order to recover"
                )
            set_answers.append(answer)
            found = sorted(answer)
            pending = [found]
            remaining = [e for e in remaining if e not in set(found)]
    return order, set_answers, disagreements[0]


def _output_order_facts(set_answers: list[list[int]], priority: list[int]) -> dict:
    """Whether the candidate writes tied winners in priority order (true of the known rules)."""
    bad = [a for a in set_answers if a != sorted(a, key=lambda e: priority[e])]
    facts = {"tied_winners_in_priority_order": not bad, "set_questions": len(set_answers), "set_questions_out_of_order": len(bad)}
    if bad:
        facts["example"] = {"got": bad[0], "priority_order": sorted(bad[0], key=lambda e: priority[e])}
    return facts


# -- verification -----------------------------------------------------------------------


def _pool_row(gen: torch.Generator, experts: int, topk: int, all_equal: bool):
    """(logits, pool, above) for one probe row whose tie pool straddles the cutoff."""
    if all_equal:
        return torch.full((experts,), TIE), list(range(experts)), []
    pool_size = min(experts, max(2, round(math.exp(torch.rand(1, generator=gen).item() * math.log(experts)))))
    lo = max(0, topk - pool_size + 1)
    above_n = int(torch.randint(lo, topk, (1,), generator=gen))
    perm = torch.randperm(experts, generator=gen)
    above = perm[:above_n]
    pool = perm[above_n : above_n + pool_size]
    below = perm[above_n + pool_size :]
    row = torch.empty(experts, dtype=torch.float64)
    row[above] = _grid(gen, above_n, TIE + 0.5, 3.9)
    row[pool] = TIE
    row[below] = _grid(gen, len(below), -3.9, TIE - 0.5)
    return row.float(), pool.tolist(), above.tolist()


def _verify(asker: Asker, result: ProbeResult, sizes: list[int], covered, gen: torch.Generator) -> None:
    experts, topk = result.experts, result.topk
    priority = [0] * experts
    for rank, e in enumerate(result.permutation):
        priority[e] = rank
    for batch in sizes:
        if not covered(batch):
            result.verified[str(batch)] = {"skipped": f"the candidate does not cover M={batch}"}
            continue
        per_call = min(batch, PROBE_ROWS_PER_CALL)
        calls = max(1, math.ceil(MIN_POOLS_PER_SIZE / per_call))
        pools = failures = 0
        for call in range(calls):
            logits = _other_values(gen, batch, experts)
            positions = torch.randperm(batch, generator=gen)[:per_call].tolist()
            if batch > 1 and per_call > 1 and batch - 1 not in positions:
                positions[-1] = batch - 1  # the last row is a classic place for an edge bug
            probes = []
            for i, row_index in enumerate(positions):
                row, pool, above = _pool_row(gen, experts, topk, all_equal=(call == 0 and i == 0))
                logits[row_index] = row
                probes.append((row_index, pool, above))
            answers = asker.ask(logits)
            for row_index, pool, above in probes:
                pools += 1
                answer = answers[row_index]
                in_pool = set(pool)
                expect = set(sorted(pool, key=lambda e: priority[e])[: topk - len(above)])
                got = {e for e in answer if e in in_pool}
                lost_above = sorted(set(above) - set(answer))
                if got == expect and not lost_above:
                    continue
                failures += 1
                result.inconsistencies += 1
                if sum(e["stage"] == "verification" for e in result.evidence) < EVIDENCE_KEPT:
                    item = {
                        "stage": "verification",
                        "batch_size": batch,
                        "row": row_index,
                        "pool_size": len(pool),
                        "above": sorted(above),
                        "winners_from_pool": topk - len(above),
                        "predicted": sorted(expect),
                        "got": sorted(got),
                        "answer": answer,
                        "pool": sorted(pool),
                    }
                    if lost_above:
                        item["note"] = f"experts {lost_above} above the tie were not chosen"
                    result.evidence.append(item)
        result.verified[str(batch)] = {"pools": pools, "failures": failures, "calls": calls}
        result.verification_calls += calls


def pick_dtypes(candidate: Candidate, experts: int, topk: int, rows: int):
    for dtype, bias_dtype in _DTYPE_CHOICES:
        if candidate.covered(rows=rows, experts=experts, topk=topk, dtype=dtype, bias_dtype=bias_dtype):
            return dtype, bias_dtype
    return None


def probe(
    candidate: Candidate,
    *,
    contract: str | None = None,
    experts: int = 896,
    topk: int = 16,
    device: str = "cpu",
    batch_sizes: tuple[int, ...] = DEFAULT_BATCH_SIZES,
    seed: int = 0,
    verify: bool = True,
) -> ProbeResult:
    """Recover ``candidate``'s tie order over ``experts`` and verify it (see the module docstring).

    Raises ``ValueError`` for impossible arguments, ``ProbeError`` when the
    candidate's answers are not a tie order.
    """
    if experts < 2 * topk - 1:
        raise ValueError(f"experts={experts} is too small for topk={topk}: the ordering questions need E >= 2k-1 = {2 * topk - 1}")
    contract = contract or candidate.contract
    batch = 2 * topk
    dtypes = pick_dtypes(candidate, experts, topk, batch)
    if dtypes is None:
        raise ValueError(f"{candidate.name} covers none of bf16/fp32 logits at M={batch}, E={experts}, k={topk}")
    asker = Asker(candidate.route_under(contract), experts=experts, topk=topk, device=device, dtype=dtypes[0], bias_dtype=dtypes[1],
                   options=call_options(contract))  # fmt: skip
    gen = torch.Generator().manual_seed(seed)
    evidence: list[dict] = []
    order, set_answers, not_nested = _recover(asker, experts, topk, batch, gen, evidence)
    result = ProbeResult(
        candidate=candidate.name,
        device=device,
        contract=contract,
        experts=experts,
        topk=topk,
        dtype=str(dtypes[0]).replace("torch.", ""),
        bias_dtype=str(dtypes[1]).replace("torch.", ""),
        recovery_calls=asker.calls,
        recovery_batch_size=batch,
        permutation=order,
        evidence=evidence,
        inconsistencies=not_nested,
        recovery_disagreements=not_nested,
    )
    priority = [0] * experts
    for rank, e in enumerate(order):
        priority[e] = rank
    result.output_order = _output_order_facts(set_answers, priority)
    if verify:
        sizes = sorted(set(batch_sizes) | {batch})

        def covered(rows):
            return candidate.covered(rows=rows, experts=experts, topk=topk, dtype=dtypes[0], bias_dtype=dtypes[1])

        _verify(asker, result, sizes, covered, gen)
    return result


def short_ids(ids: list[int], n: int = 8) -> str:
    """``[3, 7, 9, ... (40)]``: the first ``n`` ids of a long list."""
    return "[" + ", ".join(map(str, ids[:n])) + (f", ... ({len(ids)})" if len(ids) > n else "") + "]"
