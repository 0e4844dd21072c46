"""``gemmtune report --plot``: best-so-far GFLOP/s per study and best GFLOP/s against size."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from gemmtune.errors import GemmtuneError
from gemmtune.files.output import table_cell, write_file
from gemmtune.report.table import GROUP


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise GemmtuneError("--plot needs matplotlib: pip install 'gemmtune[plot]'") from None


def _text(name) -> str:
    """A name from the database as plain text on the plot: printable, and with every ``$``
    escaped, since matplotlib reads text between two as mathtext, which may fail to parse."""
    return table_cell(str(name)).replace("$", r"\$")


def _size(m: int, n: int, k: int) -> float:
    return float((m * n * k) ** (1 / 3))


def plot(rows: pd.DataFrame, path: str | Path):
    """Draw into a PNG: best-so-far GFLOP/s against measured trial for each study, and, for
    each (device, precision) tuned at several sizes, best GFLOP/s against size, the geometric
    mean (m*n*k)^(1/3) (the edge of a cube), on a log2 axis. Returns the matplotlib Figure."""
    require_matplotlib()
    from matplotlib import colormaps
    from matplotlib.figure import Figure  # no pyplot: no global backend, no display needed
    from matplotlib.ticker import MaxNLocator

    several_devices = rows.device.nunique() > 1
    best = rows[rows.status == "ok"].groupby(GROUP).agg(gflops=("gflops", "max"), name=("device_name", "first"))
    series = [(key, g) for key, g in best.reset_index().groupby(["device", "precision"]) if len(g) >= 2]
    studies = sorted(rows.sort_values("id").groupby("study"),
                     key=lambda sg: (sg[1].device_name.iloc[0], sg[1].precision.iloc[0],
                                     int(sg[1].m.iloc[0] * sg[1].n.iloc[0] * sg[1].k.iloc[0]), sg[0]))
    crowded = len(studies) > 8
    fig = Figure(figsize=(13 if series else 7.5, 5.2 + (0.2 * len(studies) / 2 if crowded else 0)),
                 layout="constrained")
    fig.suptitle("gemmtune results on " + ", ".join(sorted(map(_text, rows.device_name.unique()))), fontweight="bold")
    axes = fig.subplots(1, 2 if series else 1, squeeze=False)[0]

    ax = axes[0]
    cmap = colormaps["tab10" if len(studies) <= 10 else "tab20"]
    for i, (study, g) in enumerate(studies):
        first = g.iloc[0]
        label = f"{first.precision} {first.m}x{first.n}x{first.k}"
        if several_devices:
            label += f" on {_text(first.device_name)}"
        if rows[(rows[GROUP] == first[GROUP]).all(axis=1)].study.nunique() > 1:
            label += f" ({_text(study)})"
        color = cmap(i % cmap.N) if len(studies) <= 20 else colormaps["viridis"](i / (len(studies) - 1))
        trial = np.arange(1, len(g) + 1)
        so_far = g.gflops.cummax().ffill()  # a failed trial keeps the best before it
        ax.plot(trial, so_far, "-", marker=".", color=color, label=label)
        if not crowded:  # each trial's own value: readable for a few searches only
            ax.plot(trial, g.gflops, "o", color=color, markerfacecolor="none", alpha=0.6, markersize=6)
    ax.set_title("Best-so-far GFLOP/s during each search" +
                 ("" if crowded else "\n(circles: each trial's own; a failed trial has none)"))
    ax.set_xlabel("measured trial")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("GFLOP/s")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    if crowded:
        ax.legend(fontsize="x-small", ncols=2, loc="upper center", bbox_to_anchor=(0.5, -0.12))
    else:
        ax.legend(fontsize="small")

    if series:
        ax = axes[1]
        for (device, precision), g in series:
            g = g.assign(size=[_size(m, n, k) for m, n, k in zip(g.m, g.n, g.k)]).sort_values("size")
            label = f"{precision}gemm" + (f" on {_text(g.name.iloc[0])}" if several_devices else "")
            ax.plot(g["size"], g.gflops, "o-", label=label)
            for row in g.itertuples():
                if not row.m == row.n == row.k:
                    ax.annotate(f"{row.m}x{row.n}x{row.k}", (row.size, row.gflops), fontsize="x-small",
                                textcoords="offset points", xytext=(4, 4))
        ax.set_xscale("log", base=2)
        sizes = sorted({_size(m, n, k) for _, g in series for m, n, k in zip(g.m, g.n, g.k)})
        ax.set_xticks(sizes, [f"{x:.0f}" for x in sizes])  # the sizes tuned, not just powers of 2
        ax.minorticks_off()
        ax.set_title("Best GFLOP/s against problem size")
        ax.set_xlabel("size: (m·n·k)^(1/3), the edge of a cube (log2 scale)")
        ax.set_ylabel("best GFLOP/s")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize="small")
    write_file(path, lambda f: fig.savefig(f, format="png", dpi=110))  # whole or not at all, never through a link
    return fig
