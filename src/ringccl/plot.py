"""Charts of the cost model (matplotlib, Agg backend: no display needed).

:func:`model_chart` draws what ``ringccl model --plot`` writes: predicted time versus message size
on log-log axes, one line per algorithm and world size, with the crossovers between fastest
algorithms marked; and busbw versus size next to it.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from .errors import RingcclError

__all__ = ["model_chart"]

_STYLES = ["-", "--", ":", "-."]


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RingcclError("plotting needs matplotlib: pip install 'ringccl[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


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
    fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(13, 5.2))
    for j, t in enumerate(tables):
        style = _STYLES[j % len(_STYLES)]
        sizes = np.asarray(t["sizes"], dtype=float)
        for a in t["seconds"]:
            label = f"{a}, N={t['world_size']}"
            ax_t.loglog(sizes, np.asarray(t["seconds"][a]) * 1e3, style, color=colors[a],
                        label=label)
            ax_b.semilogx(sizes, np.asarray(t["busbw"][a]) / 1e9, style, color=colors[a],
                          label=label)
        for c in t["crossovers"]:
            ax_t.plot([c["nbytes"]], [c["seconds"] * 1e3], "o", color="black", ms=6, zorder=5)
            ax_t.annotate(f"{c['below']}→{c['above']}\n{_size_label(c['nbytes'], digits=3)}",
                          (c["nbytes"], c["seconds"] * 1e3), textcoords="offset points",
                          xytext=(6, -18), fontsize=8)
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
    ax_t.legend(fontsize=7, loc="upper left", framealpha=0.85)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
