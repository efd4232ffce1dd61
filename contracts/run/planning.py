"""The cases of a run, before any candidate is called: the options of a check or a matrix shaped by a contract.

``RunPlan`` holds what the options ask for (families, rows, seed, shape, shard, replay, a captured file, a quick
look); ``RunPlan.shaped(contract)`` gives the ``PlannedShape`` whose ``specs`` a check walks and whose ``parts``
``check --plan`` counts. ``open_captured`` opens ``--logits``; ``quick_look`` and ``planned_line`` say what a run
covers before it runs. Shared by ``run_checks``, ``run_matrix``, the nightly and the commands' ``--plan``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..cases import FAMILIES, iter_plan, planned_rows, shard as shard_of
from ..cases.batch_sizes import launch_class_sizes
from ..cases.families import families_for
from ..cases.launch_points import launch_points, switch_points
from ..cases.max_batch import default_max_batch
from ..cases.plan import count_plan, iter_plan_parts, shard_rows
from ..cases.quick_look import QuickLook, quick_boundaries
from ..cases.spec import admitted_fields
from .options import DEFAULT_ROWS, OptionError, parse_replay

__all__ = ["PlanDescription", "PlannedShape", "RunPlan", "describe_plan", "open_captured", "planned_line", "quick_look"]


@dataclass
class RunPlan:
    """The options of the cases, before a candidate's contract fills in its shape and families."""

    families: list[str] | None
    rows: int
    seed: int
    experts: int | None
    topk: int | None
    shard: tuple[int, int] | None
    replay: str | None
    replay_here: bool = True  # under torchrun only rank 0 runs a replayed case
    max_batch: int | None = None  # the pinned sweep's largest batch (None: the device's default)
    captured: object = None  # a contracts.cases.logits_file.LogitsFile: its rows are the cases (--logits)
    quick: bool = False  # a quick look: QUICK_ROWS and a thin sample of the pinned cases (contracts.cases.quick_look.quick_positions)

    def shaped(self, c) -> "PlannedShape":
        """The cases of this plan under contract ``c``: its default shape where none was given, its families."""
        if self.captured is not None:
            return self._captured_shape(c)
        experts, topk = self.experts or c.experts, self.topk or c.topk
        if topk > experts:
            raise OptionError(f"--topk {topk} is larger than --experts {experts}; choose --topk <= {experts}")
        if c.is_grouped and experts % c.n_group:
            raise OptionError(f"--experts {experts} does not split into the {c.n_group} groups of contract {c.name}; use a multiple of {c.n_group}")
        chosen = list(self.families or families_for(c))
        applied = [f for f in chosen if FAMILIES[f].applies_to(c)]
        dropped = [f for f in chosen if f not in applied]
        groups = (c.n_group, c.topk_group) if c.is_grouped else (1, 1)
        return PlannedShape(self, experts, topk, groups, c.has_bias, applied, dropped, c.admitted_options(), contract_name=c.name)

    def _captured_shape(self, c) -> "PlannedShape":
        f = self.captured
        experts, topk = f.experts, self.topk or f.topk or c.topk  # a capture's own k before the contract's
        if self.experts and self.experts != experts:
            raise OptionError(f"--experts {self.experts}: the logits in {f.path} have {experts} experts; drop --experts")
        if topk > experts:
            raise OptionError(f"--topk {topk} is larger than the {experts} experts of {f.path}; pass --topk <= {experts}")
        if c.is_grouped and experts % c.n_group:
            raise OptionError(f"--logits {f.path}: its {experts} experts do not split into the {c.n_group} groups of contract {c.name}; choose another --contract")
        if f.has_bias and not c.has_bias:
            where = f"--bias {f.bias_path}: a correction bias was given" if f.bias_path else f"--logits {f.path}: it carries a correction bias"
            raise OptionError(f"{where}, but contract {c.name} has none; check it against a contract with a bias, or drop the bias")
        groups = (c.n_group, c.topk_group) if c.is_grouped else (1, 1)
        families = [f.family(layer) for layer in range(f.layer_count)]
        return PlannedShape(self, experts, topk, groups, c.has_bias, families, [], contract=c)


@dataclass
class PlannedShape:
    plan: RunPlan
    experts: int
    topk: int
    groups: tuple[int, int]
    bias: bool
    families: list[str]
    dropped: list[str]
    admitted: dict | None = None  # the contract's admitted call options: the only ones cases draw
    contract: object = None  # captured logits: the contract whose call options (renormalize, scaling) the cases use
    contract_name: str | None = None  # the contract checked: its kernels' launch classes get the pinned dtype cases

    def max_batch(self, device: str) -> int:
        return self.plan.max_batch or default_max_batch(device, switch_points())

    def specs(self, bulk_rows: int | None, device: str = "cpu", extra_points: tuple[int, ...] = ()):
        """The cases and their rows; ``extra_points``: the switch points the candidate's own module publishes."""
        p = self.plan
        max_batch = self.max_batch(device)
        if p.captured is not None:
            points = launch_points(self.experts, self.topk, self.contract.name) + tuple(extra_points)
            return self._captured_specs(bulk_rows, launch_class_sizes(max_batch, points))
        if p.replay is not None:
            spec = parse_replay(p.replay, self.experts, self.topk)
            spec = dataclasses.replace(spec, n_group=self.groups[0], topk_group=self.groups[1], bias=self.bias,
                                       **admitted_fields(self.admitted))
            return ([spec], spec.rows) if p.replay_here else ([], 0)

        def full():
            return iter_plan(self.families, p.rows, p.seed, self.experts, self.topk, bulk_rows=bulk_rows, **self._options(device, extra_points))

        if p.shard is None:
            return full(), planned_rows(self.families, p.rows, max_batch=max_batch, bias=self.bias, experts=self.experts,
                                        topk=self.topk, contract=self.contract_name, admitted=self.admitted,
                                        extra_points=extra_points, quick=p.quick)  # fmt: skip
        # the shard's rows counted, not walked: its bulk cases are a count per family (a 1e12-row run has ~10^8)
        return shard_of(full(), *p.shard), shard_rows(self.parts(bulk_rows, device, extra_points), *p.shard)

    def counted(self, bulk_rows: int | None, device: str, extra_points: tuple[int, ...], call_rows: int | None):
        """The whole synthetic plan counted (``contracts.cases.plan.count_plan``), its bulk cases never walked; None
        for a shard, a replayed case or a captured file (their specs are what they are)."""
        p = self.plan
        if p.captured is not None or p.replay is not None or p.shard is not None:
            return None
        return count_plan(self.parts(bulk_rows, device, extra_points), call_rows)

    def _options(self, device: str, extra_points: tuple[int, ...]) -> dict:
        return dict(n_group=self.groups[0], topk_group=self.groups[1], bias=self.bias, admitted=self.admitted,
                    max_batch=self.max_batch(device), contract=self.contract_name, extra_points=extra_points, quick=self.plan.quick)  # fmt: skip

    def parts(self, bulk_rows: int | None, device: str = "cpu", extra_points: tuple[int, ...] = ()):
        """The whole synthetic plan (no shard, no replay) as ``iter_plan_parts`` gives it: each family's bulk cases as
        one count (``contracts.cases.plan.BulkTail``), for ``check --plan`` and the line a check prints first."""
        p = self.plan
        return iter_plan_parts(self.families, p.rows, p.seed, self.experts, self.topk, bulk_rows=bulk_rows, **self._options(device, extra_points))

    def _captured_specs(self, bulk_rows: int | None, context_sizes: tuple[int, ...]):
        """The captured file's cases; ``context_sizes``: the launch classes each call context meets its first rows at."""
        from ..cases.captured import CapturedError, captured_rows, captured_spec, iter_captured_plan
        from ..cases.exercised import option_pairs

        p, c, f = self.plan, self.contract, self.plan.captured
        call = dict(renormalize=c.default_renormalize, routed_scaling_factor=c.routed_scaling_factor, contract_bias=c.has_bias,
                    n_group=self.groups[0], topk_group=self.groups[1])  # fmt: skip
        if p.replay is not None:
            try:
                spec = captured_spec(f, p.replay, self.topk, **call)
            except CapturedError as exc:
                raise OptionError(str(exc)) from None
            return ([spec], spec.rows) if p.replay_here else ([], 0)

        options = option_pairs(c)  # the call options beside the model's own, once each (contracts.cases.exercised)

        def full():
            return iter_captured_plan(f, self.topk, bulk_rows=bulk_rows, context_sizes=context_sizes, options=options, **call)

        if p.shard is None:
            return full(), captured_rows(f, c.has_bias, context_sizes, options)
        return shard_of(full(), *p.shard), sum(s.rows for s in shard_of(full(), *p.shard))


def open_captured(logits, bias, sha256: str | None, families):
    """The opened ``--logits`` file (None without one); ``OptionError`` naming the file and the fix."""
    if logits is None:
        if bias is not None or sha256:
            raise OptionError(f"{'--bias' if bias is not None else '--logits-sha256'} needs --logits FILE (the captured logits it belongs to)")
        return None
    from ..cases.captured import CapturedError, check_digest
    from ..cases.logits_file import open_logits

    if families:
        raise OptionError("--families does not apply to --logits (its layers are the families); drop --families")
    try:
        opened = open_logits(str(logits), str(bias) if bias is not None else None)
        if sha256:
            check_digest(opened, sha256)  # the pinned digest: the bytes this check reads
    except (CapturedError, OSError) as exc:
        raise OptionError(f"--logits: {exc}") from None
    return opened


def planned_line(plan: RunPlan, counted, total: int) -> str:
    """What the check will run, before it runs: the cases and rows in all, and how many of those --rows asked for
    (the pinned cases come on top of them, at every --rows)."""
    if counted is None:  # a shard, a replayed case, a captured file: its rows (a shard's counted, not walked)
        what = (f"shard {plan.shard[0]}/{plan.shard[1]} of the plan" if plan.shard else "the replayed case" if plan.replay
                else "every row of the captured file")  # fmt: skip
        return f"planned {total:,} rows ({what})"
    if plan.quick:
        return f"planned {counted.cases:,} cases, {counted.rows:,} rows (a quick look: {plan.rows:,} rows over the families and a thin sample of the pinned cases)"
    return (f"planned {counted.cases:,} cases, {counted.rows:,} rows (--rows {plan.rows:,} over the families, and "
            f"{max(counted.rows - plan.rows, 0):,} rows of pinned cases on top: every dtype pair, layout, call context and batch-size class)")


def quick_look(plan: RunPlan, c, bulk: int, device: str, points: tuple[int, ...], call_rows: int | None, counted) -> QuickLook:
    """The quick look beside the full plan it thins (the default --rows, the same families and shape)."""
    full_plan = dataclasses.replace(plan, quick=False, rows=DEFAULT_ROWS, shard=None, replay=None)
    full_shape = full_plan.shaped(c)
    full = full_shape.counted(bulk, device, points, call_rows)
    max_batch = full_shape.max_batch(device)
    class_points = tuple(launch_points(full_shape.experts, full_shape.topk, full_shape.contract_name)) + tuple(points)
    return QuickLook(cases=counted.cases, rows=counted.rows, full_cases=full.cases, full_rows=full.rows, full_rows_option=DEFAULT_ROWS,
                     max_batch=max_batch, classes=launch_class_sizes(max_batch, class_points),
                     boundaries=quick_boundaries(max_batch, class_points))  # fmt: skip


@dataclass
class PlanDescription:
    """What ``check --plan`` prints: the cases a check of ``candidate`` would run, counted, not run."""

    contract: str
    experts: int
    topk: int
    device: str
    rows: int
    quick: bool
    cases: int
    planned_rows: int
    calls: int
    families: list[str]
    batch_sizes: list[int]  # of the candidate's calls
    max_batch: int
    max_batch_from_env: bool
    switch_points: tuple[int, ...]  # the known kernels' (the sweep's boundaries)
    candidate_points: tuple[int, ...]  # the candidate's own module's
    call_rows: int | None  # the candidate's largest call of a bulk case
    dtype_pairs: list[str]
    layouts: list[str]
    pinned_classes: list[int]  # the batch sizes every pinned dtype pair and layout runs at
    left_out: list[str]  # a quick look's: what it leaves out of the full plan
    beyond: list[int]  # switch points above every call of the run: launch classes never reached

    @property
    def largest_call(self) -> int:
        return max(self.batch_sizes, default=0)


def describe_plan(candidate, contract: str | None, *, device: str, rows: int, seed: int, families, experts: int | None,
                  topk: int | None, max_batch: int | None, quick: bool) -> PlanDescription:  # fmt: skip
    """The plan a check of ``candidate`` (a ``Candidate``, or None for ``all`` or one that does not load here) would run
    under ``contract`` (default: the candidate's, else aiter): the run's own cases (``RunPlan.shaped(...).parts``, the
    iterator a check walks), each bulk case counted, and the batch sizes of the candidate's calls (a bulk case comes in
    calls of its largest batch, ``bulk_rows_for``, asked of its ``covered`` gate as a check asks it). ``OptionError``
    for options the contract cannot take."""
    import oracle

    from ..cases.coverage import coverage_of
    from ..cases.launch_points import candidate_points
    from ..cases.max_batch import env_max_batch
    from ..cases.plan import bulk_rows_for, plan_bulk_rows

    contract = contract or (candidate.contract if candidate is not None else "aiter")
    c = oracle.get_contract(contract)
    plan = RunPlan(list(families) if families else None, rows, seed, experts, topk, None, None, max_batch=max_batch, quick=quick)
    shape = plan.shaped(c)
    extra, call_rows = (), None
    if candidate is not None:  # the candidate's own switch points and its largest call, as an in-process check takes them
        extra = candidate_points([candidate.origin], shape.experts, shape.topk, contract)

        def covered(**s):
            return candidate.covers(contract=contract, **s)

        call_rows = bulk_rows_for(covered, experts=shape.experts, topk=shape.topk, device=device, max_rows=candidate.max_rows)
    bulk = plan_bulk_rows(device)
    counted = count_plan(shape.parts(bulk, device, extra), call_rows)  # counted, not listed: a --rows 1e12 plan has ~10^8 bulk cases
    covers = coverage_of(counted.representatives, call_rows)
    points = switch_points()
    largest_call = max(covers["batch_sizes"], default=0)  # bulk calls may pass --max-batch at a large --rows
    return PlanDescription(
        contract=c.name, experts=shape.experts, topk=shape.topk, device=device, rows=rows, quick=quick, cases=counted.cases,
        planned_rows=counted.rows, calls=counted.calls, families=list(shape.families), batch_sizes=list(covers["batch_sizes"]),
        max_batch=shape.max_batch(device), max_batch_from_env=not max_batch and env_max_batch() is not None,
        switch_points=tuple(points), candidate_points=tuple(extra), call_rows=call_rows, dtype_pairs=list(covers["dtype_pairs"]),
        layouts=list(covers["layouts"]), pinned_classes=sorted({n for r in covers["pinned_batch_sizes"].values() for n in r}),
        left_out=quick_look(plan, c, bulk, device, extra, call_rows, counted).left_out() if quick else [],
        beyond=sorted(p for p in {*points, *extra} if p > largest_call),
    )  # fmt: skip

