"""The documentation stays inside the repository, and what it names exists.

- No tracked text file points outside the repository to the project's
  private spec (a fresh clone does not have it): no ``../shared`` path, no
  ``ROUTING_CONTRACTS.md``, no "spec section N" / "spec §N".
- Every relative Markdown link in README.md and docs/*.md resolves to a file
  of the repository, and a ``#anchor`` into a Markdown file to one of its
  headings.
- Every ``python -m contracts ...`` command named in README.md and docs/*.md
  parses: ``--help`` of each distinct subcommand and module exits 0.
- docs/contracts.md's tie table and clause order are the code's.
- Every ``reports/baselines/...``, ``benchmarks/...`` and ``kernels/radix4/lab/...`` path named in README.md
  and docs/*.md exists (globs and ``{a,b}`` lists expanded); in README.md and docs/figures.md, which name
  baselines by their folder under ``reports/baselines/``, so does every ``h200-...`` / ``cpu-...`` name.
- README.md is a front page: it shows the set-up/main-job and test commands verbatim (``.ci/run`` runs the second),
  its worked example comes before the links, and it stays short (the detail lives in docs/).
"""

from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
THIS = Path(__file__).resolve().relative_to(ROOT).as_posix()
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

OUTSIDE = re.compile(r"\.\./shared|ROUTING_CONTRACTS|\bspec\s+(?:§|sections?\b|sec\b)", re.IGNORECASE)
# Run records written by earlier versions of the harness; they are kept as they were written.
NOT_SCANNED = ("reports/",)


def _tracked_files() -> list[str]:
    try:
        out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
        names = [n for n in out.decode().split("\0") if n]
    except (OSError, subprocess.SubprocessError):  # not a git checkout: the folders the docs cover
        roots = ("README.md", "docs", "contracts", "oracle", "kernels", "benchmarks", "scripts", "tests", "examples")
        names = [p.relative_to(ROOT).as_posix() for r in roots for p in ([ROOT / r] if (ROOT / r).is_file() else (ROOT / r).rglob("*"))
                 if p.is_file() and "__pycache__" not in p.parts]  # fmt: skip
    return [n for n in names if n != THIS and not n.startswith(NOT_SCANNED) and (ROOT / n).is_file()]


def _text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except (UnicodeDecodeError, OSError):
        return None  # binary files (images, wheels) carry no links


def _outside_pointers() -> dict[str, list[str]]:
    hits: dict[str, list[str]] = {}
    for name in _tracked_files():
        text = _text(ROOT / name)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.setdefault(name, []).append(f"{name}:{number}: {line.strip()}")
    return hits


def test_no_file_points_outside_the_repository():
    hits = _outside_pointers()
    unexpected = [line for lines in hits.values() for line in lines]
    assert not unexpected, (
        f"{len(unexpected)} line(s) point to the project's private spec, which a clone does not have; "
        "cite docs/contracts.md or docs/figures.md instead:\n" + "\n".join(unexpected)
    )


# ---------------------------------------------------------------- Markdown links

_FENCE = re.compile(r"^(```|~~~)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE_LINK = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")
_SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def _prose_lines(text: str):
    """(line number, line) outside fenced code blocks, with inline code removed."""
    fenced = False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced:
            yield number, _INLINE_CODE.sub("", line)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.strip())  # a link keeps its text
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    fenced = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if _FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        base = _slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _links(path: Path):
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        for target in _INLINE_LINK.findall(line):
            yield number, target
        m = _REFERENCE_LINK.match(line)
        if m:
            yield number, m.group(1)


def test_markdown_links_resolve():
    bad, checked = [], 0
    for doc in DOCS:
        for number, target in _links(doc):
            if _SCHEME.match(target):
                continue  # http(s), mailto: not ours to check offline
            where = f"{doc.relative_to(ROOT).as_posix()}:{number}: ({target})"
            file_part, _, anchor = target.partition("#")
            dest = (doc.parent / file_part).resolve() if file_part else doc
            checked += 1
            if ROOT != dest and ROOT not in dest.parents:
                bad.append(f"{where} leaves the repository")
            elif not dest.exists():
                bad.append(f"{where} does not exist")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                bad.append(f"{where} has no heading #{anchor} (headings: {sorted(_anchors(dest))})")
    assert checked > 10, f"only {checked} relative links found: the link extractor is broken"
    assert not bad, f"{len(bad)} broken link(s):\n" + "\n".join(bad)


# ---------------------------------------------------------------- commands

_COMMAND = re.compile(r"python3?\s+-m\s+(contracts(?:\.[A-Za-z_]\w*)*)(?:[ \t]+([a-z][\w-]*))?")


def _named_commands() -> dict[tuple[str, ...], str]:
    """Distinct ``python -m contracts ...`` invocations (module, and subcommand for ``contracts``) -> first place named."""
    out: dict[tuple[str, ...], str] = {}
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in _COMMAND.finditer(text):
            module, word = m.group(1), m.group(2)
            argv = (module, word) if module == "contracts" and word else (module,)
            line = text.count("\n", 0, m.start()) + 1
            out.setdefault(argv, f"{doc.relative_to(ROOT).as_posix()}:{line}")
    return out


@pytest.mark.slow  # every documented command line parsed in a fresh interpreter: ~30 s of CPU
def test_named_commands_parse():
    commands = _named_commands()
    assert ("contracts", "check") in commands, f"the command extractor found no 'python -m contracts check': {sorted(commands)}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    running = {
        argv: subprocess.Popen([sys.executable, "-m", *argv, "--help"], cwd=ROOT, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
        for argv in commands
    }
    bad = []
    for argv, proc in running.items():
        try:
            out, err = proc.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        if proc.returncode != 0 or "usage" not in out.lower():
            tail = (err or out).strip().splitlines()[-1:] or [""]
            bad.append(f"{commands[argv]}: python -m {' '.join(argv)} --help exited {proc.returncode}: {tail[0]}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------- facts in docs/contracts.md


def _contracts_doc() -> str:
    return (ROOT / "docs" / "contracts.md").read_text(encoding="utf-8")


def test_contracts_doc_tie_table_is_the_oracles():
    import oracle

    m = re.search(r"LANE_RANK = \[(.*?)\]", _contracts_doc(), re.DOTALL)
    assert m, "docs/contracts.md has no LANE_RANK table"
    table = tuple(int(v) for v in re.findall(r"\d+", m.group(1)))
    assert table == tuple(oracle.LANE_RANK)
    first = int(oracle.tie_order(896, "aiter")[0])
    assert f"**expert {first}**" in _contracts_doc()


def test_contracts_doc_names_every_clause_in_attribution_order():
    import oracle
    from contracts.compare.attribution import CLAUSE_ORDER

    text = _contracts_doc()
    table = set(re.findall(r"^\| `(\w+)` \|", text, re.MULTILINE))
    assert {c.value for c in oracle.ClauseName} <= table, "a clause is missing from docs/contracts.md's clause table"
    m = re.search(r"```\n(validity, [^`]*?)\n```", text)
    assert m, "docs/contracts.md does not print the primary-clause order"
    assert tuple(re.findall(r"\w+", m.group(1))) == CLAUSE_ORDER


# ---------------------------------------------------------------- which contract transformers follows (issue 55)

_TABLE_ROW = re.compile(r"^\|(.*)\|\s*$")
_MODULE = re.compile(r"modeling_(\w+)")


def _table(text: str, header: tuple[str, ...]) -> list[list[str]]:
    """The rows of the Markdown table whose header row starts with ``header`` (cells stripped), or []."""
    rows, inside = [], False
    for line in text.splitlines():
        m = _TABLE_ROW.match(line.strip())
        cells = [c.strip() for c in m.group(1).split("|")] if m else None
        if cells is None:
            if inside:
                break
            continue
        if not inside and tuple(cells[: len(header)]) == header:
            inside = True
        elif inside and not set("".join(cells)) <= set("-: "):
            rows.append(cells)
    return rows


def _installed_masks() -> dict[str, str]:
    """transformers module -> the group mask its grouped router's installed source writes ("-inf" / "0.0")."""
    from contracts.run.capture_contract import _mask_in_source
    from kernels.models import ROUTERS
    from kernels.models._hf import _modeling

    masks = {}
    for router in ROUTERS.values():
        # a router class that this transformers lacks (JambaTopKRouter came after 5.17, the GPU host's) has no mask to
        # read; the two the claims rest on are asserted present below
        cls = getattr(_modeling(router), router.cls, None)
        mask = _mask_in_source(cls) if cls is not None else None
        if mask is not None:
            masks[router.module] = mask
    return masks


def _claims() -> list[tuple[str, str, str]]:
    """(where, contract, text): every place that says which source a built-in contract follows: docs/contracts.md's
    "follows" table, each built-in's ``source`` (what ``python -m contracts contracts`` prints) and docs/real-traffic.md's
    table of the contract ``capture`` prints per router class."""
    import oracle

    claims = []
    for cells in _table(_contracts_doc(), ("contract", "follows")):
        for name in re.findall(r"`([\w.-]+)`", cells[0]):
            claims.append(("docs/contracts.md 'follows' table", name, cells[1]))
    claims += [(f"contract {c.name}'s source", c.name, c.source) for c in oracle.BUILTIN_CONTRACTS.values()]
    traffic = (ROOT / "docs" / "real-traffic.md").read_text(encoding="utf-8")
    for cells in _table(traffic, ("family", "`model_type` (router class)", "printed contract (released config)")):
        for cls in re.findall(r"`(\w+Router)`", cells[1]):
            for name in re.findall(r"`([\w.-]+)`", cells[2]):
                claims.append(("docs/real-traffic.md capture table", name, f"modeling_{_module_of_class(cls)}"))
    return claims


def _module_of_class(cls: str) -> str:
    from kernels.models import ROUTERS

    return next((r.module for r in ROUTERS.values() if r.cls == cls), "?")


def test_every_claim_of_which_contract_a_transformers_router_follows_has_its_installed_mask():
    """A grouped contract said to follow a transformers modeling file masks dropped groups as that file's router does
    (read from the installed source): transformers 5.24's DeepSeek-V3 router masks with -inf, so it follows
    deepseek-v3, not deepseek-v3-reference; the docs, ``contracts contracts`` and capture's table say one thing."""
    pytest.importorskip("transformers")
    import oracle

    masks = _installed_masks()
    assert masks.get("deepseek_v3") == "-inf" and masks.get("deepseek_v2") == "0.0", masks
    claims = _claims()
    assert any(w.startswith("docs/contracts.md") for w, _, _ in claims), "docs/contracts.md has no 'contract | follows' table"
    assert any(w.startswith("docs/real-traffic.md") for w, _, _ in claims), "docs/real-traffic.md has no capture contract table"
    bad, checked = [], 0
    for where, name, text in claims:
        c = oracle.BUILTIN_CONTRACTS.get(name)
        assert c is not None, f"{where} names {name!r}, no built-in contract"
        for module in set(_MODULE.findall(text)) & set(masks):
            if not c.is_grouped:
                continue
            checked += 1
            mask = "-inf" if c.group_mask == float("-inf") else "0.0"
            if mask != masks[module]:
                bad.append(f"{where}: {name} (mask {mask}) is said to follow modeling_{module}, whose router masks with {masks[module]}")
    assert checked >= 4, f"only {checked} grouped claims found: the claim reader is broken"
    assert not bad, "\n".join(bad)


def test_the_contracts_doc_says_which_mask_transformers_deepseek_v3_uses():
    text = _contracts_doc()
    row = {cells[0]: cells[1] for cells in _table(text, ("contract", "follows"))}
    assert "modeling_deepseek_v3" in row["`deepseek-v3`"] and "modeling_deepseek_v3" not in row["`deepseek-v3-reference`"], row


# ---------------------------------------------------------------- cited files

_CITED_PATH = re.compile(r"(?<![\w/.-])((?:reports/baselines|benchmarks|kernels/radix4/lab)/[\w.*{},/-]*)")
_BASELINE_NAME = re.compile(r"`((?:h200|cpu)-[\w.*{},-]*(?:/[\w.*{},-]*)*)`")
# Files that name baselines by their folder under reports/baselines/ ("bundle under reports/baselines/: h200-radix4/").
_NAMES_BASELINES = ("README.md", "docs/figures.md")


def _expand(path: str) -> list[str]:
    """``a{1,2}.log`` -> ``a1.log``, ``a2.log`` (one level, as the docs write them)."""
    m = re.search(r"\{([^{}]*)\}", path)
    if not m:
        return [path]
    return [x for part in m.group(1).split(",") for x in _expand(path[: m.start()] + part + path[m.end() :])]


def _exists(relative: str) -> bool:
    relative = relative.rstrip(".,;:)")
    return all(glob.glob(str(ROOT / p)) if "*" in p else (ROOT / p).exists() for p in _expand(relative))


def _cited_paths():
    for doc in DOCS:
        name = doc.relative_to(ROOT).as_posix()
        for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
            for path in _CITED_PATH.findall(line):
                if path.rstrip("/.,;:)") not in ("reports/baselines", "benchmarks", "kernels/radix4/lab"):
                    yield name, number, path
            if name in _NAMES_BASELINES:
                for path in _BASELINE_NAME.findall(line):
                    yield name, number, "reports/baselines/" + path


def test_every_cited_file_exists():
    cited = list(_cited_paths())
    assert len(cited) > 20, f"only {len(cited)} cited paths found: the extractor is broken"
    assert any(p.startswith("benchmarks/") for _, _, p in cited) and any(p.startswith("reports/baselines/h200-") for _, _, p in cited)
    missing = [f"{doc}:{number}: {path}" for doc, number, path in cited if not _exists(path)]
    assert not missing, (f"{len(missing)} cited path(s) do not exist; fix the citation, or say the files are in git history "
                         "without a path the docs present as current:\n" + "\n".join(missing))


def test_the_cited_file_check_catches_a_missing_file():
    assert _exists("benchmarks/gpu_all.sh") and _exists("reports/baselines/h200-probe-*/")
    assert not _exists("benchmarks/h200_final.sh") and not _exists("reports/baselines/h200-radix4-{packed-rank,nope}/")


# ---------------------------------------------------------------- the front page's two commands (issue 58)

MAIN_JOB = "bash scripts/setup.sh && python -m contracts check --candidate all"
TEST_COMMAND = "bash scripts/setup.sh --ci-tools && python -m pytest"


def test_the_front_page_keeps_the_two_commands_and_ci_runs_the_test_command():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert MAIN_JOB in readme and TEST_COMMAND in readme, "README.md must show the set-up/main-job and test commands verbatim"
    assert TEST_COMMAND in (ROOT / ".ci" / "run").read_text(encoding="utf-8"), ".ci/run must run the README's test command"
    # the front page stays a front page: the worked example, then the links; the detail in docs/
    assert readme.index("## Check your own router") < readme.index("## Where to go next")
    assert readme.count("\n") < 160, f"README.md has {readme.count(chr(10))} lines; move detail into docs/"
