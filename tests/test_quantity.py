"""Kubernetes quantities: the one parser annotations, config and workload files share."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nri_topology.quantity import (
    QuantityError,
    cpu_milli,
    format_bytes,
    format_milli,
    memory_bytes,
    parse_quantity,
)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", Fraction(0)),
        ("1500m", Fraction(3, 2)),
        ("1.5", Fraction(3, 2)),
        (".5", Fraction(1, 2)),
        ("2.", Fraction(2)),
        ("+1k", Fraction(1000)),
        ("-1Ki", Fraction(-1024)),
        ("1M", Fraction(10**6)),
        ("1Mi", Fraction(2**20)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("1G", Fraction(10**9)),
        ("2T", Fraction(2 * 10**12)),
        ("1Ti", Fraction(2**40)),
        ("1P", Fraction(10**15)),
        ("1Pi", Fraction(2**50)),
        ("1E", Fraction(10**18)),
        ("1Ei", Fraction(2**60)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("12e-3", Fraction(12, 1000)),
        ("1.5e+2", Fraction(150)),
    ],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text", ["", "m", "1.2.3", "1 Gi", "1gi", "1Kb", "1ki", "1e", "0x10", "1e500"]
)
def test_parse_quantity_rejects(text):
    with pytest.raises(QuantityError):
        parse_quantity(text)


def test_cpu_and_memory_round_up():
    assert cpu_milli("0.0001") == 1
    assert cpu_milli("100m") == 100
    assert memory_bytes("0.5") == 1
    assert memory_bytes("1Ki") == 1024


_SUFFIX_VALUES = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "E": 10**18,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "Ei": 2**60,
}


@settings(max_examples=200)
@given(
    whole=st.integers(min_value=0, max_value=10**6),
    decimals=st.text("0123456789", max_size=4),
    suffix=st.sampled_from(sorted(_SUFFIX_VALUES)),
)
def test_quantity_matches_its_decimal_meaning(whole, decimals, suffix):
    text = f"{whole}.{decimals}{suffix}" if decimals else f"{whole}{suffix}"
    expected = (Fraction(f"{whole}.{decimals}") if decimals else whole) * _SUFFIX_VALUES[suffix]
    assert parse_quantity(text) == expected


@settings(max_examples=200)
@given(st.integers(min_value=0, max_value=10**9))
def test_milli_round_trip(milli):
    assert cpu_milli(format_milli(milli)) == milli
    whole, frac = divmod(milli, 1000)
    assert cpu_milli(f"{whole}.{frac:03d}") == milli  # the decimal spelling of the same amount


@settings(max_examples=100)
@given(st.integers(min_value=0, max_value=2**50), st.integers(min_value=-3, max_value=6))
def test_exponent_form(mantissa, exponent):
    assert parse_quantity(f"{mantissa}e{exponent}") == mantissa * Fraction(10) ** exponent


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("500m", 500),
        ("2", 2000),
        (2, 2000),
        (1.5, 1500),
        ("0.1", 100),
        ("1.0001", 1001),
        (".5", 500),
    ],
)
def test_cpu_quantities(text: str | int | float, milli: int) -> None:
    assert cpu_milli(text) == milli


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("512Mi", 512 << 20),
        ("1Gi", 1 << 30),
        ("1G", 10**9),
        ("100k", 100_000),
        (4096, 4096),
        ("1.5Gi", 3 << 29),
    ],
)
def test_memory_quantities(text: str | int, size: int) -> None:
    assert memory_bytes(text) == size


@pytest.mark.parametrize("text", ["", "two", "1.5.5", "-1", "5X", "1 Gi Gi", True])
def test_bad_quantities(text: Any) -> None:
    with pytest.raises(QuantityError):
        cpu_milli(text)


@pytest.mark.parametrize(
    ("size", "text"),
    [(512, "512"), (1 << 30, "1Gi"), (3 << 29, "1.5Gi"), (33149947904, "30.9Gi"), (1 << 40, "1Ti")],
)
def test_format_bytes(size: int, text: str) -> None:
    assert format_bytes(size) == text
