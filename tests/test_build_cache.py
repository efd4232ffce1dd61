"""kernels._build.compile_shared builds each library once per machine, even when asked twice at once.

pytest-xdist workers (and parallel checks) ask for the same kernel build at
the same time; the second must wait for the first and reuse its library. A
stand-in compiler counts its runs.
"""

from __future__ import annotations

import threading
from pathlib import Path

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


def test_two_builds_of_one_source_at_once_compile_once(tmp_path, monkeypatch):
    log = tmp_path / "runs.log"
    compiler = tmp_path / "fakecc"
    compiler.write_text(FAKE_COMPILER.format(log=log))
    compiler.chmod(0o755)
    monkeypatch.setenv("ROUTER_KERNEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", f"{tmp_path}:/usr/bin:/bin")
    _build.compiler_version.cache_clear()
    src = tmp_path / "k.cpp"
    src.write_text("int k() { return 1; }\n")
    results: list[Path] = []
    threads = [threading.Thread(target=lambda: results.append(_build.compile_shared(src, compiler="fakecc", flags=["-O2"])))
               for _ in range(2)]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    _build.compiler_version.cache_clear()
    assert len(results) == 2 and results[0] == results[1] and results[0].read_text() == "lib"
    assert log.read_text().splitlines() == ["run"], "the second caller compiled again instead of waiting for the first"
