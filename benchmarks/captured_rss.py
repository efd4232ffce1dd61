"""Peak RSS of a check on a large captured-logits file: the file is streamed, never loaded whole.

Writes a ``.safetensors`` file of ``--rows`` rows x ``--experts`` bf16 logits
(default 10M x 896: 17.9 GB) a block at a time (the file is never in memory
either: a random 65,536-row block, each copy rolled by its index along the
experts so that no two blocks are equal), then checks every row of it with
``--candidate`` in this process (``check --logits``), and prints the rows,
the time, and the peak RSS (``ru_maxrss``: the most this process ever held).
The goal (issue 36): under 2 GiB for 10M rows.

    python benchmarks/captured_rss.py                          # 10M x 896 bf16, torch-native
    python benchmarks/captured_rss.py --rows 1M --keep /data/logits.safetensors

Check ``df -h`` first: the default file needs 18 GB; ``--experts 128`` makes it 2.6 GB.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from contracts.commands._common import row_count  # noqa: E402
from contracts.run.checks import run_checks  # noqa: E402

BLOCK = 65_536


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def write_logits(path: Path, rows: int, experts: int) -> None:
    """A safetensors file holding ``logits`` [rows, experts] bf16, written block by block, and a correction ``bias`` [experts]
    fp32 (as DeepSeek-V3 and Kimi routers carry: it also keeps bf16's many equal logits from tying at the cutoff)."""
    n_bytes = rows * experts * 2
    bias = (torch.randn(experts, generator=torch.Generator().manual_seed(1)) * 0.01).float()
    header = json.dumps({"logits": {"dtype": "BF16", "shape": [rows, experts], "data_offsets": [0, n_bytes]},
                         "bias": {"dtype": "F32", "shape": [experts], "data_offsets": [n_bytes, n_bytes + 4 * experts]}}).encode()  # fmt: skip
    header += b" " * (-len(header) % 8)
    base = torch.randn(BLOCK, experts, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for i, first in enumerate(range(0, rows, BLOCK)):
            n = min(BLOCK, rows - first)
            f.write(base[:n].roll(i % experts, dims=1).contiguous().view(torch.uint8).numpy().tobytes())
        f.write(bias.numpy().tobytes())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=row_count, default=10_000_000)
    ap.add_argument("--experts", type=int, default=896)
    ap.add_argument("--topk", type=int, default=16)
    ap.add_argument("--candidate", default="torch-native")
    ap.add_argument("--contract", default="aiter")
    ap.add_argument("--keep", type=Path, help="write the file here and keep it (default: a temporary file, removed)")
    args = ap.parse_args()
    folder = None if args.keep else tempfile.TemporaryDirectory(prefix="captured_rss-", dir=os.environ.get("TMPDIR"))
    path = args.keep or Path(folder.name) / "logits.safetensors"
    try:
        t0 = time.perf_counter()
        write_logits(path, args.rows, args.experts)
        written = time.perf_counter() - t0
        print(f"wrote {path}: {args.rows:,} x {args.experts} bf16, {path.stat().st_size / 2**30:.2f} GiB in {written:.0f} s; peak RSS so far {_peak_gib():.2f} GiB", flush=True)
        t0 = time.perf_counter()
        run = run_checks([args.candidate], contract=args.contract, topk=args.topk, logits=path, isolate=False, progress=True,
                         out=Path(tempfile.mkdtemp(prefix="captured_rss-bundle-")), command="benchmarks/captured_rss.py")  # fmt: skip
        took = time.perf_counter() - t0
        s = run.results[0].summary
        print(f"checked {s.rows_checked:,} rows ({s.status.word}, {s.mismatched_rows:,} mismatched) in {took:.0f} s, {s.rows_checked / took:,.0f} rows/s")
        print(f"peak RSS: {_peak_gib():.2f} GiB (goal < 2 GiB) for a {path.stat().st_size / 2**30:.2f} GiB logits file")
        return 0 if _peak_gib() < 2 and s.rows_checked == args.rows else 1
    finally:
        if folder is not None:
            folder.cleanup()


if __name__ == "__main__":
    sys.exit(main())
