"""``trace_diff.json`` and ``trace_diff.html``: the trace diff's record and its page.

The page is self-contained like the check's report (inline CSS, the
per-layer plot as a base64 PNG, no script): the counts, the causes per
layer as stacked bars, the router clauses, and the worst tokens with their
replay lines.
"""

from __future__ import annotations

import base64
import functools
import html
import io
from pathlib import Path

import jinja2

from ._atomic import write_json, write_text
from .text import clean

__all__ = ["JSON", "PAGE", "PLOT", "render_trace_diff_html", "render_trace_diff_png", "write_trace_diff"]

JSON, PAGE, PLOT = "trace_diff.json", "trace_diff.html", "trace_diff.png"
_COLORS = {"logits_differ": "#4c72b0", "near_tie": "#c4a000", "router": "#c44e52"}


def render_trace_diff_png(record: dict) -> bytes:
    """Flips per layer, stacked by cause; PNG bytes."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    layers = record["layers"]
    x = list(range(len(layers)))
    fig, ax = plt.subplots(figsize=(min(3 + 0.3 * len(layers), 16), 3.4), dpi=110)
    bottom = [0] * len(layers)
    for cause, color in _COLORS.items():
        values = [layer[cause] for layer in layers]
        ax.bar(x, values, bottom=bottom, color=color, label=cause, width=0.8)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xlabel("layer")
    ax.set_ylabel("tokens routed differently")
    ax.set_title(f"flips per layer ({record['flips']:,} of {record['rows']:,} token-layers, contract {record['contract']})", fontsize=10)
    if len(layers) <= 40:
        ax.set_xticks(x, [str(layer["layer"]) for layer in layers], fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


@functools.lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    def finalize(value):
        return html.escape(clean(value), quote=True) if isinstance(value, str) else value

    return jinja2.Environment(loader=jinja2.PackageLoader("contracts.reports", "templates"), autoescape=True, finalize=finalize,
                              undefined=jinja2.StrictUndefined)  # fmt: skip


def render_trace_diff_html(record: dict, png: bytes) -> str:
    return _env().get_template("trace_diff.html.j2").render(r=record, png=base64.b64encode(png).decode("ascii"))


def write_trace_diff(out: Path, record: dict) -> dict[str, Path]:
    """Write the json, the plot and the page into ``out``; their paths."""
    png = render_trace_diff_png(record)
    paths = {"json": write_json(out / JSON, record), "page": write_text(out / PAGE, render_trace_diff_html(record, png))}
    (out / PLOT).write_bytes(png)
    paths["plot"] = out / PLOT
    return paths
