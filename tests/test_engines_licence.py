"""No file in the repository carries another project's licence header or copyright line.

The engine adapters find SGLang's, vLLM's, lmdeploy's and FlashInfer's files
where pip installed them; none is copied here. This test reads every text
file git tracks (plus untracked, not ignored ones) and fails on the licence
header texts those projects use (Apache-2.0, MIT, BSD) and on their
copyright lines. The patterns are assembled from pieces so that this file
does not match itself.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BINARY_SUFFIXES = {".png", ".jpg", ".whl", ".zip", ".gz", ".tgz", ".parquet", ".pt", ".so", ".pdf", ".ico"}

_PIECES = {
    "Apache licence header": ["Licensed under the ", "Apache License"],
    "SPDX licence tag": ["SPDX-", "License-Identifier"],
    "SPDX copyright tag": ["SPDX-", "FileCopyrightText"],
    "MIT licence text": ["Permission is hereby granted, ", "free of charge"],
    "BSD licence text": ["Redistribution and use in source ", "and binary forms"],
    "SGLang copyright": ["Copyright [0-9 -]*", "SGLang Team"],
    "vLLM copyright": ["Copyright contributors to ", "the vLLM project"],
    "lmdeploy copyright": ["Copyright \\(c\\) ", "OpenMMLab"],
    "FlashInfer copyright": ["by ", "FlashInfer team"],
    "NVIDIA source copyright": ["Copyright \\(c\\) [0-9, -]+", "NVIDIA CORPORATION"],
    "TensorRT-LLM co-author copyright": ["Copyright \\(c\\) [0-9]+, ", "NAVER Corp"],
}
PATTERNS = {name: re.compile("".join(pieces)) for name, pieces in _PIECES.items()}


def _repository_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=ROOT,
                             capture_output=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: the file list comes from git ls-files")
    return [ROOT / name for name in out.decode().split("\0") if name]


def test_the_patterns_catch_the_engines_headers():
    samples = {
        "Apache licence header": "# " + "Licensed under the " + "Apache License, Version 2.0",
        "SGLang copyright": "# Copyright 2024 " + "SGLang Team",
        "vLLM copyright": "# SPDX-" + "FileCopyrightText: Copyright contributors to the " + "vLLM project",
        "lmdeploy copyright": "# Copyright (c) " + "OpenMMLab. All rights reserved.",
        "NVIDIA source copyright": " * Copyright (c) 2019-2024, " + "NVIDIA CORPORATION.  All rights reserved.",
    }
    for name, text in samples.items():
        assert PATTERNS[name].search(text), name


def test_no_file_carries_another_projects_licence_header():
    offenders = []
    for path in _repository_files():
        if path.suffix.lower() in BINARY_SUFFIXES or not path.is_file():
            continue
        try:
            text = path.read_text(errors="strict")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        for name, pattern in PATTERNS.items():
            match = pattern.search(text)
            if match:
                line = text.count("\n", 0, match.start()) + 1
                offenders.append(f"{path.relative_to(ROOT)}:{line}: {name}")
    assert not offenders, "third-party licence text in the repository (find the file, do not copy it):\n" + "\n".join(
        offenders
    )
