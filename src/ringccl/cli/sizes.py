"""The command line's lists of message sizes (argparse types, which :mod:`.common` re-exports):
one parser, :func:`size_list`, for ``--size`` of ``model``, ``tune``, ``explore`` and ``nccl``,
``tune --tensor-sizes`` and ``fit --sizes``; and the rule every comma list of sizes follows
(:func:`entries`: no entry is empty), ``bench --segment-bytes`` included.

Every size is a whole number of bytes, as in nccl-tests (``-b``, ``-e`` and ``-i`` are byte
counts, ``-f`` an integer): a size such as ``1.5B`` is refused (:func:`ringccl.units.size`);
a range LOW:HIGH:FACTOR with an integer FACTOR gives the exact products LOW·FACTOR^k up to
HIGH (nccl-tests' ``-b``, ``-e``, ``-f``); a fractional FACTOR (``model``, ``tune``,
``explore``, ``fit``; ``nccl`` takes nccl-tests' integer only) gives ⌊LOW·FACTOR^k⌋ bytes,
computed exactly from the decimal FACTOR as written, each byte count once.
"""

from __future__ import annotations

import argparse
import math
import re
from fractions import Fraction

from .. import units
from ..errors import ArgumentError, RingcclError

__all__ = ["MAX_SIZES", "size_list", "entries", "refuse_negative"]

#: the most sizes one :func:`size_list` argument may give, counted before any is built.
#: nccl-tests' sweeps (-b/-e/-f: an integer factor >= 2) give at most 63 between 1 B and
#: 2^63 - 1 B, and a fine sweep such as 4KiB:1GiB:1.02 about 630; 1,000 sizes cost
#: ``ringccl model`` a few seconds on three world sizes, where the 2,079,452 of
#: 1B:1GiB:1.00001 would take it most of an hour (and ~10 GB of --json)
MAX_SIZES = 1000

#: what each entry of a comma list of sizes must be
_ENTRY = "a size > 0 bytes (e.g. 1KiB,4MiB, or a range such as 4KiB:1GiB)"


def refuse_negative(text: str, noun: str, allowed: str) -> None:
    """ArgumentTypeError naming ``text`` when it is negative: "count '-1' is negative: must be
    >= 0 elements" (``noun``: what the value is; ``allowed``: what it must be)."""
    if str(text).strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"{noun} {text!r} is negative: must be {allowed}")


def _shown(text: str) -> str:
    """``text`` as a refusal quotes it: a long one shortened to its ends."""
    return text if len(text) <= 60 else f"{text[:30]}...{text[-20:]}"


def entries(text: str, noun: str, allowed: str) -> list[str]:
    """The entries of the comma list ``text``, stripped.

    Raises:
        ArgumentError: an empty entry (``1KiB,,4MiB``, a leading or trailing comma, ``,``
            alone), naming ``text`` as ``noun``, the first empty entry and what each must be
            (``allowed``): "sizes '1KiB,,4MiB': entry 2 of 3 is empty; each entry must be ...".
    """
    items = [s.strip() for s in text.split(",")]
    for i, item in enumerate(items, 1):
        if not item:
            raise ArgumentError(f"{noun} {_shown(text)!r}: entry {i} of {len(items):,} is "
                                f"empty; each entry must be {allowed}")
    return items


def size_list(text: str, *, whole_bytes: bool = False, integer_factor: bool = False) -> list:
    """Message sizes (argparse type): ``4KiB:1GiB`` (LOW, 2·LOW, 4·LOW ... up to HIGH),
    ``4KiB:1GiB:4`` (FACTOR: any number > 1) or a comma list ``1KiB,4MiB``; every size
    a whole number of bytes > 0 (:func:`ringccl.units.size`; a fractional FACTOR's sizes
    rounded down, each kept once: module doc), at most :data:`MAX_SIZES` of them.

    Returns floats (whole numbers); with ``whole_bytes``, ints. ``integer_factor``: FACTOR is
    nccl-tests' ``-f``, an integer >= 2.

    Raises:
        argparse.ArgumentTypeError: naming ``text``: a size malformed, negative, fractional or
            0; an empty entry (:func:`entries`) or an empty LOW, HIGH or FACTOR; a range not
            LOW:HIGH[:FACTOR] or with LOW > HIGH; a FACTOR not a number > 1 (with
            ``integer_factor``: not an integer >= 2); more than :data:`MAX_SIZES` sizes,
            counted before any is built (a range's ⌊log(HIGH/LOW) / log(FACTOR)⌋ + 1), the
            message saying how many and the limit.
    """
    parts = text.split(":")
    for part in re.split("[:,]", text)[:2] if len(parts) > 1 else text.split(","):
        refuse_negative(part, "size", "> 0 bytes (e.g. 4KiB, 1MiB, 4KiB:1GiB)")
    try:
        if len(parts) > 1:
            # a fractional FACTOR rounds several small sizes down to one: keep it once
            out = list(dict.fromkeys(_size_range(text, parts, integer_factor)))
        else:
            items = entries(text, "sizes", _ENTRY)
            if len(items) > MAX_SIZES:
                raise ArgumentError(f"sizes {_shown(text)!r} are {len(items):,} sizes, over the "
                                    f"limit of {MAX_SIZES:,}")
            out = [units.size(s) for s in items]
            if min(out) <= 0:
                raise ArgumentError(f"sizes {text!r} must be one or more sizes > 0 bytes (e.g. "
                                    "4KiB, 1MiB, 4KiB:1GiB)")
    except RingcclError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return out if whole_bytes else [float(s) for s in out]


def _size_range(text: str, parts: list[str], integer_factor: bool) -> list[int]:
    """:func:`size_list`'s LOW:HIGH[:FACTOR] (``parts``), counted, then built in exact integer
    arithmetic: ⌊LOW·FACTOR^k⌋ up to HIGH. RingcclError naming ``text``."""
    if len(parts) > 3:
        raise ArgumentError(f"size range {text!r} must be LOW:HIGH or LOW:HIGH:FACTOR")
    for name, part in zip(("LOW", "HIGH", "FACTOR"), parts):
        if not part.strip():
            raise ArgumentError(f"size range {text!r}: {name} is empty; a range is LOW:HIGH "
                                "or LOW:HIGH:FACTOR (e.g. 4KiB:1GiB:4)")
    lo, hi = units.size(parts[0]), units.size(parts[1])
    given = parts[2].strip() if len(parts) == 3 else "2"
    try:
        factor = int(given) if integer_factor else float(given)
    except ValueError:
        factor = 0
    if integer_factor and factor < 2:
        raise ArgumentError(f"size range {text!r}: FACTOR {given!r} must be an integer >= 2 "
                            "(nccl-tests' -f)")
    if not 1 < factor < math.inf:  # nan and inf too
        raise ArgumentError(f"size range {text!r}: FACTOR {given!r} must be a number > 1")
    if not 0 < lo <= hi:
        raise ArgumentError(f"size range {text!r} needs 0 < LOW <= HIGH")
    count = math.floor(math.log(hi / lo) / math.log(factor) + 1e-9) + 1
    if count <= MAX_SIZES + 1:  # near the limit, the loop's own count decides (at most one over)
        try:
            step = Fraction(given)  # the decimal as written: 1.4 is 7/5, not 1.39999...
        except ValueError:
            step = Fraction(factor)
        out, num, den = [lo], lo, 1
        while len(out) <= MAX_SIZES:
            num, den = num * step.numerator, den * step.denominator
            if num > hi * den:
                break
            out.append(num // den)
        count = len(out)
    if count > MAX_SIZES:
        least = (hi / lo) ** (1 / (MAX_SIZES - 1))
        least = math.ceil(least) if integer_factor else math.ceil(least * 1e4) / 1e4
        raise ArgumentError(f"size range {_shown(text)!r} would give {count:,} sizes, over the "
                            f"limit of {MAX_SIZES:,}: a FACTOR of at least {least:g} stays "
                            "within it")
    return out
