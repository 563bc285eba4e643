"""Human units: counts, sizes, durations, bandwidths — bits versus bytes kept straight."""

import pytest

from ringccl import ArgumentError, units


@pytest.mark.parametrize("text,value", [("1000", 1000), ("1K", 1000), ("1M", 10**6),
                                        ("1Mi", 2**20), ("16Mi", 16 * 2**20), ("1e6", 10**6),
                                        ("1Ki", 1024), ("0", 0), (7, 7), ("1.5K", 1500)])
def test_count(text, value):
    assert units.count(text) == value


@pytest.mark.parametrize("text", ["1.5", "-1", "abc", "1MB", "1mi", "1Mx", ""])
def test_count_rejects(text):
    with pytest.raises(ArgumentError, match="count"):
        units.count(text)


@pytest.mark.parametrize("text,value", [("4MiB", 4 * 2**20), ("4MB", 4 * 10**6), ("4096", 4096),
                                        ("4KiB", 4096), ("100MB", 10**8), ("1GiB", 2**30),
                                        ("8bit", 1), ("64Kbit", 8000), ("2 MiB", 2 * 2**20),
                                        ("7EiB", 7 * 2**60), ("9EB", 9 * 10**18)])
def test_size(text, value):
    assert units.size(text) == value


def test_size_lowercase_b_is_ambiguous():
    with pytest.raises(ArgumentError, match="ambiguous: lowercase b means bits"):
        units.size("4Mb")


@pytest.mark.parametrize("text,value", [("5us", 5e-6), ("5µs", 5e-6), ("1.5ms", 1.5e-3),
                                        ("100ns", 1e-7), ("2s", 2.0), (0.5, 0.5)])
def test_duration(text, value):
    assert units.duration(text) == pytest.approx(value)


@pytest.mark.parametrize("text,value", [("400Gbps", 50e9), ("50GB/s", 50e9), ("900GB/s", 900e9),
                                        ("400Gb/s", 50e9), ("400Gbit/s", 50e9),
                                        ("50GBps", 50e9), ("1GiB/s", 2**30), (1e9, 1e9)])
def test_bandwidth_bits_versus_bytes(text, value):
    assert units.bandwidth(text) == pytest.approx(value)


@pytest.mark.parametrize("text", ["50GB", "fast", "0GB/s", "-1GB/s"])
def test_bandwidth_rejects(text):
    with pytest.raises(ArgumentError, match="bandwidth"):
        units.bandwidth(text)


def test_formatters():
    assert units.format_size(4 * 2**20) == "4.00 MiB"
    assert units.format_count(2**20) == "1Mi" and units.format_count(10**6) == "1M"
    assert units.format_duration(9.4e-5) == "94.00 us"
    assert units.format_bandwidth(5e10) == "50.00 GB/s"


@pytest.mark.parametrize("text,value", [("1e18", 10**18), ("0.1M", 100_000), ("1.5Ki", 1536),
                                        ("9223372036854775807", 2**63 - 1),
                                        ("1e3Mi", 1000 * 2**20)])
def test_count_is_exact(text, value):
    # parsed as decimals, not floats: 1e18 is 10^18, not float(1e18) rounded
    assert units.count(text) == value and type(units.count(text)) is int


@pytest.mark.parametrize("text", ["1e30", "9223372036854775808", "1e999999999", "9.3e18",
                                  "8Ei", "16E"])
def test_count_and_size_beyond_int64_are_refused(text):
    with pytest.raises(ArgumentError, match=r"is too large: at most 9223372036854775807"):
        units.count(text)
    with pytest.raises(ArgumentError, match=r"is too large"):
        units.size(text)


def test_a_bandwidth_needs_its_unit():
    with pytest.raises(ArgumentError, match=r"bandwidth '50e9' has no unit; a bandwidth > 0 is "
                       r"bytes/s \(50GB/s, 50GBps\) or bits/s \(400Gbps, 400Gb/s\)"):
        units.bandwidth("50e9")
    assert units.bandwidth(50e9) == 50e9   # a number is bytes/s
    assert units.format_size(2**60) == "1.00 EiB"


@pytest.mark.parametrize("text", ["1e400GB/s", "1e400Gbps", float("inf")])
def test_a_bandwidth_past_a_floats_range_is_called_not_finite(text):
    with pytest.raises(ArgumentError, match="is not a finite number of bytes/s"):
        units.bandwidth(text)
