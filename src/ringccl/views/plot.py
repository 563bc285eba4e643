"""Charts of the cost model (matplotlib, Agg backend: no display needed).

:func:`model_chart` draws what ``ringccl model --plot`` writes: predicted time versus message size
on log-log axes, one line per algorithm and world size, with the crossovers between fastest
algorithms marked; and busbw versus size next to it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..args import image_format
from ..errors import RingcclError

__all__ = ["model_chart", "fit_chart", "save_figure"]

_STYLES = ["-", "--", ":", "-."]


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RingcclError("plotting needs matplotlib: pip install 'ringccl[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, path: str, title: str = "", title_size: float = 10) -> str:
    """Write the matplotlib figure ``fig`` to ``path`` (PNG, 110 dpi) under ``title`` (none
    when empty), laid out tight, and close it. Returns ``path``."""
    if title:
        fig.suptitle(title, fontsize=title_size)
    fig.tight_layout()
    fig.savefig(path, dpi=110, format=image_format(path))
    _pyplot().close(fig)
    return path


def _size_label(nbytes: float, _pos=None, digits: int = 6) -> str:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if nbytes >= scale:
            return f"{nbytes / scale:.{digits}g} {unit}"
    return f"{nbytes:.{digits}g} B"


def model_chart(tables: Sequence[dict], path: str, title: str = "") -> str:
    """Write a PNG: time vs size (log-log) with crossovers marked, and busbw vs size.

    Args:
        tables: one dict per world size with ``world_size``, ``sizes`` (bytes), ``seconds`` and
            ``busbw`` ({algorithm: array over sizes}, seconds and bytes/s) and ``crossovers``
            ([{"nbytes", "seconds", "below", "above"}]).
        path: output file (PNG).
        title: figure title.
    Returns:
        ``path``.
    Raises:
        RingcclError: matplotlib is not installed.
    """
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator

    algorithms = list(dict.fromkeys(a for t in tables for a in t["seconds"]))
    colors = {a: plt.get_cmap("tab10")(i % 10) for i, a in enumerate(algorithms)}
    from matplotlib.lines import Line2D

    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(14, 5.4))
    notes = []  # crossovers: numbered dots on the plot, explained in a box (labels overlap)
    for j, t in enumerate(tables):
        style = _STYLES[j % len(_STYLES)]
        sizes = np.asarray(t["sizes"], dtype=float)
        for a in t["seconds"]:
            ax_t.loglog(sizes, np.asarray(t["seconds"][a]) * 1e3, style, color=colors[a])
            ax_b.semilogx(sizes, np.asarray(t["busbw"][a]) / 1e9, style, color=colors[a])
        for c in t["crossovers"]:
            notes.append(f"{len(notes) + 1}  N={t['world_size']}: {c['below']} → {c['above']} "
                         f"at {_size_label(c['nbytes'], digits=3)}")
            ax_t.plot([c["nbytes"]], [c["seconds"] * 1e3], "o", color="black", ms=5, zorder=5)
            ax_t.annotate(str(len(notes)), (c["nbytes"], c["seconds"] * 1e3),
                          textcoords="offset points", xytext=(3, 3), fontsize=8, zorder=6)
    if notes:
        ax_t.text(0.98, 0.02, "crossovers (fastest below → above)\n" + "\n".join(notes),
                  transform=ax_t.transAxes, ha="right", va="bottom", fontsize=7,
                  bbox=dict(facecolor="white", alpha=0.85, edgecolor="0.8"))
    # one legend entry per algorithm (colour) and per world size (line style), not per pair
    handles = [Line2D([], [], color=colors[a], label=a) for a in algorithms]
    handles += [Line2D([], [], color="black", linestyle=_STYLES[j % len(_STYLES)],
                       label=f"N={t['world_size']}") for j, t in enumerate(tables)]
    for ax in (ax_t, ax_b):
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=4))
        ax.xaxis.set_major_formatter(FuncFormatter(_size_label))
        ax.tick_params(axis="x", labelrotation=45, labelsize=8)
        ax.set_xlabel("message size (bytes per rank)")
        ax.grid(True, which="major", alpha=0.3)
    ax_t.set_ylabel("predicted time (ms)")
    ax_t.set_title("time vs size" + ("  (● crossover)" if any(t["crossovers"] for t in tables)
                                     else ""))
    ax_b.set_ylabel("busbw (GB/s)")
    ax_b.set_title("bus bandwidth vs size (nccl-tests busbw)")
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 0.86, 1))
    fig.legend(handles=handles, loc="center right", fontsize=8, framealpha=0.9)
    fig.savefig(path, dpi=110, format=image_format(path))
    plt.close(fig)
    return path


def fit_chart(logs: Sequence[dict], path: str, title: str = "") -> str:
    """Write a PNG: measured and fitted busbw versus size, one panel per log.

    Args:
        logs: one dict per log with ``name``, ``sizes`` (bytes), ``measured`` and
            ``predicted`` (busbw, bytes/s, over sizes) and ``held_out`` (bools: the sizes the
            fit did not see).
        path: output file (PNG); title: figure title.
    Returns:
        ``path``.
    Raises:
        RingcclError: matplotlib is not installed.
    """
    plt = _pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator

    cols = min(3, len(logs)) or 1
    rows = (len(logs) + cols - 1) // cols or 1
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.0 * rows), squeeze=False)
    for ax, log in zip(axes.flat, logs):
        sizes = np.asarray(log["sizes"], dtype=float)
        held = np.asarray(log["held_out"], dtype=bool)
        measured = np.asarray(log["measured"], dtype=float) / 1e9
        ax.semilogx(sizes, np.asarray(log["predicted"], dtype=float) / 1e9, "-", color="C0",
                    label="model")
        ax.semilogx(sizes[~held], measured[~held], "o", color="C1", ms=4, label="measured, fit")
        ax.semilogx(sizes[held], measured[held], "s", mfc="none", color="C3", ms=5,
                    label="measured, held out")
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(LogLocator(base=16))
        ax.xaxis.set_major_formatter(FuncFormatter(_size_label))
        ax.tick_params(axis="x", labelrotation=45, labelsize=7)
        ax.set_title(log["name"], fontsize=8)
        ax.set_ylabel("busbw (GB/s)")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(logs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    return save_figure(fig, path, title)
