"""kernels._build.compile_shared builds each library once per machine, even when asked twice at once.

pytest-xdist workers (and parallel checks) ask for the same kernel build at
the same time; the second must wait for the first and reuse its library. A
stand-in compiler counts its runs.
"""

from __future__ import annotations

import re
import threading
from pathlib import Path

import pytest

from kernels import _build

FAKE_COMPILER = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "fake 1.0"; exit 0; fi
echo run >> "{log}"
sleep 1
while [ "$#" -gt 0 ]; do
    if [ "$1" = "-o" ]; then shift; printf 'lib' > "$1"; fi
    shift
done
"""


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """A stand-in compiler on PATH (``script``: its text; default FAKE_COMPILER, which logs each run to runs.log), an
    empty kernel cache and a source ``k.cpp``; the compiler-version cache cleared before and after."""

    def make(name: str = "fakecc", script: str | None = None) -> Path:
        compiler = tmp_path / name
        compiler.write_text(script if script is not None else FAKE_COMPILER.format(log=tmp_path / "runs.log"))
        compiler.chmod(0o755)
        src = tmp_path / "k.cpp"
        src.write_text("int k() { return 1; }\n")
        return src

    monkeypatch.setenv("ROUTER_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    _build.compiler_version.cache_clear()
    yield make
    _build.compiler_version.cache_clear()


def test_two_builds_of_one_source_at_once_compile_once(tmp_path, stand_in, capsys):
    src = stand_in()
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(_build.compile_shared(src, compiler="fakecc", flags=["-O2"])))
               for _ in range(2)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 2 and results[0] == results[1] and results[0].read_text() == "lib"
    assert (tmp_path / "runs.log").read_text().splitlines() == ["run"], "the second caller compiled again instead of waiting for the first"
    # the one that waits says so (two checks side by side on a cold cache: the second was silent for minutes)
    assert "kernels: waiting for another process's build of k.cpp with fakecc (host)" in capsys.readouterr().err


def test_a_build_says_what_it_builds_before_it_starts_how_far_it_is_and_how_long_it_took(tmp_path, monkeypatch, capsys, stand_in):
    # A whole kernel unit is minutes of one core on first use; it printed nothing meanwhile, and a user thought the
    # check hung (issue 60). Now: a line before the build, one every PROGRESS_EVERY_S while it runs, one when it is
    # done; the next build of the source says how long the last one took; a cached library prints nothing.
    src = stand_in()
    monkeypatch.setattr(_build, "PROGRESS_EVERY_S", 0.3)
    _build.compile_shared(src, compiler="fakecc", flags=["-O2", "-arch=sm_90"])
    first = capsys.readouterr().err.splitlines()
    _build.compile_shared(src, compiler="fakecc", flags=["-O2", "-arch=sm_90"])
    cached = capsys.readouterr().err
    _build.compile_shared(src, compiler="fakecc", flags=["-O3", "-arch=sm_90"])  # other flags: another library
    second = capsys.readouterr().err.splitlines()
    assert first[0].startswith("kernels: building k.cpp with fakecc (-arch=sm_90) (first use") and f"cached in {tmp_path / 'cache'}" in first[0]
    assert any(line.startswith("kernels: still building k.cpp with fakecc (-arch=sm_90): ") for line in first[1:-1]), first
    assert first[-1].startswith("kernels: built k.cpp with fakecc (-arch=sm_90) in ")
    assert cached == ""
    assert re.search(r"the last build took \d+ s", second[0]), second


def test_a_failed_build_still_raises_with_the_compilers_output(stand_in):
    src = stand_in("badcc", '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "bad 1.0"; exit 0; fi\necho "k.cpp:1: error: no"; exit 3\n')
    with pytest.raises(_build.BuildError, match=r"(?s)compile failed \(exit 3\).*k.cpp:1: error: no"):
        _build.compile_shared(src, compiler="badcc", flags=["-O2"])
