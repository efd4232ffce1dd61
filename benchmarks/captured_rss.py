"""Peak RSS of a check on a large captured-logits file: the file is streamed, never loaded whole.

Writes a ``.safetensors`` file of ``--rows`` rows x ``--experts`` bf16 logits
(default 10M x 896: 17.9 GB) a block at a time (the file is never in memory
either: a random 8,192-row block, each copy rolled by its index along the
experts, a fresh one after E rolls, so that no two blocks are equal), then checks every row of it with
``--candidate`` in this process (``check --logits``), and prints the rows,
the time, and the peak RSS (``ru_maxrss``: the most this process ever held).
Every ``--every`` rows checked it prints the RSS at that moment and the peak
so far, so a run stopped early still shows whether the memory stays flat.
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

from contracts.cases.captured import file_digest  # noqa: E402
from contracts.commands._common import row_count  # noqa: E402
from contracts.run.checks import run_checks  # noqa: E402

BLOCK = 8_192  # rows written at a time: small, so that writing the file does not set the peak the check is measured by


def _peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def _now_gib() -> float:
    """The RSS at this moment (VmRSS), where ``ru_maxrss`` only ever grows: a flat series is what bounded means."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 2**20
    return float("nan")


def _machine() -> str:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    return f"{cpu}, {os.cpu_count()} cores; Python {sys.version.split()[0]}, torch {torch.__version__}"


def _watch_rows(every: int, started: list[float]) -> None:
    """Print the RSS every ``every`` rows read from the file. The rows are counted where each case is built
    (``build_captured``, which ``build_case`` looks up on its module at every call), so the figures come
    from inside the check without changing it."""
    import contracts.cases.captured as captured

    build, state = captured.build_captured, {"rows": 0, "next": every}

    def counted(spec, device="cpu"):
        out = build(spec, device)
        state["rows"] += spec.rows
        if state["rows"] >= state["next"]:
            state["next"] += every
            took = time.perf_counter() - started[0]
            print(f"  rows {state['rows']:>12,}: RSS {_now_gib():.2f} GiB, peak {_peak_gib():.2f} GiB, {took:.0f} s, "
                  f"{state['rows'] / took:,.0f} rows/s", flush=True)  # fmt: skip
        return out

    captured.build_captured = counted


def write_logits(path: Path, rows: int, experts: int) -> None:
    """A safetensors file holding ``logits`` [rows, experts] bf16, written block by block, and a correction ``bias`` [experts]
    fp32 (as DeepSeek-V3 and Kimi routers carry: it also keeps bf16's many equal logits from tying at the cutoff)."""
    n_bytes = rows * experts * 2
    bias = (torch.randn(experts, generator=torch.Generator().manual_seed(1)) * 0.01).float()
    header = json.dumps({"logits": {"dtype": "BF16", "shape": [rows, experts], "data_offsets": [0, n_bytes]},
                         "bias": {"dtype": "F32", "shape": [experts], "data_offsets": [n_bytes, n_bytes + 4 * experts]}}).encode()  # fmt: skip
    header += b" " * (-len(header) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header)
        for i, first in enumerate(range(0, rows, BLOCK)):
            if i % experts == 0:  # a fresh random block once every roll has been used
                base = torch.randn(BLOCK, experts, generator=torch.Generator().manual_seed(i // experts)).to(torch.bfloat16)
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
    ap.add_argument("--every", type=row_count, default=1_000_000, help="print the RSS every this many rows (default 1M)")
    ap.add_argument("--bundle", type=Path, help="write the check's bundle here (default: a temporary folder, removed)")
    ap.add_argument("--keep", type=Path, help="write the file here and keep it (default: a temporary file, removed)")
    args = ap.parse_args()
    folder = None if args.keep else tempfile.TemporaryDirectory(prefix="captured_rss-", dir=os.environ.get("TMPDIR"))
    path = args.keep or Path(folder.name) / "logits.safetensors"
    bundles = tempfile.TemporaryDirectory(prefix="captured_rss-bundle-", dir=os.environ.get("TMPDIR"))
    print(f"command: python {' '.join(sys.argv)}\nmachine: {_machine()}", flush=True)
    try:
        t0 = time.perf_counter()
        write_logits(path, args.rows, args.experts)
        written = time.perf_counter() - t0
        print(f"wrote {path}: {args.rows:,} x {args.experts} bf16, {path.stat().st_size / 2**30:.2f} GiB in {written:.0f} s; "
              f"RSS {_now_gib():.2f} GiB, peak so far {_peak_gib():.2f} GiB", flush=True)  # fmt: skip
        t0 = time.perf_counter()
        digest = file_digest(path)  # what the check does first (replay lines name it); cached, so timed apart from the rows
        print(f"sha256 {digest[:16]} in {time.perf_counter() - t0:.0f} s; RSS {_now_gib():.2f} GiB", flush=True)
        started = [time.perf_counter()]
        _watch_rows(args.every, started)
        t0 = started[0]
        run = run_checks([args.candidate], contract=args.contract, topk=args.topk, logits=path, isolate=False, progress=True,
                         out=args.bundle or Path(bundles.name) / "bundle", command="benchmarks/captured_rss.py")  # fmt: skip
        took = time.perf_counter() - t0
        s = run.results[0].summary
        print(f"checked {s.rows_checked:,} rows ({s.status.word}, {s.mismatched_rows:,} mismatched) in {took:.0f} s, {s.rows_checked / took:,.0f} rows/s")
        print(f"peak RSS: {_peak_gib():.2f} GiB (goal < 2 GiB) for a {path.stat().st_size / 2**30:.2f} GiB logits file")
        return 0 if _peak_gib() < 2 and s.rows_checked == args.rows else 1
    finally:
        bundles.cleanup()
        if folder is not None:
            folder.cleanup()


if __name__ == "__main__":
    sys.exit(main())
