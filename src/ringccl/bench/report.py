"""Reports of measured rows: nccl-tests' text layout, CSV, a busbw chart, the JSON of a sweep,
and ``ringccl run``'s ringccl-versus-builtin summary (:func:`run_report`). Formatting only: the
CLI prints these strings and dicts."""

from __future__ import annotations

import csv
import io
import statistics
from dataclasses import dataclass, field
from typing import Sequence

from ..collectives import get_collective
from ..ops import parse_op
from ..args import image_format
from ..units import format_size
from .nccl_tests import PROGRAMS
from .spec import BUILTIN, PLACEMENTS, BenchSpec, run_count

__all__ = ["row_label", "format_nccl_tests", "CSV_FIELDS", "format_csv", "best_placement",
           "plot_busbw", "Sweep", "run_report", "RankPlace", "rank_places", "NCCL_TESTS_PROGRAMS"]

#: the nccl-tests program that measures each collective: the reader's table
#: (:data:`.nccl_tests.PROGRAMS`) turned round; a collective nccl-tests has no program for
#: (scatter, gather) is named ``<collective>_perf`` where it is printed
NCCL_TESTS_PROGRAMS = {c: f"{p}_perf" for p, c in PROGRAMS.items()}


@dataclass(frozen=True)
class RankPlace:
    """Where one rank ran, as nccl-tests' device list prints it: host, process id, device
    index on its host and device name ("CPU" for gloo and MPI processes)."""

    host: str
    pid: int
    device: int
    name: str


def rank_places(hosts_pids: Sequence[tuple[str, int]], names: Sequence[str]) -> list[RankPlace]:
    """One :class:`RankPlace` per rank from its (host, pid) and device name; the device index
    counts the ranks before it on the same host, as one process per device does."""
    seen: dict[str, int] = {}
    out = []
    for (host, pid), name in zip(hosts_pids, names):
        out.append(RankPlace(host, int(pid), seen.get(host, 0), name))
        seen[host] = seen.get(host, 0) + 1
    return out


def row_label(row: dict) -> str:
    """Algorithm label: ``ring``, ``ring seg=1MiB``, ``ring acc=float32``, ``builtin``."""
    seg, acc = row.get("segment_bytes"), row.get("accumulate_dtype")
    label = row["algorithm"]
    if label != BUILTIN and seg is not None:
        label += f" seg={'off' if seg == 0 else format_size(seg, 0).replace(' ', '')}"
    return f"{label} acc={acc}" if acc else label


def _num(value: float, width: int) -> str:
    """nccl-tests' number style: 2 decimals while they fit in ``width``, then fewer, then
    scientific notation."""
    digits = len(str(int(value))) if value >= 1 else 0
    if digits < width - 2:
        return f"{value:{width}.2f}"
    if digits < width - 1:
        return f"{value:{width}.1f}"
    if digits < width + 1:
        return f"{value:{width}.0f}"
    return f"{value:{width}.1e}"


def format_nccl_tests(rows: Sequence[dict], spec: BenchSpec, world_size: int,
                      places: Sequence[RankPlace] | None = None) -> str:
    """The report in nccl-tests' text layout (nccl-tests v2.17 ``src/util.cu``), one run per
    algorithm (segment setting), as a file of nccl-tests programs run one after the other.

    Reproduced: ``# Collective test starting: all_reduce_perf``, the ``#``-comment preamble
    line with the sweep parameters, the device list (``# Using devices``, then ``#  Rank %2d
    Group %2d Pid %6d on %10s device %2d [%s] %s`` per rank, from ``places``: host, process id,
    device index on the host, device name; the bus id is printed 0x00, ringccl does not read
    one), the two header lines with the out-of-place and in-place groups, the units line, one
    data line per size (``size count type redop root`` then ``time algbw busbw #wrong`` per
    placement, nccl-tests' column widths and number formatting), the footer (``# Out of
    bounds values`` and ``# Avg bus bandwidth``) and ``# Collective test concluded: …``. Not
    reproduced: the version line (this is not nccl-tests) and the per-iteration columns. A
    placement that was not measured prints ``N/A`` fields; ``#wrong`` prints ``N/A`` when
    checking is off, as nccl-tests does. Each run also carries two comments of ringccl's,
    ``# ringccl bench all_reduce: backend gloo, transport shm, world_size 2`` and ``# ringccl
    algorithm: <label>`` (with ``(segment_bytes N)`` when segmented), from which ``ringccl
    fit`` reads the rows back as ringccl's (:func:`ringccl.bench.nccl_tests.parse_nccl_runs`).
    """
    out = io.StringIO()
    p = lambda line="": out.write(line + "\n")  # noqa: E731
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("kind", "collective") == "collective":
            groups.setdefault(row_label(r), []).append(r)
    program = NCCL_TESTS_PROGRAMS.get(spec.collective, f"{spec.collective}_perf")
    for label, group in groups.items():
        transport = group[0].get("transport")
        seg = group[0].get("segment_bytes")
        p(f"# Collective test starting: {program}")
        p(f"# ringccl bench {spec.collective}: backend {spec.backend}, transport "
          f"{transport or 'none'}, world_size {world_size}")
        p(f"# nThread 1 nGpus 1 minBytes {spec.min_bytes} maxBytes {spec.max_bytes} "
          f"step: {spec.factor}(factor) warmup iters: {spec.warmup} iters: {spec.iters} "
          f"agg iters: 1 validation: {int(spec.check)} graph: 0")
        p(f"# ringccl algorithm: {label}" + (f" (segment_bytes {seg})" if seg else ""))
        p("#")
        if places:
            p("# Using devices")
            for rank, place in enumerate(places):
                p(f"#  Rank {rank:2d} Group {0:2d} Pid {place.pid:6d} on {place.host:>10} "
                  f"device {place.device:2d} [0x00] {place.name}")
            p("#")
        p(f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place"
          f"                       in-place          ")
        p(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  "
          f"{'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6}  "
          f"{'time':>7}  {'algbw':>6}  {'busbw':>6}  {'#wrong':>6} ")
        p(f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  "
          f"{'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6}  "
          f"{'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>6} ")
        by_size: dict[int, dict[str, dict]] = {}
        for r in group:
            by_size.setdefault(r["size"], {})[r["placement"]] = r
        errors, busbws = 0, []
        for size, placed in by_size.items():
            first = next(iter(placed.values()))
            line = (f"{size:>12}  {first['count']:>12}  {first['type']:>8}  "
                    f"{first['redop']:>6}  {first['root']:>6}")
            for placement in PLACEMENTS:
                r = placed.get(placement)
                if r is None:
                    line += f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
                    continue
                wrong = "N/A" if r["wrong"] is None else f"{r['wrong']:g}"
                line += (f"  {_num(r['time_s'] * 1e6, 7)}  {_num(r['algbw'] / 1e9, 6)}  "
                         f"{_num(r['busbw'] / 1e9, 6)}  {wrong:>6}")
                errors += r["wrong"] or 0
                busbws.append(r["busbw"] / 1e9)
            p(line)
        p(f"# {'Out of bounds values':<20} : {errors} {'FAILED' if errors else 'OK'}")
        p(f"# {'Avg bus bandwidth':<20} : {statistics.fmean(busbws) if busbws else 0:g} ")
        p("#")
        p(f"# Collective test concluded: {program}")
    return out.getvalue()


CSV_FIELDS = ["collective", "backend", "world_size", "algorithm", "segment_bytes",
              "accumulate_dtype", "placement", "size", "count", "dtype", "type", "redop", "root",
              "time_s", "min_s", "p90_s", "algbw", "busbw", "wrong", "iters", "warmup", "kind"]


def format_csv(rows: Sequence[dict]) -> str:
    """One CSV line per row (SI units: bytes, seconds, bytes/s); per-iteration times omitted."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=CSV_FIELDS, extrasaction="ignore",
                            lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in CSV_FIELDS})
    return out.getvalue()


def best_placement(rows: Sequence[dict]) -> list[dict]:
    """Per (algorithm label, size): the faster of the out-of-place and in-place rows."""
    best: dict[tuple, dict] = {}
    for r in rows:
        if r.get("kind", "collective") != "collective":
            continue
        key = (row_label(r), r["world_size"], r["size"])
        if key not in best or r["time_s"] < best[key]["time_s"]:
            best[key] = r
    return list(best.values())


def plot_busbw(rows: Sequence[dict], path: str, title: str = "") -> None:
    """Write a PNG of busbw (GB/s) versus size per algorithm (best placement), matplotlib Agg."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4))
    lines: dict[str, list[dict]] = {}
    for r in best_placement(rows):
        label = row_label(r) + (f", {r['world_size']} ranks"
                             if len({x["world_size"] for x in rows}) > 1 else "")
        lines.setdefault(label, []).append(r)
    for label, sel in lines.items():
        sel.sort(key=lambda r: r["size"])
        ax.plot([r["size"] for r in sel], [r["busbw"] / 1e9 for r in sel],
                "s--" if label.startswith(BUILTIN) else "o-", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s = 1e9 B/s)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120, format=image_format(path))
    plt.close(fig)


@dataclass
class Sweep:
    """A run: the spec, the world size and the rows (what ``--json`` prints); ``interrupted``:
    it was stopped (Ctrl-C) and ``rows`` are those measured before (the JSON then says
    ``"interrupted": true``)."""

    spec: BenchSpec
    world_size: int
    rows: list = field(default_factory=list)
    interrupted: bool = False

    def to_json(self) -> dict:
        out = {"spec": self.spec.to_dict(), "world_size": self.world_size, "rows": self.rows}
        if self.interrupted:
            out["interrupted"] = True
        return out


def run_report(rows: Sequence[dict], spec: BenchSpec, count: int,
               params: dict | None = None) -> dict:
    """``ringccl run``'s report from the rows of a :func:`~ringccl.bench.spec.one_size` sweep.

    Args:
        rows: the sweep's two rows, ringccl's algorithm and the builtin (one size, placement).
        count: the count the user asked for (:func:`~ringccl.bench.spec.run_count` rounds it).
        params: the builder parameters as the user gave them (reported as they are).
    Returns:
        collective, algorithm, world_size, count (as measured), dtype, op, size_bytes, params
        (as given), accumulate_dtype, wrong (ringccl's ``#wrong``), iters, warmup, transport
        (what ringccl's row ran on: "shm" on one host unless ``RINGCCL_TRANSPORT`` says
        otherwise; the builtin ran on gloo); ``ringccl`` and ``builtin``: time_s, min_s, p90_s
        (seconds), algbw, busbw (bytes/s), wrong; busbw_ratio (ringccl / builtin, None when
        the builtin's busbw is 0: one rank or an empty buffer) and bus_factor.
    """
    ours = next(r for r in rows if r["algorithm"] != BUILTIN)
    builtin = next(r for r in rows if r["algorithm"] == BUILTIN)
    coll = get_collective(spec.collective)
    n = ours["world_size"]
    report = {"collective": spec.collective, "algorithm": ours["algorithm"], "world_size": n,
              "count": run_count(spec.collective, count, n), "dtype": spec.dtype,
              "op": parse_op(spec.op).value, "size_bytes": ours["size"],
              "params": dict(params or {}),
              "accumulate_dtype": spec.accumulate_dtype, "wrong": ours["wrong"],
              "iters": spec.iters, "warmup": spec.warmup, "transport": ours.get("transport")}
    for name, r in (("ringccl", ours), ("builtin", builtin)):
        report[name] = {key: r[key] for key in ("time_s", "min_s", "p90_s", "algbw", "busbw",
                                                "wrong")}
    report["busbw_ratio"] = (ours["busbw"] / builtin["busbw"] if builtin["busbw"] > 0
                             else None)
    report["bus_factor"] = coll.bus_factor(n)
    return report
