"""Options shared by the library functions, validated in one line each, with the fix in the message.

Light on purpose (no torch): the commands validate their arguments with
these before anything heavy loads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..cases.max_batch import env_max_batch
from ..cases.quick_look import QUICK_ROWS

__all__ = ["DEFAULT_ROWS", "DEFAULT_TIMEOUT_S", "MAX_REPLAY_ROWS", "CheckOptions", "OptionError", "check_quick", "parse_families", "parse_replay", "parse_shard", "parse_split"]

DEFAULT_ROWS = 250_000
MATRIX_DEFAULT_ROWS = 20_000  # a matrix's bulk rows (contracts.run.matrix): every candidate answers every case
DEFAULT_TIMEOUT_S = 60.0
MAX_REPLAY_ROWS = 1 << 20  # a replayed case is one case: the largest the plan makes is far below this


class OptionError(ValueError):
    """An option that cannot run; the message names it, its value and the fix."""


def parse_families(text: str | None, *, option: str = "--families") -> list[str] | None:
    """A comma-separated subset of the families, in the given order; None for all."""
    from ..cases.families import FAMILY_NAMES

    if text is None:
        return None
    chosen = [f.strip() for f in text.split(",") if f.strip()]
    unknown = [f for f in chosen if f not in FAMILY_NAMES]
    if unknown or not chosen:
        raise OptionError(f"{option}: unknown family {', '.join(map(repr, unknown)) or repr(text)}; known: {', '.join(FAMILY_NAMES)}")
    return chosen


def parse_shard(text: str | None, *, option: str = "--shard") -> tuple[int, int] | None:
    if not text:
        return None
    try:
        i, n = (int(part) for part in text.split("/"))
    except ValueError:
        raise OptionError(f"{option} {text!r} must look like I/N, e.g. {option} 2/4") from None
    if n < 1 or not 1 <= i <= n:
        raise OptionError(f"{option} {text}: need 1 <= I <= N (got I={i}, N={n}); e.g. {option} 1/{max(n, 1)}")
    return i, n


def parse_replay(text: str, experts: int, topk: int, *, option: str = "--replay"):
    """``FAMILY:SEED:ROWS`` or ``FAMILY:SEED:ROWS:bulk`` (a report's replay id) as a CaseSpec, every part checked."""
    from ..cases.families import FAMILIES, FAMILY_NAMES
    from ..cases.pins import BIAS_PARAMETERS, GRAD_MODES, SCALING_FACTORS, UNUSUAL_SCALING_FACTORS
    from ..cases.spec import CaseSpec

    parts = text.split(":")
    tags = parts[3:]  # what the case pins: bulk (drawn on the device), logits-fp16, bias-bf16 / -fp16 / -fp32, offset-N,
    # bias_offset-N, logits_offset-N, column_stride-N, transposed, bias_stride-N, renormalize-on|off, scaling-F,
    # grad-on|off|inference, bias_parameter-frozen|trainable, logits_grad, autocast, autocast-fp16, default_dtype-bf16, deterministic,
    # zero_bias
    pinned: dict = {}
    for tag in tags:
        kind, _, value = tag.partition("-")
        if tag == "bulk":
            pinned["bulk"] = True
        elif kind == "bias" and value in ("bf16", "fp16", "fp32"):
            pinned["bias_dtype"] = value
        elif kind == "logits" and value in ("bf16", "fp16", "fp32"):
            pinned["logits_dtype"] = value
        elif kind == "offset" and value.isdigit() and int(value) < 64:
            pinned["offset"] = int(value)
        elif kind in ("bias_offset", "logits_offset") and value.isdigit() and 0 < int(value) <= 4096:
            pinned[kind] = int(value)
        elif kind in ("column_stride", "bias_stride") and value.isdigit() and 1 < int(value) < 64:
            pinned[kind] = int(value)
        elif tag == "transposed":
            pinned["transposed"] = True
        elif tag == "zero_bias":
            pinned["zero_bias"] = True
        elif kind == "renormalize" and value in ("on", "off"):
            pinned["renormalize"] = value == "on"
        elif kind == "scaling" and value in {f"{s:g}" for s in SCALING_FACTORS + UNUSUAL_SCALING_FACTORS}:
            pinned["scaling"] = float(value)
        elif kind == "grad" and value in GRAD_MODES:
            pinned["grad_mode"] = value
        elif kind == "bias_parameter" and value in BIAS_PARAMETERS:
            pinned["bias_parameter"] = value
        elif tag in ("logits_grad", "deterministic"):
            pinned[tag] = True
        elif tag == "autocast" or (kind == "autocast" and value == "fp16"):
            pinned["autocast"] = value or "bf16"
        elif kind == "default_dtype" and value == "bf16":
            pinned["default_dtype"] = value
        else:
            pinned = None
            break
    if len(parts) < 3 or pinned is None or len(pinned) != len(tags):
        raise OptionError(f"{option} {text!r} must be FAMILY:SEED:ROWS or FAMILY:SEED:ROWS:bulk (a pinned case adds :logits-fp16, "
                          ":bias-bf16, :bias-fp16, :bias-fp32, :offset-N, :bias_offset-N, :logits_offset-N, :column_stride-N, "
                          ":transposed, :bias_stride-N, :renormalize-on|off, :scaling-F, :grad-on|off|inference, "
                          ":bias_parameter-frozen|trainable, :logits_grad, :autocast, :autocast-fp16, :default_dtype-bf16, :deterministic or "
                          ":zero_bias), as printed in a report's replay line")  # fmt: skip
    family, seed_text, rows_text = parts[:3]
    if family not in FAMILY_NAMES:
        raise OptionError(f"{option} family {family!r} is unknown; known: {', '.join(FAMILY_NAMES)}")
    # One layout of the logits at a time (the plan pins no mix): a strided family's rows, or one of these tags.
    layouts = [t for t in tags if t.partition("-")[0] in ("logits_offset", "column_stride", "transposed")]
    if len(layouts) + bool(FAMILIES[family].strided and layouts) > 1:
        raise OptionError(f"{option} {text!r} pins more than one layout of the logits ({', '.join(layouts)}"
                          f"{', family ' + family if FAMILIES[family].strided else ''}); give one, as printed in a report's replay line")  # fmt: skip
    if pinned.get("logits_grad") and pinned.get("grad_mode", "on") != "on":
        raise OptionError(f"{option} {text!r}: logits_grad needs grad on (a tensor made under no_grad or inference mode never "
                          "requires grad); drop one of the two tags")  # fmt: skip
    try:
        seed, rows = int(seed_text), int(rows_text)
    except ValueError:
        raise OptionError(f"{option} {text!r}: SEED and ROWS must be integers, as printed in a report's replay line") from None
    if not 0 <= seed < 2**31:
        raise OptionError(f"{option} seed {seed} is out of range: case seeds are 0..2^31-1 (copy the replay line of a report)")
    if not 0 <= rows <= MAX_REPLAY_ROWS:  # 0: the empty batch
        raise OptionError(f"{option} rows must be 0..{MAX_REPLAY_ROWS:,} (one case), got {rows:,}")
    return CaseSpec(family, seed, rows, experts, topk, **pinned)


def parse_split(text: str, *, option: str = "--split") -> tuple[str, str, int]:
    """``A:B@M0`` -> ``(A, B, M0)``: A in batches below M0 rows, B at M0 rows or more (the prefill/decode view)."""
    pair, sep, m0_text = text.rpartition("@")
    a, colon, b = pair.partition(":")
    if not sep or not colon or not a.strip() or not b.strip():
        raise OptionError(f"{option} {text!r} must be A:B@M0, e.g. {option} radix4:aiter@1024 (radix4 below 1024 rows, aiter above)")
    try:
        m0 = int(m0_text)
    except ValueError:
        raise OptionError(f"{option} {text!r}: M0 must be a whole number of rows, e.g. {option} radix4:aiter@1024") from None
    if m0 < 2:
        raise OptionError(f"{option} {text!r}: M0 must be at least 2, so that batches of fewer than M0 rows exist")
    return a.strip(), b.strip(), m0


def parse_case_choice(replay: str | None, row: int | None, *, experts: int | None, topk: int | None):
    """``--experts/--topk`` and ``--replay/--row`` checked together: the replayed spec (its shape set later,
    from the contract) or None."""
    if topk and experts and topk > experts:
        raise OptionError(f"--topk {topk} is larger than --experts {experts}; choose --topk <= {experts}")
    if row is not None and not replay:
        raise OptionError("--row needs --replay FAMILY:SEED:ROWS")
    spec = parse_replay(replay, 1, 1) if replay else None
    if spec is not None and row is not None and not 0 <= row < spec.rows:
        raise OptionError(f"--row {row} is outside the case's {spec.rows} rows (0..{spec.rows - 1})")
    return spec


def check_quick(rows: int, replay: str | None = None, logits=None, *, rows_given: bool = False,
                defaults: tuple[int, ...] = (DEFAULT_ROWS, QUICK_ROWS)) -> None:  # fmt: skip
    """``--quick`` with what it cannot go with, one line naming the conflict and the fix: a row count of its own (it
    takes ``QUICK_ROWS``), ``--replay`` (one case) or ``--logits`` (a captured file is its own plan)."""
    if replay:
        raise OptionError("--quick thins the synthetic plan, and --replay runs one case; drop --quick")
    if logits is not None:
        raise OptionError("--quick thins the synthetic plan, and --logits checks every row of its file; drop --quick")
    if rows_given or rows not in defaults:  # a library caller's rows: its default (matrix's 20,000) or QUICK_ROWS
        raise OptionError(f"--quick runs {QUICK_ROWS:,} rows and a thin sample of the pinned cases; --rows sizes a full run's bulk rows: "
                          "drop --rows for a quick look, or --quick for a full check")


@dataclass(frozen=True)
class CheckOptions:
    """What a check run is asked to do: one record that ``run_checks``, the nightly, the bench and the pytest
    plugin build once and pass whole (``dataclasses.replace`` makes a variant, e.g. one per nightly pair).

    ``isolate``: None is the default, a worker process for every candidate
    (``--no-isolate`` asks for False). ``max_batch``: the largest batch of the
    pinned batch-size sweep (None: ``contracts.cases.max_batch.default_max_batch``
    of the device). ``allow_not_covered``: a ``not_covered`` check does not
    make the run fail (the status stays, the exit code does not).
    """

    contract: str | None = None
    against: str | None = None
    exact: bool = False
    rows: int = DEFAULT_ROWS
    seed: int = 0
    families: tuple[str, ...] | None = None
    device: str | None = None
    experts: int | None = None
    topk: int | None = None
    shard: tuple[int, int] | None = None
    replay: str | None = None
    isolate: bool | None = None
    timeout: float = DEFAULT_TIMEOUT_S
    repeat: int = 1
    out: Path | None = None
    force: bool = False
    progress: bool = True
    command: str = ""
    max_batch: int | None = None
    allow_not_covered: bool = False
    # captured logits (``check --logits``): the rows of a file instead of the families (``contracts.cases.captured``)
    logits: str | Path | None = None
    logits_bias: str | Path | None = None
    logits_sha256: str | None = None
    # a quick look (``check --quick``): QUICK_ROWS over the families and a thin sample of the pinned cases, in place of
    # ``rows`` (contracts.cases.quick_look.quick_positions); its summary says so (``Summary.quick``)
    quick: bool = False

    def __post_init__(self):
        if self.families is not None:
            object.__setattr__(self, "families", tuple(self.families))
        if self.out is not None:
            object.__setattr__(self, "out", Path(self.out))
        if self.max_batch is None:  # the environment's default, validated here so a bad value is one line up front
            try:
                env_max_batch()
            except ValueError as exc:
                raise OptionError(str(exc)) from None
        if self.quick:
            check_quick(self.rows, self.replay, self.logits, defaults=(DEFAULT_ROWS, MATRIX_DEFAULT_ROWS, QUICK_ROWS))
            object.__setattr__(self, "rows", QUICK_ROWS)  # what the summary records and a shard's merge compares
        if self.max_batch is not None and not 1 <= self.max_batch <= MAX_REPLAY_ROWS:
            raise OptionError(f"--max-batch {self.max_batch:,} is out of range; choose 1..{MAX_REPLAY_ROWS:,} (default: 65,536 on a GPU, 16,385 on a CPU)")

    @property
    def recorded(self) -> dict:
        """The options a summary records (what shards must share, ``contracts.reports.merge.identity``; what a replay
        needs): a contract file by its SHA-256 too, since its path may name other contents on another host."""
        return {"rows": self.rows, "families": list(self.families) if self.families else None, "experts": self.experts, "topk": self.topk,
                "repeat": self.repeat, "exact": self.exact, "timeout": self.timeout, "contract_sha256": _file_sha256(self.contract),
                **({"quick": True} if self.quick else {})}  # fmt: skip


def _file_sha256(contract: str | None) -> str | None:
    """A contract file's SHA-256 (None for a built-in contract's name, or a file that cannot be read: the check says why)."""
    if not contract or not str(contract).endswith(".toml"):
        return None
    import hashlib

    try:
        return hashlib.sha256(Path(contract).read_bytes()).hexdigest()
    except OSError:
        return None
