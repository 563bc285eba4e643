"""Human units in and out; everything inside ringccl is SI (bytes, seconds, bytes/second).

Parsing rules (bits versus bytes kept straight: 400 Gb/s is 50 GB/s):

* counts (elements): ``1000``, ``1K`` = 10^3, ``1M`` = 10^6, ``1G`` = 10^9, ``1Ki`` = 2^10,
  ``1Mi`` = 2^20, ``16Mi``, ``1e6``; the result must be a whole number, computed exactly (no
  float rounding), at most :data:`MAX_INT` (2^63 - 1), as sizes.
* sizes (bytes): ``4096``, ``4096B``, ``4KB`` = 4·10^3, ``4KiB`` = 4·2^10, ``4MB``, ``4MiB``,
  ``1GB``, ``1GiB``. A lowercase ``b`` means bits and is refused for sizes as ambiguous
  (``4Mb``); write ``4Mbit`` if bits are meant.
* durations (seconds): ``5us`` (or ``5µs``), ``1.5ms``, ``100ns``, ``2s``.
* bandwidths (bytes/s): ``50GB/s`` and ``50GBps`` are bytes; ``400Gbps``, ``400Gb/s`` and
  ``400Gbit/s`` are bits, so ``400Gbps`` = 50e9 bytes/s; ``25GiB/s`` is binary. Text without
  a unit (``"50e9"``) is refused: bits or bytes must be said (a number, ``5e10``, is bytes/s).

Formatting follows nccl-tests: GB/s means 1e9 bytes/s.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from .errors import ArgumentError

__all__ = ["MAX_INT", "plural", "count", "size", "duration", "bandwidth", "format_count",
           "format_size", "format_duration", "format_bandwidth"]

_DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
            "E": 10**18}
_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_NUMBER = r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*"

#: the largest count or size the parsers return: numpy's int64 (a larger one indexes no array)
MAX_INT = 2 ** 63 - 1


def plural(n: int, word: str, words: str | None = None) -> str:
    """``"1 step"``, ``"2 steps"``: ``n`` and ``word``, plural ``words`` (default word + "s")
    unless ``n`` is 1."""
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _prefix(prefix: str, text: str, what: str) -> float:
    if prefix in _BINARY:
        return _BINARY[prefix]
    if prefix in _DECIMAL:
        return _DECIMAL[prefix]
    if prefix.lower() in ("ki", "mi", "gi", "ti") or prefix in ("m",):
        raise ArgumentError(f"{what} {text!r} is ambiguous; prefixes are K M G T (powers of 10) "
                            "or Ki Mi Gi Ti (powers of 2), case-sensitive")
    raise ArgumentError(f"{what} {text!r} has unknown prefix {prefix!r}; expected one of "
                        "K M G T Ki Mi Gi Ti")


def _refuse_negative(text: str, what: str, allowed: str, parse) -> None:
    """Refuse text that reads as a ``what`` but for its minus sign ("duration '-1us' is
    negative: a duration must be >= 0"), rather than calling it no ``what`` at all."""
    s = text.strip()
    if s.startswith("-"):
        try:
            parse(s[1:])
        except ArgumentError:
            return                          # not a value either way: the parser says so
        raise ArgumentError(f"{what} {text!r} is negative: a {what} must be {allowed}")


def _whole(number: str, scale: Fraction, text: str, what: str) -> int:
    """``number`` (decimal text, maybe with an exponent) times ``scale`` as an exact int: no
    float rounding (``1e18`` is 10^18 exactly); at most :data:`MAX_INT`."""
    rough = float(number) * float(scale)  # first, so that 1e999999 never becomes an exact int
    value = Fraction(number) * scale if math.isfinite(rough) and rough < 2 * MAX_INT else None
    if value is None or value > MAX_INT:
        raise ArgumentError(f"{what} {text!r} is too large: at most {MAX_INT} (2^63 - 1, the "
                            "largest int64)")
    if value.denominator != 1:
        raise ArgumentError(f"{what} {text!r} must be a whole number >= 0, got "
                            f"{float(value)!r}")
    return int(value)


def count(text: str | int) -> int:
    """Parse an element count such as ``"1Mi"`` (2^20) or ``"1M"`` (10^6); returns an int >= 0.

    Raises:
        ArgumentError: malformed, negative, fractional, an ambiguous prefix, or above
            :data:`MAX_INT`.
    """
    if isinstance(text, (int,)) and not isinstance(text, bool):
        if text < 0:
            raise ArgumentError(f"count {text} must be >= 0")
        return int(text)
    m = re.fullmatch(_NUMBER + r"([kKMGTPE]i?)?\s*", str(text))
    if not m:
        _refuse_negative(str(text), "count", ">= 0", count)
        raise ArgumentError(f"count {text!r} is not a count; examples: 1000, 1M (10^6), "
                            "1Mi (2^20), 16Mi")
    return _whole(m.group(1), Fraction(_prefix(m.group(2) or "", str(text), "count")),
                  str(text), "count")


def size(text: str | int | float) -> int:
    """Parse a size in bytes such as ``"4MiB"`` (4·2^20) or ``"4MB"`` (4·10^6); returns int bytes.

    Raises:
        ArgumentError: malformed, negative, fractional bytes, bits (``"4Mb"``) without "bit",
            or above :data:`MAX_INT`.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not math.isfinite(text) or text < 0:
            raise ArgumentError(f"size {text!r} must be a whole number >= 0")
        return _whole(repr(text), Fraction(1), str(text), "size")
    s = str(text)
    m = re.fullmatch(_NUMBER + r"([kKMGTPE]i?)?\s*(B|bits?|b)?\s*", s)
    if not m:
        _refuse_negative(s, "size", ">= 0", size)
        raise ArgumentError(f"size {s!r} is not a size; examples: 4096, 4KiB, 4MiB, 100MB, 1GiB")
    unit = m.group(3) or "B"
    if unit == "b":
        raise ArgumentError(f"size {s!r} is ambiguous: lowercase b means bits; write "
                            f"{m.group(1)}{m.group(2) or ''}B for bytes or "
                            f"{m.group(1)}{m.group(2) or ''}bit for bits")
    scale = Fraction(_prefix(m.group(2) or "", s, "size"))
    if unit.startswith("bit"):
        scale /= 8
    return _whole(m.group(1), scale, s, "size")


def duration(text: str | int | float) -> float:
    """Parse a duration such as ``"5us"``, ``"1.5ms"``; numbers are seconds. Returns seconds.

    Raises:
        ArgumentError: malformed, negative (said so: "duration '-1us' is negative") or not
            finite.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text)
        m = re.fullmatch(_NUMBER + r"(ns|us|µs|μs|ms|s|min)?\s*", s)
        if not m:
            _refuse_negative(s, "duration", ">= 0", duration)
            raise ArgumentError(f"duration {s!r} is not a duration; examples: 5us, 1.5ms, 2s")
        scale = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
                 "min": 60.0, None: 1.0}[m.group(2)]
        value = float(m.group(1)) * scale
    if not math.isfinite(value) or value < 0:
        raise ArgumentError(f"duration {text!r} must be a finite number of seconds >= 0")
    return value


def bandwidth(text: str | int | float) -> float:
    """Parse a bandwidth: ``"50GB/s"`` (bytes) or ``"400Gbps"`` (bits); numbers are bytes/s.

    Returns:
        bytes per second (float).
    Raises:
        ArgumentError: malformed, not positive, no unit (``"50e9"``: bits or bytes?), or a
            unit without a per-second part.
    """
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value = float(text)
    else:
        s = str(text)
        m = re.fullmatch(_NUMBER + r"([kKMGTP]i?)?\s*(B/s|Bps|bps|b/s|bit/s|bits/s)\s*", s)
        if not m:
            _refuse_negative(s, "bandwidth", "> 0", bandwidth)
        if not m and re.fullmatch(_NUMBER, s):  # bits or bytes: the unit must say
            raise ArgumentError(f"bandwidth {s!r} has no unit; a bandwidth > 0 is bytes/s "
                                "(50GB/s, 50GBps) or bits/s (400Gbps, 400Gb/s)")
        if not m:
            raise ArgumentError(f"bandwidth {s!r} is not a bandwidth; examples: 50GB/s (bytes), "
                                "400Gbps (bits), 900GB/s")
        value = float(m.group(1)) * _prefix(m.group(2) or "", s, "bandwidth")
        if m.group(3) in ("bps", "b/s", "bit/s", "bits/s"):
            value /= 8  # network rates are quoted in bits
    if not math.isfinite(value):   # "1e400GB/s": past a float's range
        raise ArgumentError(f"bandwidth {text!r} is not a finite number of bytes/s")
    if value <= 0:
        raise ArgumentError(f"bandwidth {text!r} must be > 0")
    return value


def _fmt(value: float, steps: list[tuple[float, str]], digits: int) -> str:
    for scale, unit in steps:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}f} {unit}".rstrip()
    scale, unit = steps[-1]
    return f"{value / scale:.{digits}f} {unit}".rstrip()


def format_size(nbytes: float, digits: int = 2) -> str:
    """``4194304`` -> ``"4.00 MiB"`` (binary prefixes, as buffer sizes are usually powers of 2)."""
    return _fmt(nbytes, [(2**60, "EiB"), (2**50, "PiB"), (2**40, "TiB"), (2**30, "GiB"),
                         (2**20, "MiB"), (2**10, "KiB"), (1, "B")], digits)


def format_count(n: int) -> str:
    """``1048576`` -> ``"1Mi"``; exact binary or decimal multiples keep their short form."""
    for scale, unit in ((2**30, "Gi"), (2**20, "Mi"), (2**10, "Ki"), (10**9, "G"), (10**6, "M"),
                        (10**3, "K")):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return str(n)


def format_duration(seconds: float, digits: int = 2) -> str:
    """``9.4e-5`` -> ``"94.00 us"``."""
    return _fmt(seconds, [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")], digits)


def format_bandwidth(bytes_per_second: float, digits: int = 2) -> str:
    """``5e10`` -> ``"50.00 GB/s"`` (GB = 1e9 bytes, as nccl-tests prints)."""
    return f"{bytes_per_second / 1e9:.{digits}f} GB/s"
