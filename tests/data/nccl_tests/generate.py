"""Write the nccl-tests logs of this folder (run from anywhere: ``python generate.py``).

The layout is nccl-tests' own, printed the way its source prints it (github.com/NVIDIA/
nccl-tests, ``src/util.cu`` of v2.17 for the logs with a version line, ``src/common.cu`` of
v2.13 for the others, ``src/common.cu`` of v2.0-era releases for the one without ``root`` and
with an ``error`` column): the same format strings, widths and number formatting.

The numbers are ours. Each curve is a smooth two-regime law that owes nothing to NCCL's tuning
model (so fitting that model to them is a real test): the faster of a low-latency regime
``t0_small + bus_bytes / bw_small`` and a bandwidth regime ``t0_large + bus_bytes / bw_large``
(bus bytes = size × nccl-tests' bus factor), times log-normal noise of 2 % (seeded). The
asymptotic bus bandwidths sit where users' published logs put them (DGX H100: ~475 GB/s
all_reduce and ~360 GB/s all_gather on one node, ~360 GB/s all_reduce on four nodes, ~46 GB/s
per 400 Gb/s NIC; DGX A100 ~230 GB/s on one node), the latencies at their usual tens of µs.
"""

from __future__ import annotations

import math
import pathlib
import random

HERE = pathlib.Path(__file__).resolve().parent

BUS = {"all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
       "reduce_scatter": lambda n: (n - 1) / n, "alltoall": lambda n: (n - 1) / n,
       "sendrecv": lambda n: 1.0}
ELT = {"float": 4, "bfloat16": 2, "half": 2}


def fnum(value: float, width: int) -> str:
    """util.cu getFloatStr: 2 decimals if they fit the width, then 1, then 0, then %e."""
    for spec in (f"{width}.2f", f"{width}.1f", f"{width}.0f"):
        text = format(value, spec)
        if len(text) <= width:
            return text
    return format(value, f"{width}.1e" if width >= 7 else f"{width}.0e")


def old_time(us: float) -> str:
    """common.cu (v2.13) time column: %7.0f from 10 ms, %7.1f from 100 us, else %7.2f."""
    return f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def counts(test: str, size: int, n: int, elt: int) -> tuple[int, int]:
    """(size column, count column) as nccl-tests' getCollByteCount gives them."""
    count = size // elt
    if test in ("all_gather", "reduce_scatter", "alltoall"):
        base = (count // n) & ~(16 // elt - 1)
        return base * n * elt, base
    return count * elt, count


def law(bus_bytes: float, p: dict) -> float:
    small = p["t0_small"] + bus_bytes / (p["bw_small"] * 1e3)
    large = p["t0_large"] + bus_bytes / (p["bw_large"] * 1e3)
    return min(small, large)  # µs (bytes / (GB/s * 1e3) = µs)


def write(name: str, test: str, hosts: list[str], ppn: int, device: str, sizes, params: dict,
          style: str, seed: int, dtype: str = "float", preamble: str = "") -> None:
    rng = random.Random(seed)
    n = len(hosts) * ppn
    elt = ELT[dtype]
    redop = "none" if test in ("all_gather", "alltoall") else "sum"
    out = [preamble] if preamble else []
    p = out.append
    lo, hi = sizes[0], sizes[-1]
    if style == "v2.17":
        p("# nccl-tests version 2.17.6 nccl-headers=22703 nccl-library=22703")
        p(f"# Collective test starting: {test}_perf")
    if style != "v2.0":
        p(f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: 2(factor) warmup iters: 5 "
          "iters: 20 agg iters: 1 validation: 1 graph: 0")
        p("#")
        p("# Using devices")
    else:
        p(f"# nThread 1 nGpus 1 minBytes {lo} maxBytes {hi} step: 2(factor) warmup iters: 5 "
          "iters: 20 validation: 1 ")
        p("#")
        p("# Using devices")
    pid = 41200 + seed * 100
    for r in range(n):
        host, local = hosts[r // ppn], r % ppn
        bus_id = [0x18, 0x2a, 0x3a, 0x5d, 0x84, 0x8b, 0x91, 0xe4][local % 8]
        if style == "v2.17":
            p(f"#  Rank {r:2d} Group {0:2d} Pid {pid + r:6d} on {host:>10} device {local:2d} "
              f"[{0:04x}:{bus_id:02x}:{0:02x}] {device}")
        elif style == "v2.13":
            p(f"#  Rank {r:2d} Group {0:2d} Pid {pid + r:6d} on {host:>10} device {local:2d} "
              f"[0x{bus_id:02x}] {device}")
        else:
            p(f"#   Rank {r:2d} Pid {pid + r:6d} on {host:>10} device {local:2d} "
              f"[0x{bus_id:02x}] {device}")
    p("#")
    if style == "v2.0":
        p(f"# {'':>10}  {'':>12}  {'':>6}  {'':>6}        out-of-place                    "
          "in-place          ")
        p(f"# {'size':>10}  {'count':>12}  {'type':>6}  {'redop':>6}  {'time':>7}  "
          f"{'algbw':>6}  {'busbw':>6}  {'error':>5}  {'time':>7}  {'algbw':>6}  "
          f"{'busbw':>6}  {'error':>5}")
        p(f"# {'(B)':>10}  {'(elements)':>12}  {'':>6}  {'':>6}  {'(us)':>7}  {'(GB/s)':>6}  "
          f"{'(GB/s)':>6}  {'':>5}  {'(us)':>7}  {'(GB/s)':>6}  {'(GB/s)':>6}  {'':>5}")
    else:
        gap = " " if style == "v2.13" else "  "
        p(f"# {'':>10}  {'':>12}  {'':>8}  {'':>6}  {'':>6}           out-of-place       "
          "                in-place          ")
        p(f"# {'size':>10}  {'count':>12}  {'type':>8}  {'redop':>6}  {'root':>6}  "
          f"{'time':>7}  {'algbw':>6}  {'busbw':>6}{gap}{'#wrong':>6}  {'time':>7}  "
          f"{'algbw':>6}  {'busbw':>6}{gap}{'#wrong':>6}" + (" " if style == "v2.17" else ""))
        p(f"# {'(B)':>10}  {'(elements)':>12}  {'':>8}  {'':>6}  {'':>6}  {'(us)':>7}  "
          f"{'(GB/s)':>6}  {'(GB/s)':>6}  {'':>{5 if style == 'v2.13' else 6}}  {'(us)':>7}  "
          f"{'(GB/s)':>6}  {'(GB/s)':>6}  {'':>{5 if style == 'v2.13' else 6}}"
          + (" " if style == "v2.17" else ""))
    busbws = []
    for s in sizes:
        size, count = counts(test, s, n, elt)
        line = (f"{size:12d}  {count:12d}  {dtype:>8}  {redop:>6}  {-1:6d}" if style != "v2.0"
                else f"{size:12d}  {count:12d}  {dtype:>6}  {redop:>6}")
        for _ in range(2):
            bus = size * BUS[test](n)
            us = law(bus, params) * math.exp(rng.gauss(0.0, 0.02))
            algbw = size / us / 1e3
            busbw = algbw * BUS[test](n)
            busbws.append(busbw)
            if style == "v2.17":
                line += f"  {fnum(us, 7)}  {fnum(algbw, 6)}  {fnum(busbw, 6)}  {0:6g}"
            elif style == "v2.13":
                line += f"  {old_time(us)}  {algbw:6.2f}  {busbw:6.2f}  {0:5g}"
            else:
                line += f"  {old_time(us)}  {algbw:6.2f}  {busbw:6.2f}  {0:5.0e}"
        p(line)
    avg = sum(busbws) / len(busbws)
    if style == "v2.17":
        p(f"# {'Out of bounds values':<20} : 0 OK")
        p(f"# {'Avg bus bandwidth':<20} : {avg:g} ")
        p("#")
        p(f"# Collective test concluded: {test}_perf")
    else:
        p("# Out of bounds values : 0 OK")
        p(f"# Avg bus bandwidth    : {avg:g} ")
        p("#")
    (HERE / name).write_text("\n".join(out) + "\n")


def sizes(lo: int, hi: int) -> list[int]:
    out = [lo]
    while out[-1] * 2 <= hi:
        out.append(out[-1] * 2)
    return out


H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
MPIRUN = ("$ mpirun -np {np} -H {hosts} --bind-to none -x NCCL_DEBUG=WARN "
          "-x LD_LIBRARY_PATH ./build/{test}_perf -b {lo} -e {hi} -f 2 -g 1")

if __name__ == "__main__":
    one = ["dgx-h-01"]
    four = [f"dgx-h-{i:02d}" for i in range(1, 5)]
    two = four[:2]
    write("h100_1node_all_reduce.log", "all_reduce", one, 8, H100, sizes(8, 8 << 30),
          dict(t0_small=11.0, bw_small=62.0, t0_large=42.0, bw_large=475.0), "v2.17", 1)
    write("h100_1node_all_gather.log", "all_gather", one, 8, H100, sizes(1024, 8 << 30),
          dict(t0_small=9.0, bw_small=55.0, t0_large=24.0, bw_large=362.0), "v2.17", 2)
    write("h100_4node_all_reduce.log", "all_reduce", four, 8, H100, sizes(1024, 16 << 30),
          dict(t0_small=28.0, bw_small=38.0, t0_large=95.0, bw_large=362.0), "v2.17", 3,
          preamble=MPIRUN.format(np=32, hosts=",".join(h + ":8" for h in four),
                                 test="all_reduce", lo="1K", hi="16G"))
    write("h100_4node_reduce_scatter.log", "reduce_scatter", four, 8, H100,
          sizes(4096, 16 << 30), dict(t0_small=24.0, bw_small=34.0, t0_large=80.0,
                                      bw_large=352.0), "v2.13", 4,
          preamble=MPIRUN.format(np=32, hosts=",".join(h + ":8" for h in four),
                                 test="reduce_scatter", lo="4K", hi="16G"))
    write("h100_2node_alltoall.log", "alltoall", two, 8, H100, sizes(4096, 8 << 30),
          dict(t0_small=45.0, bw_small=22.0, t0_large=95.0, bw_large=86.0), "v2.17", 5)
    write("h100_2node_sendrecv.log", "sendrecv", two, 1, H100, sizes(8, 8 << 30),
          dict(t0_small=13.0, bw_small=21.0, t0_large=26.0, bw_large=46.5), "v2.17", 6)
    # one regime, busbw 150 GB/s across two nodes: far below what the preset's eight
    # 400G NICs carry, so only a fitted inter-node bandwidth describes its large sizes
    write("slow_net_2node_all_reduce.log", "all_reduce", two, 8, H100, sizes(8, 1 << 30),
          dict(t0_small=30.0, bw_small=150.0, t0_large=30.0, bw_large=150.0), "v2.17", 8)
    write("a100_1node_all_reduce_perf_v2.0.log", "all_reduce", ["node-a100"], 8, A100,
          sizes(32, 1 << 30), dict(t0_small=15.0, bw_small=40.0, t0_large=48.0,
                                   bw_large=228.0), "v2.0", 7)
