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
    width = min(max(5.0, 3 + 0.3 * len(layers)), 16)
    fig, ax = plt.subplots(figsize=(width, 3.4), dpi=110)
    bottom = [0] * len(layers)
    for cause, color in _COLORS.items():
        values = [layer[cause] for layer in layers]
        ax.bar(x, values, bottom=bottom, color=color, label=cause, width=0.8)
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_xlabel("layer")
    ax.set_ylabel("tokens routed differently")
    title = f"flips per layer ({record['flips']:,} of {record['rows']:,} token-layers, contract {clean(record['contract'])})"
    _fitted_title(fig, ax, title, width)
    if len(layers) <= 40:
        ax.set_xticks(x, [str(layer["layer"]) for layer in layers], fontsize=8)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _shrink_to_fit(fig, ax.title)
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    return buf.getvalue()


TITLE_POINTS = 10


def _fitted_title(fig, ax, title: str, width_in: float) -> None:
    """The title wrapped to the figure's width (a figure of one layer is 5 inches wide: one line was clipped)."""
    import textwrap

    per_line = max(20, int(width_in * 72 / (0.62 * TITLE_POINTS)))  # a character is about 0.6 em in the default font
    ax.set_title("\n".join(textwrap.wrap(title, per_line)), fontsize=TITLE_POINTS)


def _shrink_to_fit(fig, title) -> None:
    """Smaller type until the title lies inside the figure (a font wider than the estimate above)."""
    renderer = fig.canvas.get_renderer()
    size = TITLE_POINTS
    while size > 5 and title.get_window_extent(renderer).width > fig.bbox.width * 0.98:
        size -= 1
        title.set_fontsize(size)
        fig.tight_layout()


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
