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
    format_cores,
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
        ("250000000n", Fraction(1, 4)),
        ("100u", Fraction(1, 10**4)),
        ("1E", Fraction(10**18)),
        ("-.5m", Fraction(-1, 2000)),
    ],
)
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize(
    "text",
    [
        *("", "m", "1.2.3", "1 Gi", "1gi", "1Kb", "1ki", "1e", "0x10", "1e500", " 1", "1e1.5"),
        *("1Ki3", "1ei", "+-1", ".", "1\u0663"),
    ],
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


# --- the grammar against a reference -----------------------------------------------------------
#
# A second, independent reading of resource.Quantity's grammar, written as the API server's
# scanner reads it (sign, digits, fraction, then the suffix looked up in its tables, an exponent
# parsed as a signed integer), character by character instead of with a regular expression.

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DIGITS = "0123456789"


def _reference(text: str) -> Fraction | None:
    """The quantity's value, or None where the API server refuses it."""
    pos, end = 0, len(text)
    negative = False
    if pos < end and text[pos] in "+-":
        negative = text[pos] == "-"
        pos += 1
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    whole = text[start:pos]
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        fraction = text[start:pos]
    if not whole and not fraction:
        return None
    mantissa = Fraction(int(whole or "0") * 10 ** len(fraction) + int(fraction or "0"))
    mantissa /= 10 ** len(fraction)
    suffix = text[pos:]
    if suffix in _DECIMAL:
        value = mantissa * Fraction(10) ** _DECIMAL[suffix]
    elif suffix in _BINARY:
        value = mantissa * 2 ** _BINARY[suffix]
    elif len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:].lstrip("+-") if suffix[1] in "+-" else suffix[1:]
        if len(suffix[1:]) - len(digits) > 1 or not digits or set(digits) - set(_DIGITS):
            return None
        exponent = int(suffix[1:])
        if abs(exponent) > 100:  # the parser's one documented limit
            return None
        value = mantissa * Fraction(10) ** exponent
    else:
        return None
    return -value if negative else value


_PIECES = st.sampled_from(
    ["", "+", "-", "0", "1", "7", "42", "007", ".", ".5", "5.", "e", "E", "e-", "E+", "3",
     "n", "u", "m", "k", "K", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "i",
     "ki", "mi", " ", "x", "101", "-2"]
)  # fmt: skip


def _parsed(text: str) -> Fraction | None:
    try:
        return parse_quantity(text)
    except QuantityError:
        return None


@settings(max_examples=2000)
@given(st.lists(_PIECES, max_size=6).map("".join))
def test_parser_agrees_with_the_reference_grammar(text: str) -> None:
    assert _parsed(text) == _reference(text)


@settings(max_examples=1000)
@given(st.text("0123456789.+-eEinumkKMGTP", max_size=8))
def test_parser_agrees_with_the_reference_on_any_text(text: str) -> None:
    assert _parsed(text) == _reference(text)


@settings(max_examples=500)
@given(
    sign=st.sampled_from(["", "+", "-"]),
    whole=st.integers(min_value=0, max_value=10**12),
    fraction=st.text(_DIGITS, max_size=9),
    suffix=st.sampled_from([*_DECIMAL, *_BINARY, "e3", "E-6", "e+2", "e0"]),
)
def test_every_grammatical_quantity_is_accepted(sign, whole, fraction, suffix) -> None:
    text = f"{sign}{whole}.{fraction}{suffix}" if fraction else f"{sign}{whole}{suffix}"
    value = parse_quantity(text)
    assert value == _reference(text)


@settings(max_examples=200)
@given(st.integers(min_value=0, max_value=10**9))
def test_cores_are_exact(milli: int) -> None:
    assert cpu_milli(format_cores(milli)) == milli
    assert "m" not in format_cores(milli)
