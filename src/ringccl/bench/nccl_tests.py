"""Read nccl-tests' text output (``all_reduce_perf``, ``all_gather_perf``, ...) into rows.

The layout is the one nccl-tests prints (github.com/NVIDIA/nccl-tests: ``src/common.cu`` up to
v2.16, ``src/util.cu`` since; ``writeDeviceReport``, ``writeResultHeader``,
``writeBenchmarkLine*``, ``writeResultFooter``):

* a preamble of ``#`` lines: ``# nThread T nGpus G minBytes … maxBytes … step: …``, since
  v2.17 ``# nccl-tests version …`` and ``# Collective test starting: all_reduce_perf``;
* ``# Using devices`` and one line per rank, ``#  Rank %2d Group %2d Pid %6d on %10s device
  %2d [bus id] name`` (before v2.13 without ``Group``): the host names give the ranks per node;
* the column header: ``size count type redop root`` then ``time algbw busbw #wrong`` for the
  out-of-place and for the in-place call (older versions: no ``root``, ``error`` for
  ``#wrong``; with ``-I 1`` four per-iteration columns follow each group; with timestamps one
  more column), and a units line (µs, GB/s = 1e9 bytes/s);
* one line per size: ``size`` is nccl-tests' bytes (max of send and receive buffer), the times
  are averages over the iterations in µs;
* the footer: ``# Out of bounds values : N OK`` and ``# Avg bus bandwidth : X``.

Lines may carry a prefix from the launcher (``mpirun --timestamp-output``, ``[1,0]<stdout>:``):
fields are found by pattern, not by column position. Which test printed a log comes from its
``Collective test starting`` line, else from a ``*_perf`` name in the text or the file name
(the command line users paste with it; ``all_gather_perf_1node.txt`` and
``h100_all_reduce_perf.log`` name their program, ``foo_performance`` names none), else from the
columns where they tell (busbw/algbw is nccl-tests' bus factor), else from the caller.

A file may hold several runs one after the other (``for t in all_reduce_perf all_gather_perf; do
./$t; done > log``): each run starts with its preamble (its first ``# nccl-tests version``,
``# Collective test starting`` or ``# nThread`` line after the previous run's header), and
:func:`parse_nccl_runs` reads each as a log of its own, named ``FILE (run K of N)``. A one-group
header (one placement only) takes its placement from the label line above it.

A line under the header that starts with a size (after the launcher's prefix) is a data line:
one that does not read as one is an error, except the log's last line when it is cut short (no
newline at its end, or fewer fields than a row has: the run or the copy stopped mid-line),
which is left out with a note. Rows whose ``#wrong`` is not 0 (before it: whose ``error``, the
largest deviation, is above nccl-tests' tolerance for the type) are left out with a note naming
their sizes: nccl-tests found wrong results there, so their times are not to be trusted. Rows
whose time is 0.00 (nccl-tests prints that, and inf for the bandwidths, only when the run went
wrong) or inf or nan are left out the same way, with a note naming their sizes and lines.
:attr:`NcclTestsLog.notes` holds those notes, and every row carries them as ``log_notes``
(rows travel without their log through :func:`ringccl.costmodel.fit.load_rows`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ArgumentError
from .nccl_columns import TYPE_SIZES, contradiction, infer_program, programs_agreeing
from .ringccl_text import ringccl_block, ringccl_rows

__all__ = ["NcclTestsLog", "parse_nccl_tests", "parse_nccl_runs", "read_nccl_tests",
           "looks_like_nccl_tests", "PROGRAMS", "TYPE_SIZES", "SOURCE"]

#: the ``source`` of rows read from nccl-tests output
SOURCE = "nccl-tests"
#: nccl-tests program (without ``_perf``) → ringccl's collective name
PROGRAMS = {"all_reduce": "all_reduce", "all_gather": "all_gather",
            "reduce_scatter": "reduce_scatter", "alltoall": "all_to_all",
            "sendrecv": "send_recv", "broadcast": "broadcast", "reduce": "reduce"}
_RANK = re.compile(r"#?\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+"
                   r"(\d+)\s+\[[^\]]*\]\s+(.*?)\s*$")
_STARTING = re.compile(r"Collective test starting:\s*(\S+)")
#: the lines a run's preamble starts with (nccl-tests prints "# nThread" in every version)
_RUN_START = re.compile(r"#\s*(?:nccl-tests version|Collective test starting|nThread\s)")
# a *_perf name: after no letter (a path, "h100_"), before none ("_1node.txt", "_mpi", ".log"
# follow; "foo_performance" is no program); the name may carry a prefix ("h100_1node_all_gather"):
# _program_name takes the program it ends with
_PROGRAM = re.compile(r"(?<![A-Za-z])([a-z][a-z_]*?)_perf(?![A-Za-z])")
_ENV = re.compile(r"\bNCCL_(ALGO|PROTO)=([A-Za-z0-9_,^]+)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*([0-9.eE+-]+)")
_NUM = r"[0-9.]+(?:[eE][+-]?\d+)?"
#: a line that starts with a size: nccl-tests' data lines (its other lines start with "#", a
#: launcher's or NCCL's lines with a host name or a word)
_SIZE_FIRST = re.compile(r"\d+(?:\s|$)")
#: the deviation the v2.0-era ``error`` column (the largest one, not a count) allowed per type
#: (nccl-tests' DeltaMaxValue: 16-bit 5e-2, float 1e-5, double 1e-12, integers none)
_TOLERANCE = {"half": 5e-2, "float16": 5e-2, "bfloat16": 5e-2, "float": 1e-5, "float32": 1e-5,
              "double": 1e-12, "float64": 1e-12}


@dataclass
class NcclTestsLog:
    """One nccl-tests run.

    Attributes:
        collective: ringccl's name (:data:`PROGRAMS`); program: e.g. "all_reduce_perf".
        world_size, ranks_per_node, nodes: the placement (from the rank lines; one node and
            ``world_size`` ranks when they are missing).
        hosts: host names in rank order of first appearance; device: the first rank's GPU.
        rows: one dict per size and placement (see :func:`parse_nccl_tests`).
        avg_busbw: the footer's average busbw in bytes/s (None when absent).
        nccl_algo, nccl_proto: NCCL_ALGO / NCCL_PROTO found in the text (None: not set).
        source: the file name or "<text>".
        notes: what was left out and why (a cut-off last line, rows with ``#wrong`` != 0).
    """

    collective: str
    program: str
    world_size: int
    ranks_per_node: int
    nodes: int
    hosts: list = field(default_factory=list)
    device: str = ""
    rows: list = field(default_factory=list)
    avg_busbw: float | None = None
    nccl_algo: str | None = None
    nccl_proto: str | None = None
    source: str = "<text>"
    notes: list = field(default_factory=list)


def looks_like_nccl_tests(text: str) -> bool:
    """True when ``text`` has nccl-tests' column header (``size`` … ``algbw`` … ``busbw``)."""
    return _header_line(text.splitlines()) is not None


def _is_header(line: str) -> bool:
    return "#" in line and bool(re.search(
        r"\bsize\b.*\bcount\b.*\btype\b.*\balgbw\b.*\bbusbw\b", line))


def _header_line(lines):
    return next((i for i, line in enumerate(lines) if _is_header(line)), None)


def _run_starts(lines: list[str], source: str) -> list[int]:
    """The first line of each run in ``lines`` (module doc): 0, then per further column header
    the first preamble line after the header before it.

    Raises:
        ArgumentError: a second header with no preamble between it and the one before.
    """
    headers = [i for i, line in enumerate(lines) if _is_header(line)]
    starts = [0]
    for before, h in zip(headers, headers[1:]):
        begin = next((i for i in range(before + 1, h) if _RUN_START.search(lines[i])), None)
        if begin is None:
            raise ArgumentError(
                f"{source}, line {h + 1}: a second nccl-tests column header with no run's "
                f"preamble ('# nThread ...') after the one at line {before + 1}; a file may "
                "hold several runs one after the other, each as nccl-tests prints it")
        starts.append(begin)
    return starts


def _placements(label: str, groups: int) -> list[str]:
    """The placement of each column group: nccl-tests prints out-of-place, then in-place; one
    group is the one its label line (the line above the header) names, else in-place."""
    if groups == 2:
        return ["out-of-place", "in-place"]
    named = re.findall(r"\b(out-of-place|in-place)\b", label)
    return named if len(named) == 1 else ["in-place"]


def _columns(header: str) -> tuple[list[str], list[int]]:
    """The header's column names and the index where each placement's group starts."""
    names = header[header.index("#") + 1:].split()
    names = [n for n in names if n != "timestamp"]
    starts = [i for i, n in enumerate(names) if n in ("time", "cputime")]
    if not starts or names[:3] != ["size", "count", "type"]:
        raise ArgumentError(f"not an nccl-tests column header: {header.strip()!r}")
    return names, starts


def _row_pattern(names: list[str], starts: list[int]) -> re.Pattern:
    lead = starts[0]  # size count type redop [root]
    parts = [r"(\d+)", r"(\d+)", r"(\w+)"] + [r"(\S+)"] * (lead - 3)
    # printf's "%f" of a time of 0 gives an algbw of inf (and 0/0 nan): read, then left out
    parts += [rf"({_NUM}|N/A|-?inf|-?nan)"] * (len(names) - lead)
    return re.compile(r"(?:^|\s)" + r"\s+".join(parts) + r"(?:\s|$)")


def _wrong(group: dict, type_: str) -> float | None:
    """The group's ``#wrong`` count (None for N/A); the v2.0-era ``error`` column as 0 within
    nccl-tests' tolerance for the type, else 1 (that layout prints no count)."""
    if "#wrong" in group:
        return None if group["#wrong"] == "N/A" else float(group["#wrong"])
    error = group.get("error")
    if error in (None, "N/A"):
        return None
    return 0.0 if float(error) <= _TOLERANCE.get(type_, 0.0) else 1.0


def _placement_fields(names, starts, values, where: str, placements) -> list[dict]:
    out = []
    for placement, start in zip(placements, starts):
        group = dict(zip(names[start:start + 4], values[start:start + 4]))
        time = group.get("time", group.get("cputime"))
        if time in (None, "N/A"):
            continue
        try:
            out.append({"placement": placement, "time_s": float(time) * 1e-6,
                        "algbw": float(group["algbw"]) * 1e9,
                        "busbw": float(group["busbw"]) * 1e9,
                        "wrong": _wrong(group, values[2])})
        except (KeyError, ValueError):
            raise ArgumentError(f"{where}: cannot read {placement} time/algbw/busbw from "
                                f"{values[start:start + 4]}") from None
    return out


def _placement_of_ranks(lines) -> tuple[list[str], list[str], str]:
    hosts_by_rank, devices = {}, []
    for line in lines:
        m = _RANK.search(line)
        if m:
            hosts_by_rank[int(m.group(1))] = m.group(2)
            devices.append(m.group(4))
    ordered = [hosts_by_rank[r] for r in sorted(hosts_by_rank)]
    return ordered, list(dict.fromkeys(ordered)), devices[0] if devices else ""


def _program_name(name: str) -> str:
    """The program a ``*_perf`` name ends with ("h100_1node_all_gather" -> "all_gather"; the
    longest: "x_all_reduce" is all_reduce, not reduce), else the name as found."""
    if name in PROGRAMS:
        return name
    ends = [p for p in PROGRAMS if name.endswith("_" + p)]
    return max(ends, key=len) if ends else name


def _own_name(found: str) -> str:
    """The program a found ``*_perf`` word names ("./build/all_reduce_perf_mpi" -> "all_reduce"),
    else the word."""
    names = _PROGRAM.findall(found)
    return _program_name(names[-1]) if names else found


def _given_program(collective: str) -> str:
    name = collective[:-5] if collective.endswith("_perf") else collective
    for prog, coll in PROGRAMS.items():
        if name in (prog, coll):
            return prog
    raise ArgumentError(f"collective={collective!r} is not an nccl-tests program ringccl "
                        f"reads; expected one of {', '.join(p + '_perf' for p in PROGRAMS)}")


_READS = ", ".join(p + "_perf" for p in PROGRAMS)


def _program(text: str, source: str, collective: str | None, offset: int = 0,
             file_name: bool = True) -> str:
    """The program that printed ``text``: its "Collective test starting" line (a ``collective``
    that contradicts it is refused), else ``collective``, else a ``*_perf`` name in the text or
    (``file_name``) the file name; "" when nothing names it. ``offset``: the text's first line
    number - 1 in the file."""
    given = None if collective is None else _given_program(collective)
    m = _STARTING.search(text)
    if m:
        own = _own_name(m.group(1))
        where = f"{source}, line {offset + text.count(chr(10), 0, m.start()) + 1}"
        if own not in PROGRAMS:
            raise ArgumentError(f"{where}: the run names {m.group(1)} ('Collective test "
                                f"starting'); ringccl reads {_READS}")
        if given is not None and given != own:
            raise ArgumentError(
                f"{where}: the log names its program, {own}_perf ('Collective test starting: "
                f"{m.group(1)}'), and program={collective!r} (fit --program) names {given}_perf; "
                "--program is for logs that do not name theirs: drop it (it applies to every "
                "log given)")
        return own
    found = _PROGRAM.findall(text) or (_PROGRAM.findall(Path(source).name) if file_name else [])
    names = list(dict.fromkeys(_program_name(f) for f in found))
    known = [n for n in names if n in PROGRAMS]
    if given is not None:
        if known and given not in known:
            raise ArgumentError(
                f"{source}: its text or file name names {', '.join(n + '_perf' for n in known)}, "
                f"and program={collective!r} (fit --program) names {given}_perf; --program is "
                "for logs that do not name theirs: drop it, or rename the file")
        return given
    names = known or names
    if len(names) == 1 and names[0] in PROGRAMS:
        return names[0]
    if names:
        raise ArgumentError(f"{source}: names {', '.join(n + '_perf' for n in names)}; ringccl "
                            f"reads {_READS} (pass the program when the log holds one of those: "
                            "ringccl fit --program all_reduce_perf)")
    return ""


def parse_nccl_tests(text: str, source: str = "<text>",
                     collective: str | None = None) -> NcclTestsLog:
    """Rows of one nccl-tests run (module doc).

    Each row: ``{"kind": "collective", "source": "nccl-tests", "backend": "nccl",
    "algorithm": "nccl", "collective", "world_size", "ranks_per_node", "nodes", "size"
    (bytes), "count", "type", "redop", "root", "placement", "time_s", "algbw" and "busbw"
    (bytes/s), "wrong" (0, or None for N/A), "device", "file", "nccl_algo", "nccl_proto",
    "segment_bytes": None, "log_notes"}``. A cut-off last line, rows whose ``#wrong`` is not 0
    (v2.0-era logs: whose ``error`` is above nccl-tests' tolerance for the type) and rows of
    time 0.00 are left out, each with a note (module doc).

    Args:
        text: the output as printed (prefixes from a launcher are tolerated).
        source: a name for messages and rows (the file name).
        collective: the program or collective (e.g. "alltoall_perf" or "all_to_all") when the
            text does not say which test printed it.
    Raises:
        ArgumentError: no column header or no data line, a test ringccl does not read, a log
            that does not say which test printed it (and ``collective`` not given), a
            ``collective`` other than the one the log names, ranks spread unevenly over hosts,
            a malformed data line other than a cut-off last one (the message gives its number
            and quotes it), no row left (every one with ``#wrong`` != 0 or time 0), a text of
            several runs (the message names the line where the second starts; read it with
            :func:`parse_nccl_runs`).
    """
    lines = text.splitlines()
    starts = _run_starts(lines, source)
    if len(starts) > 1:
        raise ArgumentError(f"{source}, line {starts[1] + 1}: a second nccl-tests run starts "
                            f"here ({len(starts)} runs in all); read it with parse_nccl_runs")
    return _parse_run(lines, 0, source, collective, not text.endswith(("\n", "\r")), True)


def parse_nccl_runs(text: str, source: str = "<text>",
                    collective: str | None = None) -> list[NcclTestsLog]:
    """Every nccl-tests run in ``text`` (runs printed one after the other into one file), each
    read as by :func:`parse_nccl_tests`; with several, run K of N is named
    ``"{source} (run K of N)"`` (its rows' ``file``) and its program comes from its own text
    only (not from the file name, which names at most one of them).

    Raises:
        ArgumentError: as :func:`parse_nccl_tests` for each run (line numbers are the file's),
            or a second column header with no run's preamble before it.
    """
    lines = text.splitlines()
    starts = _run_starts(lines, source)
    n = len(starts)
    if n == 1:
        return [parse_nccl_tests(text, source, collective)]
    cut = not text.endswith(("\n", "\r"))
    return [_parse_run(lines[a:b], a, f"{source} (run {k} of {n})", collective,
                       cut and k == n, False)
            for k, (a, b) in enumerate(zip(starts, starts[1:] + [len(lines)]), 1)]


def _parse_run(lines: list[str], offset: int, source: str, collective: str | None, cut: bool,
               file_name: bool) -> NcclTestsLog:
    """:func:`parse_nccl_tests` of one run's ``lines``, the first of them line ``offset + 1``
    of the file; ``cut``: the text ends without a newline; ``file_name``: the file name may
    name the program."""
    text = "\n".join(lines)
    h = _header_line(lines)
    if h is None:
        raise ArgumentError(f"{source}: no nccl-tests column header (a '#  size  count  type "
                            "... algbw  busbw' line); is this nccl-tests output?")
    names, starts = _columns(lines[h])
    placements = _placements(lines[h - 1] if h else "", len(starts))
    pattern = _row_pattern(names, starts)
    # the last line with text: a run killed mid-print (or a copy cut short) leaves it partial
    last = max((i for i in range(h + 1, len(lines)) if lines[i].strip()), default=None)
    rows, notes, wrong, zero, zero_lines, zero_zero, empty = [], [], {}, {}, [], True, []
    for i in range(h + 1, len(lines)):
        line, number = lines[i], offset + i + 1
        body = line.split("<stdout>:")[-1].strip()
        if body.startswith("#"):
            continue
        m = pattern.search(line)
        if not m:
            if not _SIZE_FIRST.match(body):
                continue  # not a data line (a launcher's or NCCL's message)
            if i == last and (cut or len(body.split()) < len(names)):
                notes.append(f"{source}, line {number}: the log's last line is cut short and "
                             f"was left out: {body!r}")
                continue
            raise ArgumentError(
                f"{source}, line {number}: {line.strip()!r} starts with a size but is not an "
                f"nccl-tests data line (expected {len(names)} columns, {' '.join(names)}, "
                f"numbers, inf, nan or N/A from {names[starts[0]]!r} on)")
        values = list(m.groups())
        base = {"size": int(values[0]), "count": int(values[1]), "type": values[2],
                "redop": values[3] if starts[0] > 3 else "",
                "root": values[4] if starts[0] > 4 else None}
        if base["size"] == 0:  # -b 0: a call that moves no byte, no row of the model's
            empty.append(number)
            continue
        for placed in _placement_fields(names, starts, values,
                                        f"{source}, line {number}: {line.strip()!r}", placements):
            if placed["wrong"]:  # nccl-tests checked the result and found it wrong
                wrong.setdefault(placed["placement"], []).append(base["size"])
                continue
            if not 0 < placed["time_s"] < math.inf:  # no measurement: the run went wrong
                zero.setdefault(placed["placement"], []).append(base["size"])
                zero_lines.append(number)
                zero_zero = zero_zero and placed["time_s"] == 0
                continue
            rows.append({**base, **placed})
    check = "#wrong != 0" if "#wrong" in names else "error above nccl-tests' tolerance"
    if wrong:
        notes.append(f"{source}: {check} at {_sizes_text(wrong)}: those rows are left out "
                     "(nccl-tests found wrong results there, so their times are not to be "
                     "trusted)")
    what = "time 0.00" if zero_zero else "time 0.00, inf or nan"
    if zero:
        lines_text = ", ".join(map(str, dict.fromkeys(zero_lines)))
        notes.append(f"{source}: {what} at {_sizes_text(zero)} (line"
                     f"{'s' if len(set(zero_lines)) > 1 else ''} {lines_text}): those rows are "
                     "left out (nccl-tests prints a time of 0 only when the run went wrong; it "
                     "is no measurement)")
    if empty:
        notes.append(f"{source}: size 0 (line{'s' if len(empty) > 1 else ''} "
                     f"{', '.join(map(str, empty))}): left out (nccl-tests' -b 0 row times a "
                     "call that moves nothing: its launch alone, no bytes to fit a bandwidth "
                     "to)")
    if not rows and (wrong or zero or empty):
        why = " or ".join(w for w, found in ((check, wrong), (what, zero), ("size 0", empty))
                          if found)
        raise ArgumentError(f"{source}: every data line has {why} (no measurement nccl-tests "
                            "vouches for), so no row is left")
    if not rows:
        raise ArgumentError(f"{source}: an nccl-tests header but no data line under it")
    by_rank, hosts, device = _placement_of_ranks(lines[:h])
    block = ringccl_block(text, source)
    if block is not None:  # ringccl bench's own text: ringccl's algorithms, not NCCL's
        n = block["world_size"]
        started = _STARTING.search(text)
        return NcclTestsLog(block["collective"], started.group(1) if started else "", n,
                            n // max(1, len(hosts)), max(1, len(hosts)), hosts, device,
                            ringccl_rows(block, rows, source, notes), None, None, None,
                            source, notes)
    program = _program(text, source, collective, offset, file_name)
    inferred, n_inferred = infer_program(rows, len(by_rank) or None)
    program = program or inferred
    if not program:
        raise ArgumentError(f"{source}: cannot tell which nccl-tests program printed this "
                            "(no 'Collective test starting' line, no *_perf name in the text or "
                            "file name); pass the program, e.g. ringccl fit --program "
                            "alltoall_perf")
    world = len(by_rank) or n_inferred
    if collective is not None:
        _check_columns(program, collective, rows, world, source)
    if not world:
        raise ArgumentError(f"{source}: no '#  Rank' lines and the columns do not give the "
                            "number of ranks; keep the device list in the log")
    counts = {host: by_rank.count(host) for host in hosts} or {"?": world}
    if len(set(counts.values())) > 1:
        raise ArgumentError(f"{source}: ranks spread unevenly over hosts "
                            f"({', '.join(f'{k}: {v}' for k, v in counts.items())}); the "
                            "network fit needs the same ranks on every node")
    ppn = next(iter(counts.values()))
    env = dict((k.lower(), v) for k, v in _ENV.findall(text))
    avg = _AVG.search(text)
    coll = PROGRAMS[program]
    extra = {"kind": "collective", "source": SOURCE, "backend": "nccl", "algorithm": "nccl",
             "collective": coll, "world_size": world, "ranks_per_node": ppn,
             "nodes": world // ppn, "device": device, "file": source, "segment_bytes": None,
             "nccl_algo": env.get("algo"), "nccl_proto": env.get("proto"), "log_notes": notes}
    return NcclTestsLog(coll, program + "_perf", world, ppn, world // ppn, hosts, device,
                        [{**extra, **r} for r in rows],
                        float(avg.group(1)) * 1e9 if avg else None, env.get("algo"),
                        env.get("proto"), source, notes)


def _check_columns(program: str, given: str, rows: list[dict], world: int | None,
                   source: str) -> None:
    """Refuse a program the caller gave that the log's columns contradict (its redop, size per
    count or bus factor: :func:`.nccl_columns.contradiction`), naming both."""
    why = contradiction(program, rows, world)
    if why is None:
        return
    agree = programs_agreeing(rows, world)
    read = (f"they read as {' or '.join(p + '_perf' for p in agree)}" if agree
            else "they read as no program ringccl reads")
    raise ArgumentError(f"{source}: program={given!r} (fit --program) names {program}_perf, and "
                        f"the log's columns contradict it ({why}); {read}. --program is for "
                        "logs that do not name theirs: give the program that printed this one")


def read_nccl_tests(path, collective: str | None = None) -> NcclTestsLog:
    """:func:`parse_nccl_tests` of a file.

    Raises:
        ArgumentError: unreadable file (named), or as :func:`parse_nccl_tests`.
    """
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        raise ArgumentError(f"cannot read nccl-tests output {str(path)!r}: {exc}") from None
    return parse_nccl_tests(text, str(path), collective)


def _sizes_text(by_placement: dict) -> str:
    """"1024, 2048 bytes (in-place); 4096 bytes (out-of-place)"."""
    return "; ".join(f"{', '.join(str(s) for s in sizes)} bytes ({placement})"
                     for placement, sizes in by_placement.items())
