"""Reading a bench report's timed points: where two latency curves cross, how each curve grows with M, the table the
command prints and the plot ``bench.png``."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ..reports._atomic import write_atomic
from .bench_point import noisy

__all__ = ["crossovers", "curve", "launches_by_candidate", "results_table", "write_plot"]


def _timed(points: list[dict], *, steady: bool = False) -> dict[int, float]:
    """Median us by M of the timed points; with ``steady``, only those whose spread allows a crossover (see ``noisy``)."""
    return {p["m"]: p["median_us"] for p in points if p.get("status") == "timed" and p.get("median_us") and not (steady and noisy(p))}


def crossovers(baseline: dict, other: dict) -> list[dict]:
    """Where ``other``'s latency curve crosses ``baseline``'s, between consecutive M both timed (log-log interpolation)."""
    a, b = _timed(baseline["results"], steady=True), _timed(other["results"], steady=True)
    ms = sorted(set(a) & set(b))
    found = []
    for m0, m1 in zip(ms, ms[1:]):
        d0, d1 = math.log(b[m0] / a[m0]), math.log(b[m1] / a[m1])
        if d0 == 0 or d0 * d1 >= 0:
            continue
        t = d0 / (d0 - d1)
        lm = math.log(m0) + t * (math.log(m1) - math.log(m0))
        lu = math.log(a[m0]) + t * (math.log(a[m1]) - math.log(a[m0]))
        faster_after = other["name"] if d1 < 0 else baseline["name"]
        found.append(
            {"baseline": baseline["name"], "candidate": other["name"], "between_m": [m0, m1],
             "m": round(math.exp(lm), 1), "latency_us": round(math.exp(lu), 3), "faster_above": faster_after}
        )  # fmt: skip
    return found


def curve(entry: dict, floor: float | None, floors_by_m: dict[str, float] | None = None) -> dict | None:
    """How one candidate's time grows with M: the largest fall of a point below the slowest point at a smaller M (in
    percent of that point: a launch shape switched too late or too early shows here), and each point above the launch
    floor (the figure a speed goal is set in): the run's first floor, and the floor timed just before that M's
    candidates where there is one. None with fewer than one timed point."""
    timed = _timed(entry["results"])
    if not timed:
        return None
    fall, at, peak_m = 0.0, None, None
    best = (None, 0.0)  # the slowest point so far: (M, us)
    for m in sorted(timed):
        us = timed[m]
        if best[0] is not None and us < best[1]:
            drop = 100.0 * (best[1] - us) / best[1]
            if drop > fall:
                fall, at, peak_m = drop, m, best[0]
        if us >= best[1]:
            best = (m, us)
    out = {"candidate": entry["name"], "largest_fall_pct": round(fall, 2), "at_m": at, "below_m": peak_m}
    if floor is not None:
        out["above_floor_us"] = {str(m): round(us - floor, 3) for m, us in sorted(timed.items())}
    if floors_by_m:
        out["above_floor_of_m_us"] = {str(m): round(us - floors_by_m[str(m)], 3) for m, us in sorted(timed.items())
                                      if str(m) in floors_by_m}  # fmt: skip
    return out


def launches_by_candidate(report: dict) -> dict[str, str]:
    """Per timed candidate, what one timed call launched: ``"1 kernel"``, ``"2 kernels + 1 copy"``, a range over M
    (``"1-2 kernels"``), or ``"not counted"``; and the path timed (``engine launch`` / ``route``)."""
    found = {}
    for c in report["candidates"]:
        points = [p for p in c["results"] if p.get("status") == "timed"]
        if c["status"] != "ok" or not points:
            continue
        kernels = sorted({p["launched"]["kernels"] for p in points if (p.get("launched") or {}).get("kernels") is not None})
        copies = sorted({p["launched"].get("copies", 0) for p in points if (p.get("launched") or {}).get("kernels") is not None})
        if not kernels:
            text = "not counted"
        else:
            k = f"{kernels[0]}" if len(kernels) == 1 else f"{kernels[0]}-{kernels[-1]}"
            text = f"{k} kernel{'' if kernels == [1] else 's'}"
            if copies and copies[-1]:
                text += f" + {copies[0] if len(copies) == 1 else f'{copies[0]}-{copies[-1]}'} copies/memsets"
        paths = sorted({p.get("path", "route") for p in points})
        found[c["name"]] = f"{text} per call ({', '.join(paths)})"
    return found


def _column(entry: dict) -> str:
    """A candidate's column: its name, and the contract it was timed under where that is not --contract's."""
    return f"{entry['name']} [{entry['contract']}]" if entry.get("note") else entry["name"]


def results_table(report: dict) -> pd.DataFrame:
    """M x candidates: median us per launch, and each one's ratio to the first candidate."""
    timed = [c for c in report["candidates"] if c["status"] == "ok"]
    if not timed:
        return pd.DataFrame()
    base = timed[0]
    base_t = _timed(base["results"])
    rows = []
    for M in report["m"]:
        row = {"M": M}
        for c in timed:
            point = next(p for p in c["results"] if p["m"] == M)
            if point["status"] != "timed":
                row[_column(c)] = point["status"]
                continue
            cell = f"{point['median_us']:.2f}" + ("*" if point.get("timer") == "cuda-eager" else "") + ("~" if point.get("noisy") else "")
            if c is not base:
                cell += f" ({point['median_us'] / base_t[M]:.2f}x)" if M in base_t else " (-)"
            row[_column(c)] = cell
        rows.append(row)
    return pd.DataFrame(rows)


def write_plot(path: Path, report: dict) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = report["method"]
    timer = m["timer"]
    notes = [
        f"({i}) {x['candidate']} crosses {x['baseline']} near M={x['m']:.0f}, {x['latency_us']:.3g} us; "
        f"{x['faster_above']} faster above"
        for i, x in enumerate(report["crossovers"], 1)
    ]
    fig = plt.figure(figsize=(9, 5.2 + 0.2 * len(notes)), dpi=110)
    ax = fig.add_axes([0.09, 0.12 + 0.035 * len(notes), 0.62, 0.72 - 0.035 * len(notes)])
    colors = {}
    for c in report["candidates"]:
        pts = [p for p in c["results"] if p["status"] == "timed"]
        if c["status"] != "ok" or not pts:
            continue
        xs, ys = [p["m"] for p in pts], [p["median_us"] for p in pts]
        lows = [p["median_us"] - p["spread"]["min"] for p in pts]
        highs = [p["spread"]["p90"] - p["median_us"] for p in pts]
        eager = any(p.get("timer") == "cuda-eager" for p in pts)
        bars = ax.errorbar(xs, ys, yerr=[lows, highs], marker="o", capsize=3,
                           label=c["name"] + (" (eager: not capturable)" if eager else ""),
                           linestyle="--" if eager else "-", markerfacecolor="none" if eager else None)  # fmt: skip
        colors[c["name"]] = bars.lines[0].get_color()
    for i, x in enumerate(report["crossovers"], 1):
        ax.plot([x["m"]], [x["latency_us"]], marker="*", markersize=15, color=colors.get(x["candidate"], "black"),
                markeredgecolor="black", zorder=5, linestyle="none")  # fmt: skip
        ax.annotate(f"({i})", (x["m"], x["latency_us"]), textcoords="offset points", xytext=(6, 6), fontsize=9, weight="bold")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("M (rows per launch)")
    ax.set_ylabel(f"us per launch ({timer})")
    ax.grid(True, which="both", alpha=0.3)
    dev = report["environment"].get("device_name") or report["device"]
    title = f"Router latency vs M: {timer}, {dev}"
    fig.suptitle(
        f"{title}\nE={m['experts']}, top-{m['topk']}, {m['dtype']} logits, {m['bias_dtype']} bias; median, bars min to p90",
        fontsize=10,
    )
    handles, labels = ax.get_legend_handles_labels()
    skipped = [f"{c['name']}: unavailable" for c in report["candidates"] if c["status"] != "ok"]
    if handles:
        ax.legend(handles, labels, fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0)
    if skipped:
        fig.text(0.74, 0.12 + 0.035 * len(notes), "\n".join(skipped), fontsize=7, color="0.35", va="bottom", wrap=True)
    for i, note in enumerate(notes):
        fig.text(0.02, 0.02 + 0.035 * (len(notes) - 1 - i), note, fontsize=8)
    # The title also goes into the PNG's text chunk, so a file alone says how it was timed.
    write_atomic(path, lambda p: fig.savefig(p, format="png", metadata={"Title": title, "Description": m["description"]}))
    plt.close(fig)
    return path
